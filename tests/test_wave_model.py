"""The wave model of grouped launches (chord_kernels.wave_model) against brute force."""

import itertools
import math
import subprocess

import pytest
from chord_kernels import wave_model


def poisson_pmf(lam: float, upto: int) -> list[float]:
    p, out = math.exp(-lam), []
    for n in range(upto):
        out.append(p)
        p *= lam / (n + 1)
    return out


@pytest.mark.parametrize("lam,block", [(0.5, 56), (21.0, 32), (43.0, 56), (43.0, 64), (86.0, 96), (171.0, 128),
                                       (500.0, 96)])
def test_tiles_per_expert_is_the_poisson_law_of_ceil(lam, block):
    pmf = wave_model.tiles_per_expert_pmf(lam, block)
    want = [0.0] * len(pmf)
    for n, p in enumerate(poisson_pmf(lam, int(lam * 3) + 200)):
        y = -(-n // block)
        if y < len(want):
            want[y] += p
    assert sum(pmf) == pytest.approx(1.0, abs=1e-12)
    assert pmf == pytest.approx(want, abs=1e-9)


def test_large_means_do_not_underflow():
    # exp(-lam) underflows to 0 past ~745: the pmf starts from the mode instead
    pmf = wave_model.tiles_per_expert_pmf(5000.0, 128)
    assert sum(pmf) == pytest.approx(1.0) and wave_model.expected_tiles(5000.0, 128) == pytest.approx(39.56, abs=0.05)
    assert wave_model.tiles_per_expert_pmf(0, 64) == (1.0,)


@pytest.mark.parametrize("lam,experts,block", [(43.0, 3, 56), (10.0, 4, 16), (85.0, 2, 96)])
def test_row_tiles_is_the_sum_over_experts(lam, experts, block):
    one = wave_model.tiles_per_expert_pmf(lam, block)
    want: dict[int, float] = {}
    for ys in itertools.product(range(len(one)), repeat=experts):
        want[sum(ys)] = want.get(sum(ys), 0.0) + math.prod(one[y] for y in ys)
    offset, pmf = wave_model.row_tiles_pmf(lam, experts, block)
    for i, p in enumerate(pmf):
        assert p == pytest.approx(want.get(offset + i, 0.0), abs=1e-10)
    assert sum(pmf) == pytest.approx(1.0, abs=1e-9)
    assert sum(p for t, p in want.items() if not offset <= t < offset + len(pmf)) < 1e-9  # only tails trimmed


def test_expected_waves_counts_the_wave_an_overflowing_expert_opens():
    # masked EP16 T=128 gate_up (grouped-kernels.md v16): 24 experts, 43 expected rows, 16 column
    # tiles on 132 SMs. Tiles of 56 rows: 384 tiles (3 waves) unless an expert passes 56 rows
    # (P ~ 2.5 % each: 45 % that one does), then a 4th wave; tiles of 64 rows almost never do.
    w56 = wave_model.expected_waves(43.0, 24, 56, 16, 132)
    w64 = wave_model.expected_waves(43.0, 24, 64, 16, 132)
    assert 3.3 < w56 < 3.6 and 3.0 <= w64 < 3.05
    assert wave_model.mean_row_tiles(43.0, 24, 64) == pytest.approx(24 * wave_model.expected_tiles(43.0, 64))
    # no experts: no tiles, no waves
    assert wave_model.expected_waves(43.0, 0, 64, 16, 132) == 0


@pytest.mark.parametrize("tiles,grid,stages,step,want", [
    (192, 132, 112, 1, (132, 2)),   # EP32 T=128 gate_up: 60 tiles left, each in two
    (144, 132, 112, 2, (132, 4)),   # 12 left: 4 pieces (at most), 28 stages each
    (208, 132, 112, 1, (208, 1)),   # 76 left: more than half a wave, whole
    (140, 132, 32, 1, (132, 2)),    # K 2048: 16-stage pieces at least, so 2
    (264, 132, 112, 1, (264, 1)),   # no last wave
    (40, 132, 112, 1, (0, 3)),      # fewer tiles than CTAs: every tile split
    (10, 132, 16, 1, (10, 1)),      # too short to split
])
def test_tail_split_rule(tiles, grid, stages, step, want):
    assert wave_model.tail_split(tiles, grid, stages, step) == want


@pytest.mark.parametrize("tiles,stages,want", [
    (140, 32, (132, 4)),   # K 2048 on the 4-warpgroup tiles (indexed EP8 T=64/128 down): 8-stage quarters
    (135, 32, (132, 4)),   # 3 left: 4 pieces at most
    (140, 112, (132, 4)),  # deep K: the split's cap decides, as at 16
    (10, 8, (10, 1)),      # one piece's length: whole
])
def test_tail_split_rule_of_the_indexed_4_warpgroup_tiles(tiles, stages, want):
    assert wave_model.tail_split(tiles, 132, stages, 1, wave_model.TAIL_MIN_PIECE_STAGES_INDEXED_CWG4) == want


def test_tail_pieces_cover_every_tile_and_stage_once():
    pieces = (wave_model.TAIL_MIN_PIECE_STAGES, wave_model.TAIL_MIN_PIECE_STAGES_INDEXED_CWG4)
    for tiles, grid, stages, step, least in itertools.product((1, 40, 131, 133, 192, 200, 397), (132, 66), (32, 112),
                                                              (1, 2), pieces):
        covered = {}
        for tile, s0, s1, piece in wave_model.tail_pieces(tiles, grid, stages, step, least):
            assert s0 % step == 0 and s1 % step == 0 and s1 - s0 >= min(stages, least)
            covered.setdefault(tile, []).append((s0, s1))
            assert piece < grid  # one workspace slot a CTA
        assert sorted(covered) == list(range(tiles))
        for ranges in covered.values():
            ranges.sort()
            assert ranges[0][0] == 0 and ranges[-1][1] == stages
            assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


def test_tail_split_mirror_matches_the_kernel_header(tmp_path, real_nvcc):
    """The host mirror against csrc/common/tail_split.cuh itself, compiled for the host by nvcc."""
    from chord_kernels.jit.paths import csrc_dir

    cases = list(itertools.product((1, 7, 40, 60, 131, 132, 133, 192, 200, 397, 2112), (132, 66, 7), (16, 32, 112),
                                   (1, 2), (wave_model.TAIL_MIN_PIECE_STAGES, wave_model.TAIL_MIN_PIECE_STAGES_INDEXED_CWG4)))
    src = tmp_path / "tail.cu"
    src.write_text('#include <cstdio>\n#include "common/tail_split.cuh"\nint main() {\n  const int c[][5] = {'
                   + ",".join("{" + ",".join(map(str, case)) + "}" for case in cases) + "};\n"
                   "  for (const auto& x : c) {\n    chord::TailSplit s(x[0], x[1], x[2], x[3], x[4]);\n"
                   "    for (int u = 0; u < s.units; ++u) { auto p = s.unit(u); std::printf(\"%d %d %d %d;\", "
                   "p.tile, p.s0, p.s1, p.piece); }\n    std::printf(\"\\n\");\n  }\n}\n")
    exe = tmp_path / "tail"
    subprocess.run([real_nvcc, "-std=c++17", "-I", str(csrc_dir()), "-o", str(exe), str(src)], check=True,
                   capture_output=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    for case, line in zip(cases, lines, strict=True):
        got = [tuple(map(int, u.split())) for u in line.split(";") if u]
        assert got == wave_model.tail_pieces(*case), case


def test_tail_piece_lengths_are_the_kernels(tmp_path, real_nvcc):
    """The mirror's piece lengths against the tile loops' own (WgmmaTiles::kTailMinPieceStages of
    each family's row tiles), as static_asserts compiled for sm_90a: the indexed family's
    4-warpgroup tiles in 8-stage pieces, the grouped family's and every 2-warpgroup tile in 16."""
    from chord_kernels.jit import compiler
    from chord_kernels.jit.paths import csrc_dir

    tiles = "chord::WgmmaTiles<2, 32, 8, 64, {rows}, {cwg}>::kTailMinPieceStages"  # 512 x 32 at 4 warpgroups
    indexed, grouped = "chord::IndexedRowTiles", "chord::GroupedRowTiles<chord::{}>::template Of"
    want = [(indexed, 4, wave_model.TAIL_MIN_PIECE_STAGES_INDEXED_CWG4), (indexed, 2, wave_model.TAIL_MIN_PIECE_STAGES)]
    want += [(grouped.format(r), cwg, wave_model.TAIL_MIN_PIECE_STAGES)
             for r in ("kContiguousRows", "kContiguousOffsets", "kMasked") for cwg in (2, 4)]
    src = tmp_path / "pieces.cu"
    src.write_text('#include "indexed/w4a16_indexed_mma.cuh"\n#include "grouped/w4a16_grouped_mma.cuh"\n'
                   + "".join(f"static_assert({tiles.format(rows=rows, cwg=cwg)} == {n});\n"
                             for rows, cwg, n in want))
    done = subprocess.run([real_nvcc, "-std=c++17", *compiler.gencode_flags("sm_90a"), "-I", str(csrc_dir()), "-c",
                           "-o", str(tmp_path / "pieces.o"), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("tiles,stages,grid,want", [
    (448, 2, 396, 4),     # TP8 down T=2 (16 blocks x 28 tiles of K=256): runs of 3 -> whole tiles, 4
    (896, 2, 396, 6),     # T=4: 5 -> 6
    (672, 2, 396, 4),     # T=3: equal runs are whole already
    (224, 2, 528, 2),     # fewer tiles than CTAs: one tile a run (no cut) costs nothing more
    (32, 28, 264, 4),     # TP8 gate_up T=1: a tile over 7 CTAs stays split (whole: 28 a run)
    (392, 8, 396, 8),     # deep K, one tile a CTA: 8 either way
    (700, 8, 396, 16),    # deep K: whole tiles (16) one more than equal runs (15): whole
    (600, 8, 396, 13),    # whole tiles 3 more than equal runs: equal, tiles cut
    (700, 28, 396, 50),   # 56 would be 6 more: equal runs, tiles cut
])
def test_streamk_run_rule(tiles, stages, grid, want):
    assert wave_model.streamk_run(tiles, stages, grid) == want


def cut_tiles(tiles: int, stages: int, grid: int) -> int:
    """Tiles that runs of streamk_run iterations cut (each summed through the workspace)."""
    run = wave_model.streamk_run(tiles, stages, grid)
    bounds = range(run, tiles * stages, run)
    return sum(1 for t in range(tiles) if any(t * stages < b < (t + 1) * stages for b in bounds))


def test_streamk_whole_runs_cut_no_tile():
    assert cut_tiles(448, 2, 396) == 0  # TP8 down T=2: no tile summed through the workspace (equal runs: 149)
    assert cut_tiles(32, 28, 264) == 32  # decode gate_up: every tile split, as before


def test_streamk_run_mirror_matches_the_kernel_header(tmp_path, real_nvcc):
    """The host mirror against csrc/common/streamk_run.cuh itself, compiled for the host by nvcc."""
    from chord_kernels.jit.paths import csrc_dir

    cases = list(itertools.product((1, 31, 224, 395, 396, 397, 448, 672, 896, 1792, 14000), (1, 2, 4, 8, 28, 112),
                                   (7, 132, 264, 396, 528)))
    src = tmp_path / "run.cu"
    src.write_text('#include <cstdio>\n#include "common/streamk_run.cuh"\nint main() {\n  const int c[][3] = {'
                   + ",".join("{" + ",".join(map(str, case)) + "}" for case in cases) + "};\n"
                   '  for (const auto& x : c) std::printf("%d\\n", chord::streamk_run(x[0], x[1], x[2]));\n}\n')
    exe = tmp_path / "run"
    subprocess.run([real_nvcc, "-std=c++17", "-I", str(csrc_dir()), "-o", str(exe), str(src)], check=True,
                   capture_output=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    assert [int(x) for x in lines] == [wave_model.streamk_run(*case) for case in cases]
