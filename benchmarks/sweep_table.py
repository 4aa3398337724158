"""Table of a config sweep (benchmarks/sweep.sh): µs per (scenario, dist, T, projection) and
their sum, one column per config JSON (bench_chord output), plus each config's kernel choice.

    python3 -m benchmarks.sweep_table OUT/sweep_a.json OUT/sweep_b.json ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(path: Path) -> dict[tuple, dict]:
    """(scenario, dist, tokens, proj) -> record, from a bench_chord results file; a grouped
    record's proj is prefixed with its path (contiguous/, masked/)."""
    data = json.loads(path.read_text())
    out = {}
    for rec in data.get("points", []):
        path = rec.get("path", "")
        proj = f"{path.removeprefix('grouped_')}/{rec['proj']}" if path.startswith("grouped_") else rec["proj"]
        out[(rec["scenario"], rec["dist"], rec["tokens"], proj)] = rec
    return out


def table(paths: list[Path]) -> str:
    runs = {p.stem.removeprefix("sweep_"): load(p) for p in paths}
    keys = sorted({k for recs in runs.values() for k in recs}, key=lambda k: (k[0], k[1], k[2], k[3]))
    labels = list(runs)
    lines = ["| scn | dist | T | proj | " + " | ".join(labels) + " |", "|---" * (4 + len(labels)) + "|"]
    sums: dict[tuple, dict[str, float]] = {}
    for key in keys:
        cells = []
        for label in labels:
            rec = runs[label].get(key)
            us = rec.get("us") if rec and rec.get("check") == "ok" else None
            cells.append(f"{us:.1f}" if us else (rec or {}).get("check", "-") or "-")
            path = key[3].rpartition("/")[0]  # grouped: one sum per path
            point = sums.setdefault((*key[:3], path), {}).setdefault(label, [0.0, 0])
            point[0] += us or 0.0
            point[1] += 0 if us else 1  # a projection without a time: no sum for this config
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | " + " | ".join(cells) + " |")
    for point, by_label in sorted(sums.items()):
        cells = [f"{by_label[label][0]:.1f}" if label in by_label and not by_label[label][1] else "-"
                 for label in labels]
        name = f"**{point[3]} sum**" if point[3] else "**sum**"
        lines.append(f"| {point[0]} | {point[1]} | {point[2]} | {name} | " + " | ".join(cells) + " |")
    # An errored point has no config (None): it is named by its status instead.
    configs = sorted({(label, key[3], rec.get("config") or rec.get("status") or "-") for label, recs in runs.items()
                      for key, rec in recs.items() if key[2] == max(k[2] for k in recs)})
    lines += ["", "Configs at the largest T:"] + [f"- {label} {proj}: {cfg}" for label, proj, cfg in configs]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table([Path(p) for p in sys.argv[1:]]))
