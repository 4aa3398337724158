"""Read benchmarks/cta_trace.sh's JSON: per point and kernel, the launch's balance (CTA cycles,
SM busy spans), the CTAs' cycles along the CTA index (a stream-K run is a contiguous range of the
work, so costly work shows as a range of slow CTAs), by their arrival on their SM (a scheduler
effect shows there), by their work (stream-K kernels note it), and the busiest and idlest SMs
with their CTAs.

    python3 -m benchmarks.cta_trace_report FILE.json [--bins 12] [--sms 8]
"""

from __future__ import annotations

import argparse
import json

from chord_kernels import cta_trace


def report(path: str, bins: int, sms: int) -> str:
    lines = []
    for point in json.load(open(path))["points"]:
        traces = cta_trace.from_json(point.get("cta_trace") or {})
        if not traces:
            continue
        lines.append(f"## {point.get('scenario')} T={point.get('tokens')} {point.get('dist')} {point.get('proj')}: "
                     f"{point.get('config', '')}")
        lines.append(cta_trace.format_summary(traces))
        for symbol, records in traces.items():
            lines.append(f"  {symbol} by CTA index (first, last, mean cycles, mean iterations):")
            lines.append("    " + ", ".join(map(str, cta_trace.index_profile(records, bins))))
            lines.append("    by arrival on its SM (rank, CTAs, mean cycles, mean iterations): "
                         + ", ".join(map(str, cta_trace.by_arrival(records))))
            lines.append("    by work ((iterations, segments, split tiles, row tiles), CTAs, mean cycles): "
                         + "; ".join(map(str, cta_trace.by_work(records)[:8])))
            loads = sorted(cta_trace.sm_loads(records), key=lambda s: s.busy_cycles)
            lines.append("    idlest SMs (sm, busy cycles, CTAs): "
                         + "; ".join(f"{s.sm} {s.busy_cycles} {list(s.ctas)}" for s in loads[:sms]))
            lines.append("    busiest SMs (sm, busy cycles, CTAs): "
                         + "; ".join(f"{s.sm} {s.busy_cycles} {list(s.ctas)}" for s in loads[::-1][:sms]))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json")
    parser.add_argument("--bins", type=int, default=12)
    parser.add_argument("--sms", type=int, default=8)
    args = parser.parse_args(argv)
    print(report(args.json, args.bins, args.sms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
