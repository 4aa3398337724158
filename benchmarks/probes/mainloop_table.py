"""The wgmma k-loop probe's JSON lines (run_mainloop.sh) as a markdown table, one row a kernel
and grid: SM cycles a 64-column stage (median CTA, and the slowest), against the tile's tensor work
at the nominal 2048 BF16 MACs an SM cycle.

    python3 benchmarks/probes/mainloop_table.py mainloop.jsonl
"""

from __future__ import annotations

import json
import sys


def rows(records: list[dict]) -> list[str]:
    head = ("| tile | WM x BN x CWG | work | depth | CTAs | cycles/stage | slowest CTA | tensor nominal | "
            "tensor % | registers | local B | MHz |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in records:
        busy = 100.0 * r["tensor_cycles_nominal"] / r["cycles_per_stage"] if r["work"] != "dequant" else None
        out.append(
            f"| {r['tile']} | {r['wm']} x {r['bn']} x {r['cwg']} | {r['work']} | {r['depth']} | {r['grid']} | "
            f"{r['cycles_per_stage']:.0f} | {r['cycles_per_stage_slowest_cta']:.0f} | {r['tensor_cycles_nominal']:.0f} | "
            f"{'' if busy is None else f'{busy:.0f} %'} | {r['registers']} | {r['local_bytes']} | {r['mhz_estimate']:.0f} |")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        records = [json.loads(line) for line in f if line.strip()]
    print("\n".join(rows(records)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
