"""The pair table's scan (csrc/indexed/paired_blocks.cuh, IndexedPairedRowTiles::count) mirrored in
Python chunk by chunk as the 128 threads of a CTA run it (8 blocks a thread, the run starts carried
by a max-scan over the threads before, tile starts an even distance from the run start), against the
plain pairing (runs of one local expert paired from their first block), on 3,000 random routings:
sorted, some corrupted with -1, out-of-range or stray experts, with garbage past the blocks. It
checks the algorithm, not the CUDA code (the GPU tests do): `python3 scan_mirror.py` prints ok.
"""

import itertools
import random

CAPACITY, THREADS = 1024, 128
PER_THREAD = CAPACITY // THREADS


def local_expert(expert_ids: list[int], block: int, blocks: int, experts: int) -> int:
    if block < 0 or block >= blocks:
        return -1
    e = expert_ids[block]
    return e if 0 <= e < experts else -1


def device_tiles(expert_ids: list[int], blocks: int, experts: int) -> list[tuple[int, bool]]:
    """(first block, holds the next block too) of each tile, in table order, as the CTA builds it."""
    chunks = [[local_expert(expert_ids, t * PER_THREAD - 1 + i, blocks, experts) for i in range(PER_THREAD + 2)]
              for t in range(THREADS)]
    last_starts = []
    for t, e in enumerate(chunks):
        last = -1
        for i in range(PER_THREAD):
            if e[i + 1] >= 0 and e[i + 1] != e[i]:
                last = t * PER_THREAD + i
        last_starts.append(last)
    tiles = []
    for t, e in enumerate(chunks):
        run_start = max([-1, *last_starts[:t]])  # the max-scan over the threads before
        for i in range(PER_THREAD):
            block = t * PER_THREAD + i
            if e[i + 1] >= 0 and e[i + 1] != e[i]:
                run_start = block
            if e[i + 1] >= 0 and (block - run_start) % 2 == 0:
                tiles.append((block, e[i + 2] == e[i + 1]))
    return tiles


def plain_tiles(expert_ids: list[int], blocks: int, experts: int) -> list[tuple[int, bool]]:
    local = [local_expert(expert_ids, b, blocks, experts) for b in range(blocks)]
    tiles = []
    for expert, run in itertools.groupby(range(blocks), key=lambda b: local[b]):
        run = list(run)
        if expert >= 0:
            tiles.extend((run[j], j + 1 < len(run)) for j in range(0, len(run), 2))
    return tiles


def main() -> None:
    rng = random.Random(1)
    for _ in range(3000):
        experts, blocks = rng.choice([3, 8, 50, 384]), rng.randint(0, CAPACITY)
        weights = [rng.expovariate(1) for _ in range(experts)]
        expert_ids = sorted(rng.choices(range(experts), weights=weights, k=blocks))
        if blocks and rng.random() < 0.3:
            for _ in range(rng.randint(1, 5)):
                expert_ids[rng.randrange(blocks)] = rng.choice([-1, experts + 3, rng.randrange(experts)])
        expert_ids += [rng.randint(-3, 1000) for _ in range(5)]  # garbage past the blocks
        assert device_tiles(expert_ids, blocks, experts) == plain_tiles(expert_ids, blocks, experts), (experts, blocks)
    print("ok")


if __name__ == "__main__":
    main()
