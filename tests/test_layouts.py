"""Packed layouts: round trips, an independent decoder written from the spec, slicing rules, errors."""

import pytest
import torch
from chord_kernels import layouts
from chord_kernels.operator import pack_w4a16_grouped, pack_w4a16_indexed


def _codes(e=2, n=48, k=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (e, n, k), generator=g, dtype=torch.uint8)
    scale = torch.randn(e, n, k // 32, generator=g).to(torch.bfloat16)
    return codes, scale


def decode_one(qweight, block_k, e, n, k):
    """The layouts.py docstring, read literally: the code of W[e, n, k]."""
    r, c = n % 16, (k % block_k) % 16
    lane = 4 * (r % 8) + (c % 8) // 2
    reg = (1 if r >= 8 else 0) + (2 if c >= 8 else 0)  # a0..a3
    element = 2 * reg + c % 2  # a_r.x, a_r.y
    nibble = [0, 4, 1, 5, 2, 6, 3, 7][element]  # nibble order [e0, e2, e4, e6, e1, e3, e5, e7]
    word = int(qweight[e, n // 16, k // block_k, lane, (k % block_k) // 16]) & 0xFFFFFFFF
    return (word >> (4 * nibble)) & 0xF


@pytest.mark.parametrize("mode", layouts.MODES)
def test_round_trip_and_independent_decoder(mode):
    codes, scale = _codes()
    packed = layouts.pack_w4a16(codes, scale, mode)
    assert packed.mode == mode and packed.block_k == layouts.BLOCK_K_BY_MODE[mode]
    back_codes, back_scale = layouts.unpack_w4a16(packed)
    assert torch.equal(back_codes, codes) and torch.equal(back_scale, scale)
    g = torch.Generator().manual_seed(1)
    for _ in range(200):
        e, n, k = (int(torch.randint(0, s, (1,), generator=g)) for s in codes.shape)
        assert decode_one(packed.qweight, packed.block_k, e, n, k) == codes[e, n, k]
    assert torch.equal(packed.scale, scale.transpose(1, 2))


def test_seed_api_modes_and_errors():
    codes, scale = _codes()
    assert pack_w4a16_grouped(codes, scale, mode="contiguous").block_k == 64
    assert pack_w4a16_grouped(codes, scale, mode="masked").block_k == 128
    assert pack_w4a16_indexed(codes, scale).mode == "indexed"
    with pytest.raises(ValueError, match="unknown packing mode 'indexed'"):
        pack_w4a16_grouped(codes, scale, mode="indexed")
    with pytest.raises(ValueError, match="N=40 must be a multiple of 16"):
        layouts.pack_w4a16(codes[:, :40], scale[:, :40], "indexed")
    with pytest.raises(ValueError, match="K=192 must be a multiple of BLOCK_K=128"):
        layouts.pack_w4a16(codes[..., :192], scale[..., :6], "masked")
    # the kernels index an expert's scales in int32: checked from the shape, before packing anything
    with pytest.raises(ValueError, match=r"N=65536, K=1048576: .* over 2\^31 - 1: not supported"):
        layouts.check_problem_dims(65536, 1048576, 64)


@pytest.mark.parametrize("mode", layouts.MODES)
def test_tp_and_ep_slices_stay_valid(mode):
    """Slicing the packed tensors along N/K blocks equals packing the sliced weight."""
    codes, scale = _codes(e=4, n=64, k=512)
    packed = layouts.pack_w4a16(codes, scale, mode)
    bk = packed.block_k
    # EP: whole experts; TP gate/up: N rows [16, 48); TP down: K cols [bk, 3*bk)
    assert torch.equal(packed.qweight[1:3], layouts.pack_w4a16(codes[1:3], scale[1:3], mode).qweight)
    n_slice = layouts.pack_w4a16(codes[:, 16:48], scale[:, 16:48], mode)
    assert torch.equal(packed.qweight[:, 1:3], n_slice.qweight)
    assert torch.equal(packed.scale[:, :, 16:48], n_slice.scale)
    k_slice = layouts.pack_w4a16(codes[..., bk:3 * bk], scale[..., bk // 32:3 * bk // 32], mode)
    assert torch.equal(packed.qweight[:, :, 1:3], k_slice.qweight)
    assert torch.equal(packed.scale[:, bk // 32:3 * bk // 32], k_slice.scale)


def test_check_rejects_inconsistent_packed_weight():
    codes, scale = _codes()
    packed = layouts.pack_w4a16(codes, scale, "contiguous")
    bad = layouts.PackedW4A16("masked", packed.qweight, packed.scale, block_k=64)
    with pytest.raises(ValueError, match="mode 'masked' uses BLOCK_K 128"):
        bad.check()
    with pytest.raises(ValueError, match="format version 0"):
        layouts.PackedW4A16("contiguous", packed.qweight, packed.scale, 64, format_version=0).check()
    with pytest.raises(ValueError, match="scale has shape"):
        layouts.PackedW4A16("contiguous", packed.qweight, packed.scale[:, :-1], 64).check()
