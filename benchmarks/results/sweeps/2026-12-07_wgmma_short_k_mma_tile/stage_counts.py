"""SASS of the stream-K mma tile's stage math, with and without wg_mma.diff's WG_MMA (no GPU).

Counts the instructions from the stage's last copy or barrier before its first MMA to its last
MMA (HMMA, or HGMMA and the warpgroup wait after it), by opcode. The span also holds the loader's
next-segment arithmetic (IMAD, IABS, I2F: the same on both sides); the MMA side is what differs.

    bash benchmarks/ab_tree.sh HEAD wgm --patch <this folder>/wg_mma.diff
    cd .ab/wgm && PYTHONPATH=$PWD/packages/chord-runtime CHORD_CSRC_DIR=$PWD/csrc \
        python3 <this folder>/stage_counts.py            # main's tiles
    ... CHORD_EXP_WG_MMA=1 python3 <this folder>/stage_counts.py   # WG_MMA's

Needs nvcc and cuobjdump on PATH (scripts/sass_counts.py says where they come from); run from a
tree that has scripts/ (ab_tree.sh copies it).
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, "scripts")
import sass_counts  # noqa: E402
from chord_kernels.dispatch.indexed import indexed_mma_streamk  # noqa: E402

TILES = ((4, 2, 128, 2), (2, 2, 256, 3), (4, 4, 128, 2))  # (NT, TT, STAGE_K, STAGES): TP8 T=512 down's first


def opcode(text: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


def stage_math(lines: list[str]) -> Counter:
    ops = [m.group(1) for line in lines if (m := re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*)", line))]
    mmas = [i for i, t in enumerate(ops) if opcode(t).split(".")[0] in ("HMMA", "HGMMA")]
    start = max(i for i, t in enumerate(ops[: mmas[0]]) if opcode(t).startswith(("LDGSTS", "BAR")))
    end = mmas[-1]
    while end + 1 < len(ops) and opcode(ops[end + 1]).startswith("WARPGROUP"):
        end += 1
    return Counter(opcode(t).split(".")[0] for t in ops[start + 1 : end + 1])


def main() -> int:
    with tempfile.TemporaryDirectory() as work:
        for args in TILES:
            launch = indexed_mma_streamk(*args)
            spec, cubin, res = sass_counts.compile_cubin(launch.spec, Path(work))
            if res.returncode:
                print(f"{spec.symbol}: compile failed\n{res.stderr[-2000:]}")
                return 1
            regs = re.findall(r"Used (\d+) registers", res.stderr)
            spills = re.findall(r"(\d+) bytes spill stores", res.stderr)
            counts = stage_math(sass_counts.sass_lines(cubin))
            print(f"{spec.symbol}: {launch.spec.min_blocks_per_sm} CTAs an SM, registers {regs}, spill stores {spills}")
            print(f"  stage math {sum(counts.values())}: " + ", ".join(f"{k} {v}" for k, v in counts.most_common(16)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
