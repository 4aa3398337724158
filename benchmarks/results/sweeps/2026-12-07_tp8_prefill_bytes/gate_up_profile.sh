#!/usr/bin/env bash
# TP8 T=2048 gate_up, where Humming's stream-K 56 x 512 tile leads main's tile loop (5 % on the
# H100's 191deeb grid, 2 % on the H200's b0cbab7): ncu full set of both sides, one checked call each
# (clocks not locked), then the metrics side by side (summary.txt). Usage: OUT=... bash gate_up_profile.sh
set -uo pipefail
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-.out}/prof; mkdir -p "$OUT"
export NCU_METRICS=${NCU_METRICS:-dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min}
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
for side in chord humming; do
  timeout 240 bash benchmarks/ncu_point.sh $side tp8 2048 gate_up
done
for f in "$OUT"/*.txt; do
  [[ $f == */gpu.txt ]] && continue
  echo "== ${f##*/}"
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|L2 Hit Rate|L1/TEX Hit|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|dram__bytes|lts__t_sect|sm__cycles_active|Executed Instructions  |No Eligible|Eligible Warps|Active Warps Per|Warp Cycles Per Issued" "$f" | head -40
done > "$OUT/summary.txt" 2>&1
rm -f "$OUT"/*.ncu-rep
