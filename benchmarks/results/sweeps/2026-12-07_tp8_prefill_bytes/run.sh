#!/usr/bin/env bash
# TP8 prefill on any GPU: (1) T=8192 down's DRAM bytes under ncu, Chord and Humming: whether the
# 96-row blocks' second read of each expert's weights reaches DRAM (then 192-row blocks on a
# 128 x 192 tile would halve it) or hits L2; (2) do_bench sweeps of the gate_up tiles below.
# Usage: OUT=... bash run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-.out}/ncu; mkdir -p "$OUT"
export NCU_SET=${NCU_SET:-basic}
export NCU_METRICS=${NCU_METRICS:-dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_active.avg,sm__cycles_active.max}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
for pt in "chord tp8 8192 down" "humming tp8 8192 down"; do
  timeout 200 bash benchmarks/ncu_point.sh $pt
done
python3 - "$OUT" > "$OUT/summary.txt" 2>&1 <<'PY'
import csv, glob, sys
keys = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sector_hit_rate.pct",
        "lts__t_sectors_srcunit_tex_op_read.sum", "sm__cycles_active.avg", "sm__cycles_active.max",
        "launch__grid_size", "launch__registers_per_thread")
for path in sorted(glob.glob(sys.argv[1] + "/*.raw.csv")):
    rows = list(csv.reader(open(path)))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if head is None:
        print(path, "no table"); continue
    names, units = rows[head], rows[head + 1]
    for r in rows[head + 2:]:
        vals = {k: (r[names.index(k)] + " " + units[names.index(k)]) for k in keys if k in names}
        print(path.rsplit("/", 1)[1], r[names.index("Kernel Name")][:60], vals)
PY
rm -f "$OUT"/*.ncu-rep "$OUT"/*.sass.csv
# TP8 prefill gate_up, where Humming's stream-K 56 x 512 / 96 x 256 tiles lead ours (H200 b0cbab7:
# T=2048 320.7 vs 314.0 µs, T=8192 952.2 vs 893.0): main's tile loop against our stream-K tiles
# (2 consumer warpgroups; at 56 rows also 4, which spills 112 bytes), do_bench ABBA-like order.
SK="CHORD_W4A16_INDEXED_KERNEL=wgmma_sk"
OUT=$OUT/sweep2048 SWEEP_BUDGET_S=60 timeout 300 bash benchmarks/sweep.sh --scenarios tp8 --tokens 2048 \
  --dists uniform,skew -- auto "sk2:$SK" "sk4:$SK:CHORD_W4A16_TUNING=CWG=4" auto2 > "$OUT/sweep2048.log" 2>&1
OUT=$OUT/sweep8192 SWEEP_BUDGET_S=60 timeout 200 bash benchmarks/sweep.sh --scenarios tp8 --tokens 8192 \
  -- auto "sk2:$SK" auto2 > "$OUT/sweep8192.log" 2>&1
