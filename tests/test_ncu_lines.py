"""scripts/ncu_lines.py's readers on a synthetic nvdisasm listing and ncu source-page CSV (the
compile part needs nvcc and nvdisasm and runs by hand)."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "ncu_lines.py"
_spec = importlib.util.spec_from_file_location("ncu_lines", _PATH)
ncu_lines = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ncu_lines)

LISTING = """\
        .text.chord_kernel:
        //## File "/work/main/csrc/common/w4a16_fragment.cuh", line 87 inlined at "x.cuh", line 3
        /*0000*/                   LOP3.LUT R9, R9, 0xf, RZ, 0xc0, !PT ;
        //## File "/usr/local/cuda/include/cuda_bf16.hpp", line 2576
        /*0010*/                   HADD2.BF16_V2 R4, R9, -136, -136 ;
        //## File "/work/main/csrc/common/mma_sm80.cuh", line 16
        /*0020*/               @P0 HMMA.16816.F32.BF16 R24, R4, R6, R24 ;
        /*0030*/                   EXIT ;
"""

ROWS = [["Kernel Name", "k"],
        ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"],
        ["0x7f0000001000", "      LOP3.LUT R9, R9, 0xf, RZ, 0xc0, !PT", "3", "100"],
        ["0x7f0000001010", "      HADD2.BF16_V2 R4, R9, -136, -136", "1", "100"],
        ["0x7f0000001020", "@P0   HMMA.16816.F32.BF16 R24, R4, R6, R24", "5", "50"],
        ["0x7f0000001030", "      EXIT", "", "10"]]


def test_opcode_drops_guard_and_modifiers():
    assert ncu_lines.opcode("@!P1  IMAD.WIDE R4, R3, 0x4, R6") == "IMAD"
    assert ncu_lines.opcode("HMMA.16816.F32.BF16 R24, R4, R6, R24") == "HMMA"


def test_counts_by_line_and_opcode():
    lines = ncu_lines.disassembly_lines(LISTING)
    assert lines[0x20] == ("@P0 HMMA.16816.F32.BF16 R24, R4, R6, R24", "mma_sm80.cuh:16")
    insns, samples, ops = ncu_lines.by_line(ncu_lines.executed(ROWS), lines)
    assert insns == {"w4a16_fragment.cuh:87": 100, "cuda_bf16.hpp:2576": 100, "mma_sm80.cuh:16": 60}
    assert samples["mma_sm80.cuh:16"] == 5 and ops["HMMA"] == 50 and ops["EXIT"] == 10


def test_a_different_build_is_refused():
    lines = ncu_lines.disassembly_lines(LISTING.replace("HADD2.BF16_V2", "HMUL2.BF16_V2"))
    with pytest.raises(SystemExit, match="SASS differs at \\+0x10"):
        ncu_lines.by_line(ncu_lines.executed(ROWS), lines)
