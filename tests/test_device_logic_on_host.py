"""Device code's integer logic run on the CPU (tests/host_emu/): the kernel headers themselves,
compiled for the host with the CTA's threads, barrier, warp shuffles and shared memory emulated
(cuda_on_host.h), checked against plain-Python specs on real and adversarial routings.

Why: a wrong index in a row-tile table or the stream-K schedule is a wrong output or a hang on the
GPU, and the GPU is lent rarely. These run in CI: the pair tiles of IndexedMmaDecodeDual (v83) had
never run anywhere before this test."""

import itertools
import random
import subprocess
from pathlib import Path

import pytest
import torch
from chord_kernels.dispatch import indexed as dispatch_indexed
from chord_kernels.routing import moe_align_block_size

from benchmarks.make_routing import popularity, route

HOST_EMU = Path(__file__).parent / "host_emu"
PAIR_CAPACITY = dispatch_indexed.PAIRED_BLOCKS_CAPACITY  # IndexedPairedRowTiles::kCapacity
INT_MAX = 2**31 - 1


def build(real_nvcc: str, tmp_path: Path, name: str) -> Path:
    """tests/host_emu/NAME.cpp, compiled for the host against csrc/."""
    from chord_kernels.jit.paths import csrc_dir

    exe = tmp_path / name
    done = subprocess.run([real_nvcc, "-std=c++20", "-O1", "-I", str(csrc_dir()),
                           "-I", str(HOST_EMU), "-o", str(exe), str(HOST_EMU / f"{name}.cpp")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return exe


def run_lines(exe: Path, cases: list[str], *args: str) -> list[str]:
    done = subprocess.run([str(exe), *args], input="\n".join(cases) + "\n", capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    return done.stdout.splitlines()


# --- IndexedPairedRowTiles (csrc/indexed/paired_blocks.cuh) ---------------------------------------


def used_blocks(num_blocks: int, block_m: int, padded: int) -> int:
    """The routing blocks before num_tokens_padded."""
    return min(num_blocks, -(-max(padded, 0) // block_m))


def short_tiles_spec(expert_ids: list[int], block_m: int, num_experts: int, padded: int,
                     sorted_len: int) -> list[tuple[int, int, int]]:
    """IndexedRowTiles<8>'s tiles, block_m / 8 a block, as (first row, rows, expert or -1)."""
    tiles = []
    for b in range(used_blocks(len(expert_ids), block_m, padded)):
        expert = expert_ids[b] if 0 <= expert_ids[b] < num_experts else -1
        for first in range(b * block_m, (b + 1) * block_m, 8):
            tiles.append((first, min(8, sorted_len - first), expert))
    return tiles


def pair_tiles_spec(expert_ids: list[int], block_m: int, num_experts: int, padded: int,
                    sorted_len: int) -> list[tuple[int, int, int]] | None:
    """The pair tiles as (first row, rows, expert), in block order: within each run of
    consecutive blocks of one local expert, a tile at every other block, holding the next one
    too where it is in the run. None where the kernel must fall back to its 8-row tile."""
    blocks = used_blocks(len(expert_ids), block_m, padded)
    if blocks > PAIR_CAPACITY or block_m != 8:
        return None
    local = [e if 0 <= e < num_experts else -1 for e in expert_ids[:blocks]]
    tiles = []
    for expert, run in itertools.groupby(range(blocks), key=lambda b: local[b]):
        run = list(run)
        if expert < 0:
            continue
        for i in range(0, len(run), 2):
            first = run[i] * block_m
            tiles.append((first, min((2 if i + 1 < len(run) else 1) * block_m, sorted_len - first), expert))
    return tiles


def pair_case(expert_ids: list[int], block_m: int, num_experts: int, padded: int, sorted_len: int) -> str:
    return " ".join(map(str, [len(expert_ids), block_m, num_experts, padded, sorted_len, *expert_ids]))


def check_pair_tiles(cases: list[tuple], lines: list[str]) -> None:
    short_cost, pair_cost = dispatch_indexed.PAIRED_COST
    assert len(lines) == len(cases)
    for (expert_ids, block_m, num_experts, padded, sorted_len), line in zip(cases, lines, strict=True):
        head, shorts_out = line.split(" |")
        shorts, count, runs_pairs, *tiles = head.split()
        want = pair_tiles_spec(expert_ids, block_m, num_experts, padded, sorted_len)
        where = (expert_ids[:24], block_m, num_experts, padded, sorted_len)
        want_shorts = short_tiles_spec(expert_ids, block_m, num_experts, padded, sorted_len)
        assert [tuple(map(int, t.split(":"))) for t in shorts_out.split()] == want_shorts, where
        assert int(shorts) == len(want_shorts), where
        if want is None:
            assert (int(count), int(runs_pairs), tiles) == (-1, 0, []), where
            continue
        got = [tuple(map(int, t.split(":"))) for t in tiles]
        assert got == want and int(count) == len(want), where
        assert int(runs_pairs) == (len(want) * pair_cost < len(want_shorts) * short_cost), where  # 8-row tiles win ties
        # Spec aside: every block of a local expert lies in exactly one tile, of its own expert.
        covered = [b for first, rows, _ in got for b in range(first // block_m, -(-(first + rows) // block_m))]
        blocks = used_blocks(len(expert_ids), block_m, padded)
        assert covered == [b for b in range(blocks) if 0 <= expert_ids[b] < num_experts], where
        assert all(expert_ids[b] == e for first, rows, e in got
                   for b in range(first // block_m, (first + rows - 1) // block_m + 1)), where


def test_pair_tiles_on_vllm_routings(tmp_path, real_nvcc):
    """The table every CTA of the dual kernel builds, on moe_align_block_size's own output for
    the TP8 grid's decode batches (uniform and skewed routers) and an EP8 rank's local experts."""
    exe = build(real_nvcc, tmp_path, "paired_tiles")
    cases = []
    for tokens, cv, experts, local in itertools.product((1, 8, 20, 32, 64, 128, 256), (0.0, 1.0), (384,), (384, 48)):
        topk = route(tokens, popularity(experts, cv, seed=tokens), 8, seed=tokens + 1)
        emap = None
        if local != experts:  # rank 3 of 8: its 48 experts, the rest not local
            emap = torch.full((experts,), -1, dtype=torch.int32)
            emap[3 * local:4 * local] = torch.arange(local, dtype=torch.int32)
        sorted_ids, expert_ids, padded = moe_align_block_size(topk, 8, experts, emap)
        cases.append((expert_ids.tolist(), 8, local, int(padded), sorted_ids.numel()))
    check_pair_tiles(cases, run_lines(exe, [pair_case(*c) for c in cases], *map(str, dispatch_indexed.PAIRED_COST)))
    assert any(len(pair_tiles_spec(*c)) < used_blocks(len(c[0]), 8, c[3]) for c in cases)  # some pairs formed


def test_pair_tiles_on_adversarial_blocks(tmp_path, real_nvcc):
    """Runs of every length, -1 and out-of-range experts between and inside them, an expert in
    two separate runs, num_tokens_padded cutting a run, zero or negative padded, sorted_len
    clipping the last tile, the table's capacity (1024 blocks fit, 1025 fall back) and 16-row
    blocks (fall back): every chunk and warp boundary of the CTA's scans is crossed."""
    exe = build(real_nvcc, tmp_path, "paired_tiles")
    rng = random.Random(20261208)
    cases = []
    for _ in range(160):
        num_experts = rng.choice((1, 3, 48, 384))
        ids = []
        target = rng.choice((0, 1, 2, 7, 8, 9, 31, 33, 255, 257, 600, 1023, 1024, 1025, 1100))
        while len(ids) < target:
            e = rng.choice((-1, num_experts, num_experts + 5, *[rng.randrange(num_experts)] * 6))
            ids += [e] * rng.choice((1, 1, 2, 2, 3, 4, 5, 9, 17, 40))
        ids = ids[:target]
        used = len(ids) - rng.choice((0, 0, 0, 1, 3)) if ids else 0
        padded = rng.choice((used * 8, used * 8 - rng.randrange(1, 8), 0, -5)) if used > 0 else rng.choice((0, -1))
        sorted_len = len(ids) * 8 - rng.choice((0, 0, 3))
        cases.append((ids, 8, num_experts, padded, max(sorted_len, 0)))
    cases.append(([0] * 40, 16, 1, 640, 640))  # 16-row blocks: the 8-row tile
    cases.append(([5] * 1024, 8, 48, 8 * 1024, 8 * 1024))  # the capacity, one expert
    cases.append(([5] * 1025, 8, 48, 8 * 1024, 8 * 1025))  # 1025 blocks, 1024 before padded: fits
    cases.append(([5] * 1025, 8, 48, 8 * 1025, 8 * 1025))  # 1025 blocks in use: falls back
    check_pair_tiles(cases, run_lines(exe, [pair_case(*c) for c in cases], *map(str, dispatch_indexed.PAIRED_COST)))
    assert any(pair_tiles_spec(*c) is None for c in cases) and any(len(pair_tiles_spec(*c) or []) > 200 for c in cases)


# --- the stream-K schedule (csrc/common/streamk_schedule.cuh) --------------------------------------


def check_schedule(case: tuple[int, ...], lines: list[str]) -> int:
    """Every tile's stages run exactly once, in contiguous parts; a tile is owned exactly where
    one CTA runs all of it (no fix-up for nothing); a split tile's contributors are the
    consecutive CTAs that ran its parts, in order, with the first one's partial in slot 1 and the
    others' in slot 0, no CTA using one slot for two tiles, no two split tiles sharing a lock, and
    the finisher's sum made of exactly the tile's parts. Returns the split tiles."""
    row_tiles, col_tiles, stages, _, grid, _, _ = case
    assert not [line for line in lines if line.startswith("E")], (case, [x for x in lines if x.startswith("E")][:3])
    sums = [tuple(map(int, line.split()[1:])) for line in lines if line.startswith("S")]
    lines = [line for line in lines if not line.startswith("S")]
    assert len(lines) == grid, case
    parts: dict[int, list[tuple[int, ...]]] = {}
    for line in lines:
        cta, iterations, *segments = line.split()
        cta, ran, slots = int(cta), 0, {}
        for seg in segments:
            tile, s0, s1, owns, c0, c1, slot = map(int, seg.split(":"))
            ran += s1 - s0
            parts.setdefault(tile, []).append((s0, s1, cta, owns, c0, c1, slot))
            if not owns:
                assert slot not in slots, (case, cta, "one workspace slot for two tiles")
                slots[slot] = tile
        assert ran == int(iterations), (case, cta)
    assert sorted(parts) == list(range(row_tiles * col_tiles)), case
    locks = {}
    for tile, ps in parts.items():
        ps.sort()
        assert ps[0][0] == 0 and ps[-1][1] == stages, (case, tile)
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ps)), (case, tile)
        if len(ps) == 1:
            assert ps[0][3], (case, tile, "a tile run by one CTA goes through the fix-up")
            continue
        ctas = [p[2] for p in ps]
        assert not any(p[3] for p in ps), (case, tile, "a split tile owned")
        assert ctas == list(range(ctas[0], ctas[-1] + 1)), (case, tile, "contributors not consecutive CTAs")
        assert {(p[4], p[5]) for p in ps} == {(ctas[0], ctas[-1])}, (case, tile, "not the CTAs that ran it")
        assert [p[6] for p in ps] == [1] + [0] * (len(ps) - 1), (case, tile)
        assert locks.setdefault(ctas[0], tile) == tile, (case, tile, "two split tiles on one lock")
    # The finisher's sum of the partials (StreamKFixup::store_sum) read from the slots the parts
    # wrote (each wrote its stages, the tile, 1 and its CTA): every part once, no other tile's.
    want = sorted((tile, stages, tile * len(ps), len(ps), sum(p[2] for p in ps))
                  for tile, ps in parts.items() if not ps[0][3])
    assert sorted(sums) == want, (case, "the finisher's sums")
    return len(locks)


def test_streamk_schedule_covers_every_stage_once(tmp_path, real_nvcc):
    """StreamKWork and StreamKWalk as the mma tile's loader and consumer and the wgmma tile's
    consumer walk them, for every CTA: whole tiles, stream-K runs (whole-tile and cut), whole
    last waves under both rules, short and deep K, grids from 1 CTA to 3 an SM."""
    exe = build(real_nvcc, tmp_path, "streamk_walk")
    rng = random.Random(7)
    rules = ((6, 0), (7, INT_MAX))  # kMmaWholeTiles, kWgmmaWholeTiles
    space = [(*shape, *rule) for *shape, rule in itertools.product(
        (0, 1, 2, 3, 5, 13, 40, 131, 132, 133, 270, 397), (1, 3, 8, 28), (1, 2, 3, 4, 7, 16, 28), (256, 4096),
        (1, 7, 132, 264, 396), rules)]
    cases = rng.sample(space, 300)
    # the Kimi points the dispatch runs: TP8 down (K=256: 2 stages of 128), decode gate_up, EP8 mid batch
    cases += [(270, 56, 2, 256, 396, 6, 0), (296, 56, 2, 256, 396, 6, 0), (64, 14, 56, 7168, 264, 6, 0),
              (48, 8, 112, 7168, 132, 7, INT_MAX), (384, 1, 112, 7168, 132, 7, INT_MAX)]
    lines = run_lines(exe, [" ".join(map(str, c)) for c in cases])
    per_case, current = [], []
    for line in lines:
        if line == ".":
            per_case.append(current)
            current = []
        else:
            current.append(line)
    assert len(per_case) == len(cases)
    splits = [check_schedule(case, case_lines) for case, case_lines in zip(cases, per_case, strict=True)]
    assert 0 < sum(splits) and splits.count(0) > 0  # both split tiles and all-owned schedules were checked


def test_streamk_schedule_check_catches_a_broken_walk():
    """The checker itself: a schedule with a stage run twice, or a split tile's parts in the
    wrong slots, must fail it."""
    twice = ["0 2 0:0:2:1:-1:-1:-1 0:0:2:1:-1:-1:-1"]
    with pytest.raises(AssertionError):
        check_schedule((1, 1, 2, 256, 1, 6, 0), twice)
    wrong_slots = ["0 1 0:0:1:0:0:1:0", "1 1 0:1:2:0:0:1:1", "S 0 2 0 2 1"]
    with pytest.raises(AssertionError):
        check_schedule((1, 1, 2, 256, 2, 6, 0), wrong_slots)
    wrong_sum = ["0 1 0:0:1:0:0:1:1", "1 1 0:1:2:0:0:1:0", "S 0 1 0 1 0"]  # one part's partial lost
    with pytest.raises(AssertionError):
        check_schedule((1, 1, 2, 256, 2, 6, 0), wrong_sum)
    right = ["0 1 0:0:1:0:0:1:1", "1 1 0:1:2:0:0:1:0", "S 0 2 0 2 1"]
    assert check_schedule((1, 1, 2, 256, 2, 6, 0), right) == 1


# --- the grouped family's row tiles (csrc/grouped/row_tiles.cuh) -----------------------------------

ROWS, OFFSETS, MASKED = 1, 2, 3  # chord::kContiguousRows, kContiguousOffsets, kMasked


def grouped_tiles_spec(routing: int, tok: int, num_experts: int, max_m: int, values: list[int]) -> list[tuple]:
    """The row tiles as (first, rows, expert, routes, sum of routes). Offsets and masked forms:
    each expert's rows cut into tiles of `tok` rows, in expert order, every row routed to itself.
    DeepGEMM rows form (values = m_indices): tile y is rows [y*tok, (y+1)*tok), of its first
    row's expert (-1 where that is no expert), routing only that expert's rows."""
    if routing == ROWS:
        tiles = []
        for first in range(0, len(values), tok):
            rows, e = min(tok, len(values) - first), values[first]
            expert = e if 0 <= e < num_experts else -1
            mine = [first + i for i in range(rows) if expert >= 0 and values[first + i] == expert]
            tiles.append((first, rows, expert, len(mine), sum(mine)))
        return tiles
    tiles = []
    for e in range(num_experts):
        if routing == MASKED:
            first, count = e * max_m, max(min(values[e], max_m), 0)
        else:
            first, count = values[e], max(values[e + 1] - values[e], 0)
        for t in range(0, count, tok):
            rows = min(tok, count - t)
            tiles.append((first + t, rows, e, rows, rows * (first + t) + rows * (rows - 1) // 2))
    return tiles


def deepgemm_rows(counts: list[int], alignment: int, rng: random.Random) -> list[int]:
    """m_indices of DeepGEMM's contiguous form: each expert's rows, its segment padded with -1 to
    the alignment; now and then a stray out-of-range id inside a segment."""
    rows = []
    for e, c in enumerate(counts):
        rows += [e] * c + [-1] * (-c % alignment)
    return [rng.choice((-1, 10**6)) if rng.random() < 0.01 else r for r in rows]


def test_grouped_row_tiles_on_the_host(tmp_path, real_nvcc):
    """GroupedRowTiles (count_tiles_in_warp, find_tile_in_warp, the pair's pick, the routes),
    one warp on the CPU, for the three forms: expert counts below, at and past one warp's 32 (the
    scans take 32 experts a step), empty experts and empty calls, masked counts past max_m or
    negative, unaligned offsets, DeepGEMM segments padded with -1 (and stray ids), and two row
    tiles past the end of the offsets and masked forms (nothing found)."""
    exe = build(real_nvcc, tmp_path, "grouped_tiles")
    rng = random.Random(5)
    cases = []
    for _ in range(150):
        routing = rng.choice((ROWS, OFFSETS, MASKED))
        tok = rng.choice((8, 16, 24, 32, 56, 64, 96, 128, 240))
        num_experts = rng.choice((1, 12, 24, 31, 32, 33, 48, 64, 100))
        mean = rng.choice((0, 1, 3, 20, 100, 700))
        counts = [rng.choice((0, rng.randrange(0, 2 * mean + 1))) for _ in range(num_experts)]
        max_m = -(-max(counts + [1]) // 64) * 64
        if routing == ROWS:
            values = deepgemm_rows(counts, rng.choice((tok, 128)) if 128 % tok == 0 else tok, rng)
        elif routing == MASKED:
            values = [c if rng.random() > 0.1 else rng.choice((-3, max_m + 17)) for c in counts]
        else:
            values = list(itertools.accumulate(counts, initial=rng.choice((0, 0, 5))))
        pick_rows, pick_cost, other_cost = rng.choice(((0, 1, 1), (8, 50, 51), (16, 3, 5), (tok, 1, 1)))
        cases.append((routing, tok, num_experts, max_m, pick_rows, pick_cost, other_cost, values))
    cases.append((OFFSETS, 8, 48, 64, 0, 1, 1, [0] * 49))  # every expert empty
    cases.append((MASKED, 16, 32, 64, 0, 1, 1, [0] * 31 + [64]))  # only the last lane's expert
    lines = run_lines(exe, [" ".join(map(str, [*c[:7], *c[7]])) for c in cases])
    assert len(lines) == len(cases)
    for (routing, tok, num_experts, max_m, pick_rows, pick_cost, other_cost, values), line in zip(cases, lines,
                                                                                                   strict=True):
        where = (routing, tok, num_experts, max_m, pick_rows, values[:12])
        assert not line.startswith("E"), (where, line)
        count, picked, *found = line.split()
        want = grouped_tiles_spec(routing, tok, num_experts, max_m, values)
        assert int(count) == len(want), where
        got = [tuple(map(int, t.split(":"))) for t in found]
        assert got == want + ([] if routing == ROWS else [(0, 0, -1, 0, 0)] * 2), where
        if pick_rows and routing != ROWS:  # the host never pairs the rows form
            other = len(grouped_tiles_spec(routing, pick_rows, num_experts, max_m, values))
            assert int(picked) == (len(want) * pick_cost <= other * other_cost), where  # this tile wins ties
        else:
            assert int(picked) == 1, where
