"""Nsight Compute's per-instruction counts of one kernel, by source line, on this machine (no GPU).

    python3 scripts/ncu_lines.py SASS_CSV "indexed_mma_streamk(4, 2, 128, 3)" [--csrc DIR] [--top 40]

SASS_CSV is `ncu --import REP --page source --csv --print-source sass` of a profile with the source
counters (`benchmarks/ncu_point.sh` writes it as `<name>.sass.csv`). The kernel is rebuilt here
with the JIT's flags (they include -lineinfo) from the same sources; nvcc here and on the GPU
machine are the same version, so the SASS is the device's instruction for instruction — the script
checks every opcode and stops if one differs — and `nvdisasm --print-line-info` names each
instruction's source line. Prints the executed warp instructions and stall samples by line, then
by opcode. Why it exists: the profiles do not import the sources (`--import-source no`), so the
lines are put back after the lease, on the CPU machine, and the device time goes to profiling only
(`benchmarks/results/ncu/2026-12-03_tp8_down_t512_instructions.md`).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

_spec = importlib.util.spec_from_file_location("sass_counts", Path(__file__).with_name("sass_counts.py"))
sass_counts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_counts)

_LINE = re.compile(r'\s*//## File "([^"]+)", line (\d+)')
_INSN = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+([^.;][^;]*);")


def opcode(text: str) -> str:
    """The opcode of one SASS instruction's text, guard predicate and modifiers dropped."""
    words = text.strip().split()
    word = words[1] if words[0].startswith("@") else words[0]
    return word.split(".")[0]


def disassembly_lines(listing: str) -> dict[int, tuple[str, str]]:
    """Offset -> (instruction text, "file:line") from `nvdisasm --print-line-info` output."""
    where, out = None, {}
    for line in listing.splitlines():
        m = _LINE.match(line)
        if m:
            where = f"{Path(m.group(1)).name}:{m.group(2)}"
            continue
        m = _INSN.match(line)
        if m and where:
            out[int(m.group(1), 16)] = (m.group(2).strip(), where)
    return out


def executed(rows: list[list[str]]) -> list[tuple[int, str, int, int]]:
    """(offset from the kernel's first instruction, text, warp instructions executed, stall
    samples) of each instruction row of ncu's source-page CSV."""
    header = next(r for r in rows if "Instructions Executed" in r)
    i_addr, i_src = header.index("Address"), header.index("Source")
    i_n, i_s = header.index("Instructions Executed"), header.index("Warp Stall Sampling (All Samples)")
    body = [r for r in rows[rows.index(header) + 1:] if len(r) > i_n and r[i_n].isdigit()]
    base = int(body[0][i_addr], 16)
    return [(int(r[i_addr], 16) - base, r[i_src], int(r[i_n]), int(r[i_s] or 0)) for r in body]


def by_line(counts: list[tuple[int, str, int, int]], lines: dict[int, tuple[str, str]]) -> tuple[Counter, Counter, Counter]:
    """Instructions and stall samples by source line, and instructions by opcode; raises where the
    rebuilt kernel's SASS is not the profiled one."""
    insns, samples, ops = Counter(), Counter(), Counter()
    for offset, text, n, s in counts:
        if offset not in lines or opcode(lines[offset][0]) != opcode(text):
            raise SystemExit(f"SASS differs at +{offset:#x}: profiled {text.strip()!r}, rebuilt "
                             f"{lines.get(offset, ('nothing',))[0]!r} (another source or compiler?)")
        insns[lines[offset][1]] += n
        samples[lines[offset][1]] += s
        ops[opcode(text)] += n
    return insns, samples, ops


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sass_csv", type=Path)
    parser.add_argument("launch", help='a dispatch expression, e.g. "indexed_mma_streamk(4, 2, 128, 3)"')
    parser.add_argument("--csrc", type=Path, help="csrc/ of the profiled tree (default: this checkout's)")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    with args.sass_csv.open(newline="") as f:
        counts = executed(list(csv.reader(f)))
    with tempfile.TemporaryDirectory() as tmp:
        _, cubin, res = sass_counts.compile_cubin(args.launch, Path(tmp), args.csrc)
        if res.returncode:
            raise SystemExit(f"compile failed\n{res.stderr[-2000:]}")
        listing = subprocess.run(["nvdisasm", "--print-line-info", str(cubin)], capture_output=True, text=True,
                                 check=True).stdout
    insns, samples, ops = by_line(counts, disassembly_lines(listing))
    total, total_samples = sum(insns.values()), max(1, sum(samples.values()))
    print(f"{total / 1e6:.2f} M warp instructions, {total_samples} stall samples, {len(counts)} SASS instructions")
    print("| source line | M executed | share | stall samples |\n|---|---|---|---|")
    for where, n in insns.most_common(args.top):
        print(f"| {where} | {n / 1e6:.2f} | {100 * n / total:.1f} % | {100 * samples[where] / total_samples:.1f} % |")
    print("\n| opcode | M executed | share |\n|---|---|---|")
    for op, n in ops.most_common(args.top):
        print(f"| {op} | {n / 1e6:.2f} | {100 * n / total:.1f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
