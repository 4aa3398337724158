"""The probes' JSON lines (run_probe.sh) as markdown tables, the renderer chosen by the records:

- mainloop (wgmma_mainloop.cu): one row a kernel and grid, SM cycles a 64-column stage (median CTA,
  and the slowest) against the tile's tensor work at the nominal 2048 BF16 MACs an SM cycle;
- weight_stream (weight_stream.cu): for each projection's geometry and ring, GB/s of the packed
  layout's runs and of one contiguous run a stage, their ratio, and each against the plain
  streaming read of the same buffer.

    python3 benchmarks/probes/tables.py mainloop.jsonl
"""

from __future__ import annotations

import json
import sys


def mainloop_rows(records: list[dict]) -> list[str]:
    head = ("| tile | WM x BN x CWG | work | depth | CTAs | cycles/stage | slowest CTA | tensor nominal | "
            "tensor % | registers | local B | MHz |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in records:
        # the tile's tensor work runs whole only where every consumer warpgroup issues wgmmas
        busy = (100.0 * r["tensor_cycles_nominal"] / r["cycles_per_stage"]
                if r["work"] in ("production", "both", "mma_only", "pingpong") else None)
        out.append(
            f"| {r['tile']} | {r['wm']} x {r['bn']} x {r['cwg']} | {r['work']} | {r['depth']} | {r['grid']} | "
            f"{r['cycles_per_stage']:.0f} | {r['cycles_per_stage_slowest_cta']:.0f} | {r['tensor_cycles_nominal']:.0f} | "
            f"{'' if busy is None else f'{busy:.0f} %'} | {r['registers']} | {r['local_bytes']} | {r['mhz_estimate']:.0f} |")
    return out


def weight_stream_rows(records: list[dict]) -> list[str]:
    ceiling = {r["proj"]: r["gbs"] for r in records if r["pattern"] == "read_stream"}
    rings: dict[tuple, dict[str, float]] = {}
    for r in records:
        if r["pattern"] != "read_stream":
            key = (r["proj"], r["rows"], r["stage_k"], r["slots"], r["ctas_per_sm"])
            rings.setdefault(key, {})[r["pattern"]] = r["gbs"]
    head = ("| proj | tile rows | stage K | slots x CTAs an SM | packed GB/s | contiguous GB/s | packed / contiguous | "
            "packed / read | contiguous / read |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]

    def share(a: float | None, b: float | None) -> str:
        return f"{100 * a / b:.0f} %" if a and b else ""

    for (proj, tile_rows, stage_k, slots, ctas), gbs in rings.items():
        packed, contiguous, read = gbs.get("packed"), gbs.get("contiguous"), ceiling.get(proj)
        out.append(f"| {proj} | {tile_rows} | {stage_k} | {slots} x {ctas} | {packed or 0:.0f} | {contiguous or 0:.0f} | "
                   f"{share(packed, contiguous)} | {share(packed, read)} | {share(contiguous, read)} |")
    for proj, gbs in ceiling.items():
        out.append(f"| {proj} | read_stream |  |  | {gbs:.0f} |  |  |  |  |")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        records = [json.loads(line) for line in f if line.strip()]
    render = weight_stream_rows if records and "pattern" in records[0] else mainloop_rows
    print("\n".join(render(records)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
