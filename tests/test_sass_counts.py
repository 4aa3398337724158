"""scripts/sass_counts.py's SASS readers on a synthetic listing (the compile part needs nvcc and
cuobjdump and runs by hand)."""

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "sass_counts.py"
_spec = importlib.util.spec_from_file_location("sass_counts", _PATH)
sass_counts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_counts)

LISTING = """\
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x10], R2 ;
        /*0020*/                   IMAD.WIDE R4, R3, 0x4, R6 ;
        /*0030*/                   LDGSTS.E.BYPASS.128 [R8], desc[UR6][R4.64] ;
        /*0040*/                   ARRIVES.LDGSTSBAR.64.ARVCNT [UR4+0x20] ;
        /*0050*/                   R2UR UR9, R9 ;
        /*0060*/                   HGMMA.64x32x16.F32.BF16 R24, R64, gdesc[UR8], R24 ;
        /*0070*/               @P1 BRA 0x50 ;
        /*0080*/                   STG.E [R2.64], R9 ;
        /*0090*/               @P2 BRA 0x10 ;
        /*00a0*/                   EXIT ;
"""


def test_producer_stage_and_hgmma_loops():
    lines = [line for line in LISTING.splitlines() if line.strip()]
    assert sass_counts.producer_stages(lines) == [3]  # wait, address, copy, arrive
    loops = sass_counts.hgmma_loops(lines)
    assert [size for size, _ in loops] == [3, 9]  # the k loop, then the loop around it
    assert loops[0][1]["HGMMA"] == 1 and loops[0][1]["R2UR"] == 1 and loops[0][1]["BRA"] == 1


def test_uniform_moves_in_the_k_loop():
    lines = [line for line in LISTING.splitlines() if line.strip()]
    assert sass_counts.uniform_moves(lines) == 1
    k_loop = sass_counts.hgmma_k_loop(lines)
    assert len(k_loop) == 3 and sass_counts.uniform_moves(k_loop) == 1  # R2UR, HGMMA, BRA
    assert sass_counts.hgmma_k_loop(lines[:2]) == []


def test_normalized_listing_drops_addresses_and_branch_targets():
    lines = [line for line in LISTING.splitlines() if line.strip()]
    norm = sass_counts.normalized(lines)
    assert norm[0] == "MOV R1, c[0x0][0x28]"  # operands kept, address and ';' gone
    assert norm[7] == "@P1 BRA TARGET" and norm[9] == "@P2 BRA TARGET"
    # the same code at other addresses reads the same
    shifted = [line.replace("/*00", "/*01") for line in lines]
    assert sass_counts.normalized(shifted) == norm
