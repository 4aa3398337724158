"""humming.schema's Chord-packed schema (a `chord-pack convert` output served by vLLM's Route B).

Unit level, no vLLM: the config written by chord_pack resolves to ChordPackedWeightSchema, the
tensor attributes describe the packed layout, loading views (never copies) the packed tensor,
the transform wraps the loaded storage as PackedW4A16, and mode / shape / sharding mismatches
are clear errors. tests/test_vllm_contract.py drives the same through vLLM's real loaders at TP1,
TP2 and EP2.
"""

import dataclasses

import pytest
import torch
from chord_kernels.int4 import dequantize_codes
from chord_kernels.layouts import BLOCK_K_BY_MODE, FORMAT_VERSION, pack_w4a16, unpack_w4a16
from chord_pack.config import humming_quantization_config
from humming.config import GemmType
from humming.errors import ModeMismatchError, NotSupportedError
from humming.schema import (
    BaseInputSchema,
    BaseWeightSchema,
    ChordPackedWeightSchema,
    HummingWeightSchema,
)
from humming.transform import prepare_and_transform_humming_tensors
from humming.tune import get_heuristics_config

IGNORE = ["lm_head", "re:.*self_attn.*"]


def qc(mode="indexed", **over):
    block = {"mode": mode, "block_k": BLOCK_K_BY_MODE[mode], "format_version": FORMAT_VERSION, "sharding": None}
    return {**humming_quantization_config({"ignore": IGNORE}, block), **over}


