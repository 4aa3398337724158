"""Table of an A/B run under ncu (benchmarks/README.md, "Comparing two trees"): one bench_chord
run per tree and repeat, each under `ncu --nvtx --nvtx-include bench_point/ --clock-control base
--metrics gpu__time_duration.sum --csv`, files DIR/ncu_FAMILY_LABEL.csv and DIR/FAMILY_LABEL.json.
The kernels ncu timed (the checked call of each point, in run order) are matched to the JSON's
records in order; the table gives µs per point and label, and the candidate's change against the
base (means over their labels).

    python3 -m benchmarks.ncu_ab_table DIR grouped old new new2 old2 --base old,old2 --cand new,new2
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path


def kernel_times(csv_path: Path) -> list[tuple[str, float]]:
    """(kernel name, µs) of every Chord kernel ncu timed, in launch order."""
    lines = [line for line in csv_path.read_text().splitlines() if line.startswith('"')]
    out = []
    for row in csv.DictReader(lines):
        if row["Metric Name"] == "gpu__time_duration.sum" and row["Kernel Name"].startswith("chord"):
            out.append((row["Kernel Name"].removeprefix("chord_"), float(row["Metric Value"].replace(",", "")) / 1e3))
    return out


def point_key(rec: dict) -> str:
    path = rec.get("path", "indexed").removeprefix("grouped_")
    return f"{path} {rec['scenario']} {rec['dist']} T{rec['tokens']} {rec['proj']}"


def launches_per_call(rec: dict) -> int:
    """Kernels one call launches: 2 for a grouped pair of tile loops (dispatch.Launch.pick; the
    config says "paired with"), of which the device runs one, else 1."""
    return 2 if "; paired with " in (rec.get("config") or "") else 1


def load(directory: Path, family: str, label: str) -> dict[str, tuple[str, float]]:
    """point -> (kernel, µs): the JSON's checked records matched in order to ncu's kernels (a
    pair's two summed, named by the one that ran: the longer, marked "+pair"). A record whose check
    failed ran its kernels too (a wrong candidate, or a diagnostic build such as the feed-only one,
    which is wrong by design): timed, and its kernel marked "(check failed)"."""
    records = [r for r in json.loads((directory / f"{family}_{label}.json").read_text())["points"]
               if r.get("check") in ("ok", "fail", "nan")]
    kernels = kernel_times(directory / f"ncu_{family}_{label}.csv")
    want = sum(launches_per_call(r) for r in records)
    if len(kernels) != want:
        raise SystemExit(f"{family}_{label}: {len(kernels)} kernels timed for {len(records)} checked points "
                         f"({want} launches)")
    out, i = {}, 0
    for rec in records:
        call = kernels[i:i + launches_per_call(rec)]
        i += len(call)
        name = max(call, key=lambda kernel: kernel[1])[0] + (" +pair" if len(call) > 1 else "")
        name += "" if rec["check"] == "ok" else " (check failed)"
        out[point_key(rec)] = (name, sum(us for _, us in call))
    return out


def table(directory: Path, family: str, labels: list[str], base: list[str], cand: list[str]) -> str:
    runs = {label: load(directory, family, label) for label in labels}
    keys = list(dict.fromkeys(k for run in runs.values() for k in run))
    lines = ["| point | " + " | ".join(labels) + " | change | kernel (base / candidate) |",
             "|---" * (len(labels) + 3) + "|"]
    for key in keys:
        us = {label: runs[label][key][1] for label in labels if key in runs[label]}
        cells = [f"{us[label]:.1f}" if label in us else "-" for label in labels]
        b = [us[label] for label in base if label in us]
        c = [us[label] for label in cand if label in us]
        change = f"{(sum(c) / len(c)) / (sum(b) / len(b)) * 100 - 100:+.1f} %" if b and c else "-"
        kb = next((runs[label][key][0] for label in base if key in runs[label]), "-")
        kc = next((runs[label][key][0] for label in cand if key in runs[label]), "-")
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {change} | {kb if kb == kc else kb + ' / ' + kc} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("family", choices=("indexed", "grouped"))
    parser.add_argument("labels", nargs="+", help="run labels, in run order")
    parser.add_argument("--base", required=True, help="comma-separated labels of the base tree")
    parser.add_argument("--cand", required=True, help="comma-separated labels of the candidate tree")
    args = parser.parse_args(argv)
    print(table(args.dir, args.family, args.labels, args.base.split(","), args.cand.split(",")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
