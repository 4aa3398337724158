"""Static cost of kernels on this machine (no GPU): ptxas registers and spills, and SASS
instruction counts of the two loops that matter in a wgmma kernel — the producer's stage (from
the wait on a ring slot's `empty` barrier to its cp.async arrive) and the consumers' k loop (the
backward branch around the HGMMAs).

    python3 scripts/sass_counts.py "indexed_wgmma(2, 32, 8, cwg=4)" "indexed_wgmma_streamk(2, 56, 8)"
    python3 scripts/sass_counts.py --ops "grouped_wgmma('masked', 2, 56, 6, 128)"
    python3 scripts/sass_counts.py --reachable wgmma      # every reachable kernel whose family holds "wgmma"

Whether a change leaves a kernel as it was, instruction for instruction: dump each tree's listing
(run each tree's own script, on its own package and csrc/) and diff the folders
(indexed-kernels.md v57 held the kernels without its flag to main's this way):

    PYTHONPATH=$A/packages/chord-runtime CHORD_CSRC_DIR=$A/csrc python3 $A/scripts/sass_counts.py --dump /tmp/a EXPR...
    PYTHONPATH=$B/packages/chord-runtime CHORD_CSRC_DIR=$B/csrc python3 $B/scripts/sass_counts.py --dump /tmp/b EXPR...
    diff -r /tmp/a /tmp/b

Each argument is a `chord_kernels.dispatch` expression returning a Launch. R2UR counts the moves
from vector to uniform registers: where ptxas cannot prove a value warp-uniform (a divergent branch
around the loop, a role chosen by `threadIdx.x`), the ring position, the wgmma descriptors or a
box's coordinates leave the uniform registers and come back by R2UR before each use (a producer
stage or consumer k loop longer than its neighbours' is the sign; grouped-kernels.md v42). A producer stage with a
branch (the column tile crossing N) counts both sides. Needs nvcc and cuobjdump on PATH (cuobjdump
ships in the triton wheel: triton/backends/nvidia/bin/). Why it exists: the v21 producer work
(docs/design/indexed-kernels.md) was steered by these counts before any device time was spent.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chord_kernels import dispatch
from chord_kernels.jit import compiler
from chord_kernels.jit.paths import csrc_dir
from chord_kernels.profiles import all_default_specs

_ADDR = re.compile(r"/\*([0-9a-f]{4,})\*/")
_OP = re.compile(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def sass_lines(cubin: Path) -> list[str]:
    text = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return [line for line in text.splitlines() if _ADDR.search(line) and _OP.search(line)]


def producer_stages(lines: list[str]) -> list[int]:
    """Instructions from each cp.async arrive back to the barrier wait before it."""
    out = []
    for i, line in enumerate(lines):
        if "ARRIVES.LDGSTSBAR" in line:
            j = i
            while j > 0 and "TRYWAIT" not in lines[j]:
                j -= 1
            out.append(i - j)
    return out


def hgmma_loop_bodies(lines: list[str]) -> list[list[str]]:
    """Every backward-branch loop that holds an HGMMA, as its lines, smallest first: the
    consumers' k loop, then the loops around it (tiles, stream-K segments)."""
    addr = [int(_ADDR.search(line).group(1), 16) for line in lines]
    bodies = []
    for i, line in enumerate(lines):
        m = re.search(r"BRA (0x[0-9a-f]+)", line)
        if m and int(m.group(1), 16) < addr[i]:
            body = [x for x, a in zip(lines, addr, strict=True) if int(m.group(1), 16) <= a <= addr[i]]
            if any("HGMMA" in x for x in body):
                bodies.append(body)
    return sorted(bodies, key=len)


def hgmma_loops(lines: list[str]) -> list[tuple[int, Counter]]:
    """(instructions, op counts) of each hgmma_loop_bodies loop, smallest first."""
    return [(len(body), Counter(_OP.search(x).group(1) for x in body)) for body in hgmma_loop_bodies(lines)]


def hgmma_k_loop(lines: list[str]) -> list[str]:
    """The innermost loop holding an HGMMA (the consumers' k loop), or []."""
    return next(iter(hgmma_loop_bodies(lines)), [])


def uniform_moves(lines: list[str]) -> int:
    """R2UR instructions (vector -> uniform register moves) in a listing or loop body."""
    return sum(_OP.search(line).group(1) == "R2UR" for line in lines)