def packed_experts(e, n, k, mode, seed=0):
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (e, n, k), generator=gen, dtype=torch.uint8)
    scale = (torch.rand(e, n, k // 32, generator=gen) * 0.02 + 0.005).to(torch.bfloat16)
    return codes, scale, pack_w4a16(codes, scale, mode)


def test_config_resolves_to_the_packed_schema():
    schema = BaseWeightSchema.from_config(qc("masked"))
    assert type(schema) is ChordPackedWeightSchema and isinstance(schema, HummingWeightSchema)
    assert (schema.chord_mode, schema.chord_block_k, str(schema.b_dtype), str(schema.bs_dtype)) == (
        "masked", 128, "uint4", "bfloat16")
    assert schema.to_humming_schema(torch.bfloat16) is schema
    # vLLM also parses the same dict as an input schema: it must stay BF16, unquantized
    inp = BaseInputSchema.from_config(qc())
    assert inp.unsupported_reason(torch.bfloat16) is None and inp.is_compatible_with(schema, torch.bfloat16)
    # a plain humming config is still the plain schema
    plain = BaseWeightSchema.from_config({"quant_method": "humming", "b_dtype": "uint4",
                                          "weight_scale_group_size": 32})
    assert type(plain) is HummingWeightSchema


@pytest.mark.parametrize("bad, words", [
    ({"chord_block_k": 128}, ["'indexed'", "BLOCK_K 64", "128"]),
    ({"chord_format_version": 9}, ["format version 9"]),
    ({"chord_mode": "diagonal"}, ["diagonal"]),
    ({"chord_sharding": {"kind": "tp", "size": 2, "rank": 0}}, ["TP-sliced", "without --tp-*"]),
    ({"b_dtype": "uint8"}, ["uint8"]),
])
def test_config_errors(bad, words):
    with pytest.raises((ValueError, NotSupportedError)) as info:
        BaseWeightSchema.from_config(qc(**bad))
    for w in words:
        assert w in str(info.value), str(info.value)


@pytest.mark.parametrize("mode", ["indexed", "masked"])
def test_attrs_describe_the_packed_layout(mode):
    schema = BaseWeightSchema.from_config(qc(mode))
    bk = BLOCK_K_BY_MODE[mode]
    attrs = schema.get_padded_tensors_attrs(shape_n=512, shape_k=256, num_experts=3, param_dtype=torch.bfloat16)
    assert attrs["weight_packed"]["shape"] == (3, 512 // 16, 2 * 256) and attrs["weight_packed"]["dtype"] == torch.int32
    assert attrs["weight_packed"]["extra_attrs"]["input_dim"] == 2 and attrs["weight_packed"]["extra_attrs"]["output_dim"] == 1
    assert attrs["weight_packed"]["extra_attrs"]["chord_words_per_k_block"] == 2 * bk
    assert attrs["weight_scale"]["shape"] == (3, 256 // 32, 512)
    assert attrs["weight_scale"]["extra_attrs"] == {"input_dim": 1, "output_dim": 2, "scale_type": "group"}
    assert attrs["weight_shape"]["shape"] == (3, 2)
    # the stored bytes of E packed experts are exactly this parameter's bytes
    _, _, packed = packed_experts(3, 512, 256, mode)
    assert packed.qweight.reshape(3, 512 // 16, -1).shape == attrs["weight_packed"]["shape"]


def test_k_slice_of_the_2d_view_is_a_k_slice_of_the_weight():
    """What vLLM's loader does for down (w2) under TP: narrow the word dim of the [N/16, 2K]
    view. With K per rank a multiple of BLOCK_K that is the packed form of the K slice."""
    schema = BaseWeightSchema.from_config(qc("indexed"))
    codes, scale, packed = packed_experts(1, 64, 256, "indexed")
    view = schema.process_loaded_weight(packed.qweight[0], "weight_packed")
    for rank in range(2):
        words = view.narrow(1, rank * 256, 256).contiguous()  # K = 128 per rank
        part = dataclasses.replace(packed, qweight=words.view(1, 4, 2, 32, 4),
                                   scale=packed.scale[:, rank * 4:(rank + 1) * 4])
        got_codes, got_scale = unpack_w4a16(part)
        assert torch.equal(got_codes, codes[:, :, rank * 128:(rank + 1) * 128])
        assert torch.equal(got_scale, scale[:, :, rank * 4:(rank + 1) * 4])


def test_process_loaded_weight_views_and_checks():
    schema = BaseWeightSchema.from_config(qc("indexed"))
    _, _, packed = packed_experts(1, 32, 128, "indexed")
    q = packed.qweight[0]
    v = schema.process_loaded_weight(q, "weight_packed")
    assert v.shape == (2, 256) and v.data_ptr() == q.data_ptr()
    s0 = packed.scale[0]
    assert schema.process_loaded_weight(s0, "weight_scale") is s0
    _, _, masked = packed_experts(1, 32, 128, "masked")
    with pytest.raises(ValueError, match="not Chord mode 'indexed'"):
        schema.process_loaded_weight(masked.qweight[0], "weight_packed")
    with pytest.raises(ValueError, match="not Chord mode"):
        schema.process_loaded_weight(torch.zeros(32, 16, dtype=torch.int32), "weight_packed")


def test_unsliceable_rank_shape_is_refused():
    schema = BaseWeightSchema.from_config(qc("indexed"))
    with pytest.raises(ValueError, match=r"N=256, K=32.*multiple of 16 and K of 64"):
        schema.get_padded_tensors_attrs(shape_n=256, shape_k=32, num_experts=4, param_dtype=torch.bfloat16)
    with pytest.raises(NotSupportedError, match="dense"):
        schema.get_tensors_attrs(shape_n=256, shape_k=256, param_dtype=torch.bfloat16)


def _loaded(schema, packed):
    e = packed.num_experts
    return {"weight_packed": packed.qweight.reshape(e, packed.qweight.shape[1], -1),
            "weight_scale": packed.scale, "weight_shape": torch.tensor([[packed.n, packed.k]] * e)}


@pytest.mark.parametrize("mode", ["indexed", "contiguous", "masked"])
def test_transform_wraps_without_copy(mode, monkeypatch):
    monkeypatch.delenv("VLLM_HUMMING_MOE_GEMM_TYPE", raising=False)
    schema = BaseWeightSchema.from_config(qc(mode))
    codes, scale, packed = packed_experts(2, 64, 256, mode)
    loaded = _loaded(schema, packed)
    conv_schema, tensors = schema.convert_humming(loaded, [32, 32], [256], torch.bfloat16, num_experts=2)
    assert conv_schema is schema and set(tensors) == {"weight", "weight_scale"}
    gemm = {"indexed": "indexed", "contiguous": "grouped_contiguous", "masked": "grouped_masked"}[mode]
    config, out = prepare_and_transform_humming_tensors(tensors, 64, 256, schema, num_experts=2,
                                                        torch_dtype=torch.bfloat16, gemm_type=gemm)
    assert out["weight"].data_ptr() == loaded["weight_packed"].data_ptr()
    assert out["weight_scale"].data_ptr() == loaded["weight_scale"].data_ptr()
    assert out["weight"].shape == packed.qweight.shape
    assert (config.chord_mode, config.chord_mode_source, config.chord_block_k) == (mode, "checkpoint", BLOCK_K_BY_MODE[mode])
    got_codes, got_scale = unpack_w4a16(dataclasses.replace(packed, qweight=out["weight"], scale=out["weight_scale"]))
    assert torch.equal(dequantize_codes(got_codes, got_scale), dequantize_codes(codes, scale))
    get_heuristics_config(config, gemm_type=gemm)


def test_mode_mismatch_names_both(monkeypatch):
    monkeypatch.delenv("VLLM_HUMMING_MOE_GEMM_TYPE", raising=False)
    schema = BaseWeightSchema.from_config(qc("indexed"))
    _, _, packed = packed_experts(2, 64, 256, "indexed")
    _, tensors = schema.convert_humming(_loaded(schema, packed), [32, 32], [256], torch.bfloat16, num_experts=2)
    with pytest.raises(ModeMismatchError, match=r"mode 'indexed'.*gemm_type 'grouped_masked'.*mode 'masked'"):
        prepare_and_transform_humming_tensors(tensors, 64, 256, schema, num_experts=2, gemm_type="grouped_masked")
    # indexed and contiguous are the same bytes (BLOCK_K 64): vLLM's EP default runs it
    config, _ = prepare_and_transform_humming_tensors(tensors, 64, 256, schema, num_experts=2)
    assert get_heuristics_config(config, gemm_type=GemmType.GROUPED_CONTIGUOUS)[0][2]["chord_mode"] == "contiguous"
    with pytest.raises(ModeMismatchError, match=r"packed by chord-pack for Chord mode 'indexed'.*'grouped_masked'"):
        get_heuristics_config(config, gemm_type=GemmType.GROUPED_MASKED)
    masked = BaseWeightSchema.from_config(qc("masked"))
    _, _, mp = packed_experts(2, 64, 256, "masked")
    _, mt = masked.convert_humming(_loaded(masked, mp), [32, 32], [256], torch.bfloat16, num_experts=2)
    with pytest.raises(ModeMismatchError, match=r"mode 'masked'.*gemm_type 'indexed'.*unset/auto"):
        prepare_and_transform_humming_tensors(mt, 64, 256, masked, num_experts=2)
