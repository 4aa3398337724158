"""Reuse distance of an expert's second row-tile read of the same weight slab, row vs column
order, under an equal-speed model of the mma stream-K schedule (every CTA one iteration a time
unit; grouped-kernels.md v59). A re-read is counted as DRAM traffic when the GPU streamed more
than the L2 (50 MiB) between the two reads. The routing: the files `python3 -m
benchmarks.dispatch_map --family grouped --scenarios ep8 --tokens 20,32` draws (seed 0) into
ROUTING_DIR (argv[1], default /tmp/chord_dispatch_map_routing_seed0)."""
import sys

import torch
from chord_kernels.wave_model import streamk_run

L2_BYTES = 50 * 2**20


def read_times(row_tiles, col_tiles, stages, grid, by_column):
    """(row tile, column tile, stage) -> the time unit its weights are read (StreamKWork with the
    mma rule over deep K: every tile data-parallel when the tiles make whole waves or one partial
    wave fills 3/4 of the grid, else all but the last one to two waves)."""
    tiles = row_tiles * col_tiles
    waves, rem = divmod(tiles, grid)
    all_whole = rem == 0 or (waves == 0 and rem * 8 >= grid * 6)
    dp = tiles if all_whole else max(waves - 1, 0) * grid
    run = streamk_run(tiles - dp, stages, grid)

    def place(t):
        return (t % row_tiles, t // row_tiles) if by_column else (t // col_tiles, t % col_tiles)

    times = {}
    for t in range(dp):
        for s in range(stages):
            times[(*place(t), s)] = (t // grid) * stages + s
    base = (dp // grid) * stages
    for g in range((tiles - dp) * stages):
        times[(*place(dp + g // stages), g % stages)] = base + g % run
    return times


def analyse(counts, n, k, label, grid=528, tile_rows=8, cols=128, stage_k=256):
    experts = [e for e, c in enumerate(counts) for _ in range(-(-c // tile_rows))]  # a row tile's expert
    rows, col_tiles, stages = len(experts), -(-n // cols), k // stage_k
    per_unit = grid * cols * stage_k // 2 * (1 + 1 / 16)  # bytes the GPU streams a time unit (+ scales)
    for by_column in (False, True):
        times = read_times(rows, col_tiles, stages, grid, by_column)
        again = [abs(times[(r, c, s)] - times[(r - 1, c, s)]) for r in range(1, rows) if experts[r - 1] == experts[r]
                 for c in range(col_tiles) for s in range(stages)]
        dram = sum(dt * per_unit > L2_BYTES for dt in again)
        total = rows * col_tiles * stages
        print(f"{label} {'column' if by_column else 'row   '} order: row tiles {rows} on {len(set(experts))} experts, "
              f"DRAM re-reads {dram} of {total} slab-stages = {100 * dram / total:.1f} % extra weight bytes")


def main():
    routing_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/chord_dispatch_map_routing_seed0"
    for scenario, tokens, dist in (("ep8", 32, "uniform"), ("ep8", 20, "skew"), ("ep8", 20, "uniform")):
        ids = torch.load(f"{routing_dir}/routing_{scenario}_{dist}_T{tokens}.pt")["topk_ids"].flatten()
        counts = torch.bincount(ids[(ids >= 0) & (ids < 48)], minlength=48).tolist()
        for proj, n, k in (("gate_up", 4096, 7168), ("down", 7168, 2048)):
            analyse(counts, n, k, f"{scenario} {dist} T={tokens} {proj}:")


if __name__ == "__main__":
    main()