_BRANCH_TARGET = re.compile(r"\b(BRA|BRX|CALL\.\w+|CALL|JMP|SSY|PBK|BSSY|WARPSYNC)(\b.*?)0x[0-9a-f]+")


def normalized(lines: list[str]) -> list[str]:
    """A listing without addresses, encodings and branch targets: equal for identical code, and a
    diff of two shows the instructions that moved rather than every shifted address."""
    out = []
    for line in lines:
        text = _ADDR.sub("", line).split(";")[0].strip()
        out.append(_BRANCH_TARGET.sub(r"\1\2TARGET", text))
    return out


def compile_cubin(expr, workdir: Path, csrc: Path | None = None):
    """(spec, cubin, nvcc's completed process) of a dispatch expression's kernel (or a KernelSpec),
    built with the JIT's own flags (the cubin the GPU runs; the flags include -lineinfo) from
    ``csrc``."""
    spec = eval(expr, vars(dispatch)).spec if isinstance(expr, str) else expr  # an expression from the command line
    # One file per spec, not per symbol: variants of one kernel (a traced build, another occupancy
    # bound) share the symbol and are compiled side by side in one work folder.
    src = workdir / f"{spec.symbol}_{hashlib.sha1(repr(spec).encode()).hexdigest()[:10]}.cu"
    src.write_text(spec.source())
    cubin = src.with_suffix(".cubin")
    res = subprocess.run(["nvcc", "-cubin", *compiler.compile_flags(spec, csrc or csrc_dir()), "-Xptxas", "-v",
                          "-o", str(cubin), str(src)], capture_output=True, text=True)
    return spec, cubin, res


def analyse(expr, workdir: Path, ops: bool, dump: Path | None = None) -> str:
    spec, cubin, res = compile_cubin(expr, workdir)
    label = expr if isinstance(expr, str) else "reachable"
    if res.returncode:
        return f"{label} ({spec.describe()}): compile failed\n{res.stderr[-2000:]}"
    regs = re.findall(r"Used (\d+) registers", res.stderr)
    spills = re.findall(r"(\d+) bytes spill stores", res.stderr)
    warnings = sorted(set(re.findall(r"C75\d\d", res.stderr)))
    lines = sass_lines(cubin)
    if dump is not None:  # one file a kernel, named by its symbol (a tree's variant of it diffs against it)
        (dump / f"{spec.symbol}.sass").write_text("\n".join(normalized(lines)) + "\n")
    k_loop = hgmma_k_loop(lines)
    report = [f"{label} -> {spec.describe()}",
              f"  registers {regs}, spill stores {spills} bytes, wgmma warnings {warnings or 'none'}, "
              f"{len(lines)} SASS instructions, R2UR {uniform_moves(lines)} (k loop {uniform_moves(k_loop)})",
              f"  producer stage(s): {producer_stages(lines) or 'none found'}"]
    for i, (size, counter) in enumerate(hgmma_loops(lines)):
        top = ", ".join(f"{op} {n}" for op, n in counter.most_common(12))
        kind = "consumer k loop" if i == 0 else "an enclosing loop"
        report.append(f"  {kind}: {size} instructions" + (f" ({top})" if ops else ""))
    return "\n".join(report)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("launches", nargs="*", help="dispatch expressions, e.g. \"indexed_wgmma(2, 32, 8, cwg=4)\"")
    parser.add_argument("--ops", action="store_true", help="op mix of each HGMMA loop")
    parser.add_argument("--reachable", metavar="TEXT",
                        help="also every kernel the dispatch can pick whose family holds TEXT (\"\" for all)")
    parser.add_argument("--dump", metavar="DIR", type=Path,
                        help="also write each kernel's normalized listing to DIR/<symbol>.sass (to diff two trees)")
    args = parser.parse_args(argv)
    launches = list(args.launches)
    if args.reachable is not None:  # what CI compiles (profiles.all_default_specs)
        launches += sorted((spec for spec in all_default_specs() if args.reachable in spec.family),
                           key=lambda spec: spec.symbol)
    if not launches:
        parser.error("no kernels: give dispatch expressions or --reachable")
    if args.dump is not None:
        args.dump.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        for text in pool.map(lambda e: analyse(e, Path(tmp), args.ops, args.dump), launches):
            print(text, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
