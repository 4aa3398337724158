"""INT4 primitives and reference math against compressed-tensors and hand-computed values."""

import pytest
import torch
from chord_kernels import int4, reference


def test_pack_matches_documented_bit_layout():
    # kimi_k2_format.md §4: element i of a row at bits 4*(i%8) of word i//8, offset binary.
    q = torch.arange(-8, 8, dtype=torch.int16)
    codes = (q + 8).to(torch.uint8)[None]
    words = int4.pack_codes_along_k(codes)
    assert words.tolist() == [[0x76543210, 0xFEDCBA98 - (1 << 32)]]
    assert torch.equal(int4.unpack_codes_along_k(words), codes)


def test_pack_unpack_round_trip_random():
    codes = torch.randint(0, 16, (3, 5, 64), dtype=torch.uint8)
    assert torch.equal(int4.unpack_codes_along_k(int4.pack_codes_along_k(codes)), codes)


def test_dequantize_is_offset_binary_times_scale():
    codes = torch.tensor([[0, 8, 15] + [8] * 29], dtype=torch.uint8)
    scale = torch.tensor([[0.5]], dtype=torch.bfloat16)
    out = int4.dequantize_codes(codes, scale)
    assert out[0, :3].tolist() == [-4.0, 0.0, 3.5]


def test_bad_scale_shape_names_shapes():
    with pytest.raises(ValueError, match=r"scale has shape \(2, 3\)"):
        int4.dequantize_codes(torch.zeros(2, 64, dtype=torch.uint8), torch.ones(2, 3, dtype=torch.bfloat16))


@pytest.mark.parametrize("n,k", [(16, 64), (48, 256), (64, 7168 // 8)])
def test_dequantize_bit_identical_to_compressed_tensors(n, k):
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    g = torch.Generator().manual_seed(n * k)
    w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)
    scale = (w.float().abs().reshape(n, k // 32, 32).amax(-1) / 7.5).to(torch.bfloat16)
    packed = PackedQuantizationCompressor.compress({"weight": w, "weight_scale": scale}, scheme)
    theirs = PackedQuantizationCompressor.decompress(dict(packed), scheme)["weight"]
    ours = reference.dequantize_packed(packed["weight_packed"], packed["weight_scale"])
    assert ct is not None and ours.dtype == theirs.dtype == torch.bfloat16
    assert torch.equal(ours.view(torch.int16), theirs.view(torch.int16))
    assert (int4.unpack_codes_along_k(packed["weight_packed"]) == 0).any()  # -8 codes exercised


def _expert_weights(e=3, n=16, k=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(e, n, k, generator=g).to(torch.bfloat16)


def test_indexed_reference_hand_case():
    w = _expert_weights()
    a = torch.randn(2, 64).to(torch.bfloat16)  # M=2, top_k=2 -> routes 0..3, sentinel 4
    sorted_ids = torch.tensor([1, 2, 4, 4, 0, 3, 4, 4, 9, 9], dtype=torch.int32)  # tail is garbage
    expert_ids = torch.tensor([2, 0, 1], dtype=torch.int32)
    out = torch.full((4, 16), 7.0, dtype=torch.bfloat16)
    reference.moe_indexed_reference(a, w, sorted_ids, expert_ids, torch.tensor([8], dtype=torch.int32), 2, 4, out)
    want = {1: (0, 2), 2: (1, 2), 0: (0, 0), 3: (1, 0)}  # route -> (token, expert)
    for r, (t, e) in want.items():
        torch.testing.assert_close(out[r], (a[t].float() @ w[e].float().t()).bfloat16(), rtol=0, atol=0)


def test_contiguous_and_masked_reference():
    w = _expert_weights()
    a = torch.randn(6, 64).to(torch.bfloat16)
    m_indices = torch.tensor([0, 0, -1, 2, 2, -1], dtype=torch.int32)
    out = reference.moe_contiguous_reference(a, w, m_indices)
    assert torch.equal(out[2], torch.zeros(16, dtype=torch.bfloat16))
    torch.testing.assert_close(out[3], (a[3].float() @ w[2].float().t()).bfloat16(), rtol=0, atol=0)
    a3 = torch.randn(3, 4, 64).to(torch.bfloat16)
    flat = reference.moe_masked_reference(a3, w, torch.tensor([1, 0, 4], dtype=torch.int32))
    assert flat.shape == (12, 16)
    torch.testing.assert_close(flat[8 + 3], (a3[2, 3].float() @ w[2].float().t()).bfloat16(), rtol=0, atol=0)
    assert torch.equal(flat[4:8], torch.zeros(4, 16, dtype=torch.bfloat16))
