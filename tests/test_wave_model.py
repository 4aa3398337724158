"""The wave model of grouped launches (chord_kernels.wave_model) against brute force."""

import itertools
import math

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
