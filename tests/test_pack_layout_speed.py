"""The fast tile/untile and nibble helpers equal the original nibble-permute formulation bit for bit.

The reference functions below are the pre-optimisation code of ``chord_kernels.layouts`` and
``chord_kernels.int4``, kept here verbatim as the definition the fast versions must match.
"""

import pytest
import torch
from chord_kernels import int4, layouts

_SHIFTS = torch.arange(0, 32, 4, dtype=torch.int32)
_CODES_TO_WORDS = (0, 1, 4, 3, 7, 5, 8, 6, 2)


def ref_or_nibbles(nib):
    shifted = torch.bitwise_left_shift(nib & 0xF, _SHIFTS)
    word = shifted[..., 0]
    for j in range(1, 8):
        word = word | shifted[..., j]
    return word


def ref_split_nibbles(words):
    return (torch.bitwise_right_shift(words.unsqueeze(-1), _SHIFTS) & 0xF).to(torch.uint8)


def ref_tile_codes(codes, block_k):
    e, n, k = codes.shape
    v = codes.reshape(e, n // 16, 2, 8, k // block_k, block_k // 16, 2, 4, 2).permute(_CODES_TO_WORDS)
    nib = v.reshape(e, n // 16, k // block_k, 32, block_k // 16, 8).to(torch.int32)
    return ref_or_nibbles(nib).contiguous()


def ref_untile_codes(qweight, block_k):
    e, nt, kb = qweight.shape[:3]
    nib = ref_split_nibbles(qweight)
    inverse = [_CODES_TO_WORDS.index(i) for i in range(9)]
    return nib.reshape(e, nt, kb, 8, 4, block_k // 16, 2, 2, 2).permute(inverse).reshape(
        e, nt * 16, kb * block_k).contiguous()


def _shapes(seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(12):
        e = int(torch.randint(1, 4, (1,), generator=g))
        n = 16 * int(torch.randint(1, 6, (1,), generator=g))
        k = 128 * int(torch.randint(1, 5, (1,), generator=g))
        yield e, n, k, g


@pytest.mark.parametrize("block_k", [64, 128])
def test_tile_untile_match_the_reference_on_random_codes(block_k):
    for e, n, k, g in _shapes(block_k):
        codes = torch.randint(0, 256, (e, n, k), generator=g, dtype=torch.uint8)  # high bits ignored
        q = layouts.tile_codes(codes, block_k)
        ref = ref_tile_codes(codes, block_k)
        assert q.dtype == torch.int32 and q.shape == ref.shape and q.is_contiguous()
        assert torch.equal(q, ref)
        words = torch.randint(-2**31, 2**31 - 1, ref.shape, generator=g, dtype=torch.int32)
        assert torch.equal(layouts.untile_codes(words, block_k), ref_untile_codes(words, block_k))
        assert torch.equal(layouts.untile_codes(q, block_k), codes & 0xF)


def test_tile_accepts_views_and_offsets():
    g = torch.Generator().manual_seed(3)
    big = torch.randint(0, 16, (3, 33, 256), generator=g, dtype=torch.uint8)
    for codes in (big[1:, 1:], big[:, 1:17].transpose(1, 2).contiguous().transpose(1, 2)[:, :, :]):
        if codes.shape[1] % 16 == 0:
            assert torch.equal(layouts.tile_codes(codes, 64), ref_tile_codes(codes.contiguous(), 64))
    qs = torch.randint(-2**31, 2**31 - 1, (2, 2, 2, 32, 4), generator=g, dtype=torch.int32)
    view = qs.transpose(0, 1)
    assert torch.equal(layouts.untile_codes(view, 64), ref_untile_codes(view.contiguous(), 64))


def test_nibble_helpers_match_the_reference():
    g = torch.Generator().manual_seed(4)
    for shape in [(), (1,), (7, 5), (3, 4, 9)]:
        words = torch.randint(-2**31, 2**31 - 1, shape, generator=g, dtype=torch.int32)
        assert torch.equal(int4._split_nibbles(words), ref_split_nibbles(words))
        nib = torch.randint(-2**31, 2**31 - 1, (*shape, 8), generator=g, dtype=torch.int32)
        assert torch.equal(int4._or_nibbles(nib), ref_or_nibbles(nib))
        assert torch.equal(int4._or_nibbles(nib.transpose(0, -1).contiguous().transpose(0, -1)),
                           ref_or_nibbles(nib))
    w = torch.randint(-2**31, 2**31 - 1, (64, 32), generator=g, dtype=torch.int32)
    assert torch.equal(int4.pack_codes_along_k(int4.unpack_codes_along_k(w)), w)
    assert torch.equal(int4._split_nibbles(w[:, ::2]), ref_split_nibbles(w[:, ::2]))
