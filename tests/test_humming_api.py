"""Drive Chord's `humming` the way vLLM 0.32/0.33 does (shared/reference/vllm_contract.md), on CPU.

Kimi-shaped but small: E experts, hidden H, moe_intermediate I; compressed-tensors
pack-quantized int4 group-32 BF16 scales in, Chord-packed weights out, MoE forwards over vLLM's
three routing layouts compared with a dequantized fp32 reference. The recorder at the bottom
writes the call sequence to JSON: the shape of what the GPU replay consumes.
"""

import json

import pytest
import torch
from chord_kernels import routing
from chord_kernels.dispatch import indexed_block_m
from chord_kernels.int4 import dequantize_codes, pack_codes_along_k
from humming import dtypes
from humming.config import GemmType, LayerConfig
from humming.errors import ModeMismatchError, NotSupportedError
from humming.forward import humming_forward, may_process_input
from humming.schema import (
    BaseInputSchema,
    BaseWeightSchema,
    CompressedTensorsWeightSchema,
    HummingInputSchema,
    HummingWeightSchema,
)
from humming.transform import prepare_and_transform_humming_tensors
from humming.tune import get_heuristics_config

E, H, I = 8, 256, 128  # noqa: E741
BF16 = torch.bfloat16
SILU = "(a / (1.f + expf(-a))) * b"
KIMI_CT = {"quant_method": "compressed-tensors", "format": "pack-quantized", "type": "int", "num_bits": 4,
           "strategy": "group", "group_size": 32, "symmetric": True}
POISON = 1.0e4


def _ct_expert_tensors(gen, n, k, e=E):
    codes = torch.randint(0, 16, (e, n, k), generator=gen, dtype=torch.uint8)
    scale = (torch.rand(e, n, k // 32, generator=gen) * 0.02 + 0.005).to(BF16)
    return codes, scale, {"weight_packed": pack_codes_along_k(codes), "weight_scale": scale,
                          "weight_shape": torch.tensor([[n, k]] * e, dtype=torch.int64)}


def _load_sublayer(tensors, n_stacks, k_stacks, e=E, gemm_type=None):
    """UM._convert_sublayer_to_humming + _prepare_and_transform_sublayer, as vLLM calls them."""
    schema = BaseWeightSchema.from_config(dict(KIMI_CT))
    wschema, converted = schema.convert_humming(tensors=tensors, shape_n_stacks=n_stacks,
                                                shape_k_stacks=k_stacks, param_dtype=BF16, num_experts=e)
    ischema, itensors = HummingInputSchema().convert_humming(tensors={}, shape_n_stacks=n_stacks,
                                                             shape_k_stacks=k_stacks, param_dtype=BF16, num_experts=e)
    assert ischema.to_humming_schema(BF16).is_compatible_with(wschema.to_humming_schema(BF16), BF16)
    assert itensors == {} and ischema.static_tensor_scale_name is None
    kwargs = {"gemm_type": gemm_type} if gemm_type else {}
    return prepare_and_transform_humming_tensors(
        tensors=converted, shape_n=sum(n_stacks), shape_k=sum(k_stacks), weight_schema=wschema,
        input_schema=ischema, pad_n_to_multiple=256, pad_k_to_multiple=128, has_bias=False,
        num_experts=e, torch_dtype=BF16, device=torch.device("cpu"), **kwargs)


@pytest.fixture(scope="module")
def kimi_layer():
    gen = torch.Generator().manual_seed(0)
    c13, s13, t13 = _ct_expert_tensors(gen, 2 * I, H)
    c2, s2, t2 = _ct_expert_tensors(gen, H, I)
    return {"w13": dequantize_codes(c13, s13), "w2": dequantize_codes(c2, s2), "t13": t13, "t2": t2}


def _packed(kimi_layer, gemm_type=None, e=E):
    cfg13, p13 = _load_sublayer(kimi_layer["t13"], [I, I], [H], e, gemm_type)
    cfg2, p2 = _load_sublayer(kimi_layer["t2"], [H], [I], e, gemm_type)
    return cfg13, p13, cfg2, p2


def _compute(gemm_type):
    return json.dumps({"use_batch_invariant": False, "use_f16_accum": False, "gemm_type": gemm_type})


def _silu_mul(x):
    return (torch.nn.functional.silu(x[:, :I].float()) * x[:, I:].float()).to(BF16)


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-9)).item()


def _ref_expert(x, w, experts):
    return torch.stack([(x[i].float() @ w[int(e)].float().t()) for i, e in enumerate(experts)]).to(BF16)


# ---------------------------------------------------------------- load: schema, transform, tuning


def test_transform_gives_vllm_what_it_reads(kimi_layer):
    cfg13, p13, cfg2, p2 = _packed(kimi_layer)
    assert set(p13) == {"weight", "weight_scale"}
    assert p13["weight"].dtype == torch.int32 and p13["weight"].size(0) == E
    assert tuple(p13["weight_scale"].shape) == (E, H // 32, 2 * I)
    assert (cfg13.num_experts, cfg13.shape_n, cfg13.shape_k, cfg13.pad_shape_n, cfg13.pad_shape_k) == (E, 2 * I, H, 0, 0)
    assert cfg2.shape_k - cfg2.pad_shape_k == (cfg13.shape_n - cfg13.pad_shape_n) // 2
    assert cfg13.a_dtype == dtypes.bfloat16 and cfg13.c_dtype == dtypes.bfloat16 and str(cfg13.b_dtype) == "uint4"
    assert not cfg13.input_quant_mode.should_quantize and not cfg13.input_quant_mode.has_group_scale
    assert cfg13.chord_mode == "indexed" and cfg13.chord_mode_source == "auto"
    assert hash(cfg13) == hash(cfg13) and json.loads(cfg13.to_str())["chord_mode"] == "indexed"


def test_ct_schema_tensor_attrs_for_route_b():
    schema = BaseWeightSchema.from_config(dict(KIMI_CT, dynamic=False, observer="minmax"))
    assert isinstance(schema, CompressedTensorsWeightSchema)
    attrs = schema.get_padded_tensors_attrs(shape_n=2 * I, shape_k=H, param_dtype=BF16, num_experts=E,
                                            has_bias=False, pad_n_to_multiple=256, pad_k_to_multiple=128)
    assert attrs["weight_packed"]["shape"] == (E, 2 * I, H // 8) and attrs["weight_packed"]["dtype"] == torch.int32
    assert attrs["weight_packed"]["extra_attrs"] == {"input_dim": 2, "output_dim": 1, "packed_dim": 2, "packed_factor": 8}
    assert attrs["weight_scale"]["shape"] == (E, 2 * I, H // 32) and attrs["weight_scale"]["extra_attrs"]["scale_type"] == "group"
    assert attrs["weight_shape"]["shape"] == (E, 2)
    hs = schema.to_humming_schema(BF16)
    assert (hs.b_dtype, hs.bs_dtype, hs.weight_scale_group_size, hs.has_zero_point, hs.hadamard_block_size) == (
        dtypes.uint4, dtypes.bfloat16, 32, False, 0)
    assert isinstance(BaseInputSchema.from_config({"quant_method": "humming", "dtype": "bfloat16"}), HummingInputSchema)
    assert set(BaseInputSchema.INPUT_SCHEMA_MAP) >= {"compressed-tensors", "humming"}


def test_tuning_table_block_size_is_chords_indexed_block_m(kimi_layer):
    cfg13, _, _, _ = _packed(kimi_layer)
    table = get_heuristics_config(layer_config=cfg13, use_f16_accum=False, use_batch_invariant=False,
                                  gemm_type=GemmType.INDEXED)
    table = json.loads(json.dumps(table))
    for m in list(range(0, 600 * E)) + [10**5, 10**7]:  # every window of the prefill model too
        hits = [cfg for lo, hi, cfg in table if lo < m <= hi]
        assert len(hits) == 1, m
        assert hits[0]["block_shape"][0] == indexed_block_m(m, E, cfg13.shape_n, cfg13.shape_k), m
    want = indexed_block_m(3 * E, E, cfg13.shape_n, cfg13.shape_k)
    assert get_heuristics_config(cfg13, shape_m=3 * E, gemm_type="indexed")["block_shape"][0] == want


# ---------------------------------------------------------------- forwards


@pytest.mark.parametrize("top_k,m", [(8, 5), (1, 9), (2, 37)])
def test_indexed_forward_like_vllm(kimi_layer, top_k, m):
    cfg13, p13, cfg2, p2 = _packed(kimi_layer)
    gen = torch.Generator().manual_seed(top_k * 100 + m)
    x = torch.randn(m, H, generator=gen).to(BF16)
    topk_ids = torch.stack([torch.randperm(E, generator=gen)[:top_k] for _ in range(m)]).to(torch.int32)
    valid_shape_m = topk_ids.numel()
    tables = {s: json.dumps(get_heuristics_config(c, use_f16_accum=False, use_batch_invariant=False,
                                                  gemm_type=GemmType.INDEXED)) for s, c in (("w13", cfg13), ("w2", cfg2))}
    bs = next(cfg["block_shape"][0] for lo, hi, cfg in json.loads(tables["w13"]) if lo < valid_shape_m <= hi)
    sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk_ids, bs, E)
    assert sorted_ids.numel() > ntp.item()  # over-allocated, sentinel tail
    locks = torch.zeros(132 * 8, dtype=torch.int32)
    gate_up = torch.full((m * top_k, 2 * I), POISON, dtype=BF16)
    ret = humming_forward(cfg13, inputs=x, weight=p13["weight"], weight_scale=p13["weight_scale"], zero_point=None,
                          bias=None, weight_scale_2=None, input_scale=None, input_scale_2=None, outputs=gate_up,
                          locks=locks, sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=ntp,
                          compute_config=_compute("indexed"), valid_shape_m=valid_shape_m, top_k=top_k,
                          tuning_config=tables["w13"])
    assert ret is gate_up
    down_in = torch.full((m * top_k, I), POISON, dtype=BF16)
    act, gs, ts = may_process_input(cfg2, inputs=gate_up, outputs=down_in, token_scales=None, hadamard_block_size=None,
                                    layout="normal", expert_tokens=None, scatter_idx=None, num_valid_tokens=None,
                                    activation_type="binary_split", activation_impl=SILU)
    assert act is down_in and gs is None and ts is None
    down = torch.full((m * top_k, H), POISON, dtype=BF16)
    humming_forward(cfg2, inputs=down_in, weight=p2["weight"], weight_scale=p2["weight_scale"], outputs=down,
                    locks=locks, sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=ntp,
                    compute_config=_compute("indexed"), valid_shape_m=valid_shape_m, top_k=1,
                    tuning_config=tables["w2"])
    experts = topk_ids.reshape(-1)
    ref13 = _ref_expert(x.repeat_interleave(top_k, 0), kimi_layer["w13"], experts)
    assert _rel(gate_up, ref13) < 1e-2
    ref2 = _ref_expert(_silu_mul(ref13), kimi_layer["w2"], experts)
    assert _rel(down, ref2) < 2e-2 and not torch.isnan(down).any()


def test_indexed_with_expert_map_leaves_remote_routes_untouched(kimi_layer):
    cfg13, p13, _, _ = _packed(kimi_layer)
    gen = torch.Generator().manual_seed(7)
    m, top_k, global_e = 6, 4, 2 * E
    x = torch.randn(m, H, generator=gen).to(BF16)
    topk_ids = torch.stack([torch.randperm(global_e, generator=gen)[:top_k] for _ in range(m)]).to(torch.int32)
    expert_map = torch.full((global_e,), -1, dtype=torch.int32)
    expert_map[E:] = torch.arange(E, dtype=torch.int32)  # this rank owns the upper half
    table = json.dumps(get_heuristics_config(cfg13, gemm_type="indexed"))
    valid = -(-topk_ids.numel() * E // global_e)
    bs = get_heuristics_config(cfg13, shape_m=valid, gemm_type="indexed")["block_shape"][0]
    sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk_ids, bs, global_e, expert_map)
    out = torch.full((m * top_k, 2 * I), POISON, dtype=BF16)
    humming_forward(cfg13, inputs=x, weight=p13["weight"], weight_scale=p13["weight_scale"], outputs=out,
                    sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=ntp, top_k=top_k,
                    valid_shape_m=valid, compute_config=_compute("indexed"), tuning_config=table)
    local = expert_map[topk_ids.reshape(-1).long()]
    mine = local >= 0
    assert (out[~mine] == POISON).all()
    ref = _ref_expert(x.repeat_interleave(top_k, 0)[mine], kimi_layer["w13"], local[mine])
    assert _rel(out[mine], ref) < 1e-2


@pytest.mark.parametrize("env", ["grouped", "auto"])
def test_grouped_contiguous_forward_like_vllm(kimi_layer, monkeypatch, env):
    monkeypatch.setenv("VLLM_HUMMING_MOE_GEMM_TYPE", env)
    cfg13, p13, cfg2, p2 = _packed(kimi_layer)
    assert cfg13.chord_mode == ("contiguous" if env == "grouped" else "indexed")
    gen = torch.Generator().manual_seed(11)
    m, top_k, global_e = 7, 4, 2 * E
    x = torch.randn(m, H, generator=gen).to(BF16)
    topk_ids = torch.stack([torch.randperm(global_e, generator=gen)[:top_k] for _ in range(m)]).to(torch.int32)
    expert_map = torch.full((global_e,), -1, dtype=torch.int32)
    expert_map[::2] = torch.arange(E, dtype=torch.int32)
    offsets, inv_perm = routing.contiguous_offsets(topk_ids, E, expert_map)  # moe_prepare_scatter's outputs
    valid = -(-topk_ids.numel() * E // global_e)
    t13 = json.dumps(get_heuristics_config(cfg13, gemm_type=GemmType.GROUPED_CONTIGUOUS))
    t2 = json.dumps(get_heuristics_config(cfg2, gemm_type=GemmType.GROUPED_CONTIGUOUS))
    rows = m * top_k
    scattered = torch.full((rows, H), POISON, dtype=BF16)
    may_process_input(cfg13, inputs=x, outputs=scattered, layout="scatter", scatter_idx=inv_perm,
                      num_valid_tokens=offsets[-1:])
    gate_up = torch.full((rows, 2 * I), POISON, dtype=BF16)
    humming_forward(cfg13, inputs=scattered, weight=p13["weight"], weight_scale=p13["weight_scale"], outputs=gate_up,
                    expert_layout=offsets, valid_shape_m=valid, compute_config=_compute("grouped_contiguous"),
                    tuning_config=t13)
    down_in = torch.full((rows, I), POISON, dtype=BF16)
    may_process_input(cfg2, inputs=gate_up, outputs=down_in, activation_type="binary_split", activation_impl=SILU,
                      num_valid_tokens=offsets[-1:])
    down = torch.full((rows, H), POISON, dtype=BF16)
    humming_forward(cfg2, inputs=down_in, weight=p2["weight"], weight_scale=p2["weight_scale"], outputs=down,
                    expert_layout=offsets, valid_shape_m=valid, compute_config=_compute("grouped_contiguous"),
                    tuning_config=t2)
    n_valid = int(offsets[-1])
    dest = inv_perm.reshape(-1).long()
    keep = dest >= 0
    src_tok = torch.arange(rows)[keep] // top_k
    local = expert_map[topk_ids.reshape(-1).long()][keep]
    order = dest[keep]
    ref13 = _ref_expert(x[src_tok], kimi_layer["w13"], local)
    ref2 = _ref_expert(_silu_mul(ref13), kimi_layer["w2"], local)
    assert (scattered[order] == x[src_tok]).all()
    assert _rel(gate_up[order], ref13) < 1e-2 and _rel(down[order], ref2) < 2e-2
    assert sorted(order.tolist()) == list(range(n_valid))


def test_grouped_masked_forward_like_vllm(kimi_layer, monkeypatch):
    monkeypatch.setenv("VLLM_HUMMING_MOE_GEMM_TYPE", "grouped_masked")
    cfg13, p13, cfg2, p2 = _packed(kimi_layer)
    assert cfg13.chord_mode == "masked" and cfg13.chord_block_k == 128
    gen = torch.Generator().manual_seed(5)
    max_m = 4
    counts = torch.tensor([0, 4, 1, 3, 2, 4, 0, 1], dtype=torch.int32)
    x = torch.randn(E * max_m, H, generator=gen).to(BF16)
    t13 = json.dumps(get_heuristics_config(cfg13, gemm_type="grouped_masked"))
    gate_up = torch.full((E * max_m, 2 * I), POISON, dtype=BF16)
    humming_forward(cfg13, inputs=x, weight=p13["weight"], weight_scale=p13["weight_scale"], outputs=gate_up,
                    expert_layout=counts, valid_shape_m=int(counts.sum()), compute_config=_compute("grouped_masked"),
                    tuning_config=t13)
    down_in = torch.full((E * max_m, I), POISON, dtype=BF16)
    may_process_input(cfg2, inputs=gate_up, outputs=down_in, activation_type="binary_split", activation_impl=SILU,
                      layout="grouped_mask", expert_tokens=counts)
    down = torch.full((E, max_m, H), POISON, dtype=BF16)
    humming_forward(cfg2, inputs=down_in, weight=p2["weight"], weight_scale=p2["weight_scale"], outputs=down,
                    expert_layout=counts, valid_shape_m=int(counts.sum()), compute_config=_compute("grouped_masked"),
                    tuning_config=json.dumps(get_heuristics_config(cfg2, gemm_type="grouped_masked")))
    rows = torch.arange(max_m).repeat(E) < counts.long().repeat_interleave(max_m)
    experts = torch.arange(E).repeat_interleave(max_m)[rows]
    ref13 = _ref_expert(x[rows], kimi_layer["w13"], experts)
    ref2 = _ref_expert(_silu_mul(ref13), kimi_layer["w2"], experts)
    assert _rel(gate_up[rows], ref13) < 1e-2 and _rel(down.reshape(-1, H)[rows], ref2) < 2e-2


# ---------------------------------------------------------------- may_process_input


def test_silu_and_mul_and_layouts():
    gen = torch.Generator().manual_seed(3)
    cfg = LayerConfig(shape_n=16, shape_k=8, b_dtype="uint4", a_dtype="bfloat16", c_dtype="bfloat16")
    x = torch.randn(6, 16, generator=gen).to(BF16)
    want = _silu_mul_n(x, 8)
    out = torch.full((6, 8), POISON, dtype=BF16)
    may_process_input(cfg, inputs=x, outputs=out, activation_type="binary_split", activation_impl=SILU)
    assert torch.equal(out, want)
    # num_valid_tokens: rows at/after it stay as they were (zeroed with zero_invalid)
    out = torch.full((6, 8), POISON, dtype=BF16)
    may_process_input(cfg, inputs=x, outputs=out, activation_type="binary_split", activation_impl=SILU,
                      num_valid_tokens=torch.tensor([4]))
    assert torch.equal(out[:4], want[:4]) and (out[4:] == POISON).all()
    # scatter with -1 and out-of-range targets, width 2
    idx = torch.tensor([[3, -1], [0, 5], [7, 1]], dtype=torch.int32)
    out = torch.full((6, 16), POISON, dtype=BF16)
    may_process_input(cfg, inputs=x[:3], outputs=out, layout="scatter", scatter_idx=idx)
    assert torch.equal(out[3], x[0]) and torch.equal(out[0], x[1]) and torch.equal(out[5], x[1])
    assert torch.equal(out[1], x[2]) and (out[[2, 4]] == POISON).all()
    # nothing to do: returns inputs itself, or copies into outputs
    assert may_process_input(cfg, inputs=x)[0] is x
    copy = torch.empty_like(x)
    assert may_process_input(cfg, inputs=x, outputs=copy)[0] is copy and torch.equal(copy, x)
    # grouped_mask zero_invalid
    out = torch.full((6, 8), POISON, dtype=BF16)
    may_process_input(cfg, inputs=x, outputs=out, activation_type="binary_split", activation_impl=SILU,
                      layout="grouped_mask", expert_tokens=torch.tensor([1, 3], dtype=torch.int32), zero_invalid=True)
    assert torch.equal(out[[0, 3, 4, 5]], want[[0, 3, 4, 5]]) and (out[[1, 2]] == 0).all()


def _silu_mul_n(x, half):
    return (torch.nn.functional.silu(x[:, :half].float()) * x[:, half:].float()).to(BF16)


def test_custom_ops_have_fake_impls():
    import humming.ops  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(4, 16, dtype=BF16)
        out = torch.empty(4, 8, dtype=BF16)
        torch.ops.humming.chord_process_input(x, out, "silu_mul", "normal", None, None, None, False)
    x = torch.randn(4, 16).to(BF16)
    out = torch.empty(4, 8, dtype=BF16)
    torch.library.opcheck(torch.ops.humming.chord_process_input.default,
                          (x, out, "silu_mul", "normal", None, None, None, False),
                          test_utils=("test_schema", "test_faketensor"))


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("bad", [
    {"group_size": 128}, {"num_bits": 8, "format": "int-quantized"}, {"symmetric": False},
    {"format": "float-quantized", "type": "float", "num_bits": 8}, {"actorder": "group"}, {"strategy": "channel"},
    {"format": "nvfp4-pack-quantized"},
])
def test_unsupported_compressed_tensors_options_are_named(bad):
    with pytest.raises(NotSupportedError) as err:
        BaseWeightSchema.from_config(dict(KIMI_CT, **bad))
    assert "not supported by Chord" in str(err.value)


@pytest.mark.parametrize("method", ["fp8", "awq", "gptq", "modelopt", "mxfp4", "gpt_oss_mxfp4", "bitnet", "quark"])
def test_unsupported_schemes_raise_naming_them(method):
    with pytest.raises(NotSupportedError, match="not supported"):
        BaseWeightSchema.from_config({"quant_method": method})
    with pytest.raises(ValueError, match="unsupported weight quant_method"):
        BaseWeightSchema.from_config({"quant_method": "nope"})


def test_schema_modules_vllm_imports_exist():
    from humming.schema.fp8 import Fp8WeightSchema
    from humming.schema.modelopt import (
        ModeloptMxfp8WeightSchema,
        ModeloptNvfp4InputSchema,
        ModeloptNvfp4WeightSchema,
    )

    for cls in (Fp8WeightSchema, ModeloptMxfp8WeightSchema, ModeloptNvfp4InputSchema, ModeloptNvfp4WeightSchema):
        with pytest.raises(NotSupportedError, match="not supported"):
            cls()


def test_unsupported_weight_and_input_options(kimi_layer):
    _, converted = BaseWeightSchema.from_config(dict(KIMI_CT)).convert_humming(
        kimi_layer["t13"], [I, I], [H], BF16, num_experts=E)
    fp8_in = HummingInputSchema(a_dtype="float8e4m3", input_quant_mode="dynamic_token",
                                input_scale_dtype="float32")
    hs = HummingWeightSchema(b_dtype=dtypes.uint4, bs_dtype=dtypes.bfloat16, weight_scale_group_size=32)
    assert not fp8_in.is_compatible_with(hs, BF16)
    with pytest.raises(NotSupportedError, match="input quantization"):
        fp8_in.convert_humming({}, [I, I], [H], BF16, E)
    with pytest.raises(NotSupportedError, match="input quantization"):
        prepare_and_transform_humming_tensors(converted, 2 * I, H, hs, fp8_in, num_experts=E)
    for bad, what in ((dict(weight_scale_group_size=128), "group size"), (dict(has_zero_point=True), "zero point"),
                      (dict(b_dtype="float4e2m1"), "float4e2m1"), (dict(hadamard_block_size=128), "Hadamard"),
                      (dict(bs_dtype="float16"), "scale dtype")):
        schema = HummingWeightSchema(**{**dict(b_dtype="uint4", bs_dtype="bfloat16", weight_scale_group_size=32), **bad})
        with pytest.raises(NotSupportedError, match=what):
            prepare_and_transform_humming_tensors(converted, 2 * I, H, schema, num_experts=E)
    with pytest.raises(NotSupportedError, match="float16"):
        prepare_and_transform_humming_tensors(converted, 2 * I, H, hs, num_experts=E, torch_dtype=torch.float16)
    with pytest.raises(NotSupportedError, match="dense"):
        prepare_and_transform_humming_tensors(converted, 2 * I, H, hs)
    with pytest.raises(NotSupportedError, match="bias"):
        prepare_and_transform_humming_tensors(converted, 2 * I, H, hs, num_experts=E, has_bias=True)
    with pytest.raises(NotSupportedError, match="online quantization"):
        HummingWeightSchema.quant_tensor(torch.zeros(2), hs, BF16)


def test_f16_accum_and_batch_invariant_are_rejected(kimi_layer):
    cfg13, p13, _, _ = _packed(kimi_layer)
    with pytest.raises(NotSupportedError, match="VLLM_HUMMING_USE_F16_ACCUM"):
        get_heuristics_config(cfg13, use_f16_accum=True, use_batch_invariant=False, gemm_type=GemmType.INDEXED)
    with pytest.raises(NotSupportedError, match="VLLM_BATCH_INVARIANT"):
        get_heuristics_config(cfg13, use_f16_accum=False, use_batch_invariant=True, gemm_type=GemmType.INDEXED)
    sorted_ids, expert_ids, ntp = routing.moe_align_block_size(torch.zeros(2, 1, dtype=torch.int32), 8, E)
    bad = json.dumps({"use_batch_invariant": True, "use_f16_accum": False, "gemm_type": "indexed"})
    with pytest.raises(NotSupportedError, match="VLLM_BATCH_INVARIANT"):
        humming_forward(cfg13, inputs=torch.zeros(2, H, dtype=BF16), weight=p13["weight"],
                        weight_scale=p13["weight_scale"], sorted_ids=sorted_ids, expert_ids=expert_ids,
                        num_tokens_padded=ntp, top_k=1, valid_shape_m=2, compute_config=bad,
                        tuning_config=json.dumps(get_heuristics_config(cfg13, gemm_type="indexed")))


def test_mode_mismatch_is_a_clear_error(kimi_layer, monkeypatch):
    monkeypatch.setenv("VLLM_HUMMING_MOE_GEMM_TYPE", "indexed")
    cfg13, p13, _, _ = _packed(kimi_layer)
    for gt in ("grouped_masked", "grouped_contiguous"):
        with pytest.raises(ModeMismatchError, match="'indexed'.*" + gt):
            get_heuristics_config(cfg13, gemm_type=gt)
    with pytest.raises(ModeMismatchError):
        humming_forward(cfg13, inputs=torch.zeros(8, H, dtype=BF16), weight=p13["weight"],
                        weight_scale=p13["weight_scale"], expert_layout=torch.zeros(E, dtype=torch.int32),
                        valid_shape_m=1, compute_config=_compute("grouped_masked"))
    monkeypatch.setenv("VLLM_HUMMING_MOE_GEMM_TYPE", "auto")
    cfg_auto, _, _, _ = _packed(kimi_layer)
    with pytest.raises(ModeMismatchError):  # auto packs BLOCK_K 64; masked needs 128
        get_heuristics_config(cfg_auto, gemm_type="grouped_masked")
    monkeypatch.setenv("VLLM_HUMMING_MOE_GEMM_TYPE", "dense")
    with pytest.raises(NotSupportedError, match="dense"):
        _packed(kimi_layer)
    monkeypatch.setenv("VLLM_HUMMING_MOE_GEMM_TYPE", "bogus")
    with pytest.raises(NotSupportedError, match="bogus"):
        _packed(kimi_layer)


def test_block_size_mismatch_and_unknown_activation(kimi_layer):
    cfg13, p13, _, _ = _packed(kimi_layer)
    topk_ids = torch.zeros(3, 2, dtype=torch.int32)
    sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk_ids, 64, E)  # vLLM's fallback size
    with pytest.raises(ValueError, match="block size"):
        humming_forward(cfg13, inputs=torch.zeros(3, H, dtype=BF16), weight=p13["weight"],
                        weight_scale=p13["weight_scale"], sorted_ids=sorted_ids, expert_ids=expert_ids,
                        num_tokens_padded=ntp, top_k=2, valid_shape_m=6, compute_config=_compute("indexed"),
                        tuning_config=json.dumps(get_heuristics_config(cfg13, gemm_type="indexed")))
    gelu = "(0.5f * a * (1.f + erff(a * 0.7071067811865476f))) * b"
    for kind, impl in (("binary_split", gelu), ("binary_interleaved", SILU), ("unary", "a / (1.f + expf(-a))")):
        with pytest.raises(NotSupportedError, match="activation"):
            may_process_input(cfg13, inputs=torch.zeros(2, 2 * I, dtype=BF16), activation_type=kind,
                              activation_impl=impl)


def test_unsupported_gpu_is_rejected_at_load(monkeypatch):
    from chord_kernels import device as cdev
    from humming.device import check_supported_device

    cdev.kernel_arch.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "NVIDIA A100-SXM4-80GB")
    try:
        with pytest.raises(cdev.UnsupportedDeviceError, match="SM90"):
            check_supported_device("cuda:0")
    finally:
        cdev.kernel_arch.cache_clear()


def test_older_surface_layer_wrapper(kimi_layer):
    from humming.layer import HummingLayerMeta, HummingMethod

    schema, converted = BaseWeightSchema.from_config(dict(KIMI_CT)).convert_humming(
        kimi_layer["t13"], [I, I], [H], BF16, num_experts=E)
    layer = torch.nn.Module()
    for name, t in converted.items():
        layer.register_parameter(f"w13_{name}", torch.nn.Parameter(t, requires_grad=False))
    meta = HummingMethod.transform_humming_layer(layer, "w13", schema, 2 * I, H, E, gemm_type="indexed")
    assert isinstance(meta, HummingLayerMeta) and layer.humming_metas["w13"] is meta
    assert layer.w13_weight.dim() == 5 and meta.weight_name == "w13_weight"


# ---------------------------------------------------------------- call recording (replayed on the GPU later)


class Recorder:
    """Wraps humming's entry points and logs every call: argument shapes, dtypes, scalars, and the
    routing tensors' values (small here), in order."""

    ROUTING = {"sorted_ids", "expert_ids", "num_tokens_padded", "expert_layout", "scatter_idx",
               "num_valid_tokens", "expert_tokens"}

    def __init__(self):
        self.calls = []

    def _describe(self, name, value):
        if isinstance(value, torch.Tensor):
            d = {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
            if name in self.ROUTING:
                d["values"] = value.reshape(-1).tolist()
            return d
        if isinstance(value, LayerConfig):
            return {"layer_config": json.loads(value.to_str())}
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        return repr(value)

    def wrap(self, name, fn):
        def call(*args, **kwargs):
            self.calls.append({"fn": name, "args": [self._describe("", a) for a in args],
                               "kwargs": {k: self._describe(k, v) for k, v in kwargs.items()}})
            return fn(*args, **kwargs)
        return call


def test_record_vllm_call_sequence(kimi_layer, tmp_path, monkeypatch):
    import humming.forward as hf
    import humming.transform as ht
    import humming.tune as htune

    rec = Recorder()
    monkeypatch.setattr(ht, "prepare_and_transform_humming_tensors",
                        rec.wrap("transform.prepare_and_transform_humming_tensors", ht.prepare_and_transform_humming_tensors))
    tune = rec.wrap("tune.get_heuristics_config", htune.get_heuristics_config)
    fwd = rec.wrap("forward.humming_forward", hf.humming_forward)
    proc = rec.wrap("forward.may_process_input", hf.may_process_input)
    cfg13, p13 = ht.prepare_and_transform_humming_tensors(
        BaseWeightSchema.from_config(dict(KIMI_CT)).convert_humming(kimi_layer["t13"], [I, I], [H], BF16, num_experts=E)[1],
        shape_n=2 * I, shape_k=H, weight_schema=HummingWeightSchema(b_dtype="uint4", bs_dtype="bfloat16",
                                                                    weight_scale_group_size=32),
        num_experts=E, torch_dtype=BF16)
    table = json.dumps(tune(layer_config=cfg13, use_f16_accum=False, use_batch_invariant=False, gemm_type=GemmType.INDEXED))
    topk_ids = torch.tensor([[0, 3], [3, 5], [7, 0]], dtype=torch.int32)
    bs = get_heuristics_config(cfg13, shape_m=6, gemm_type="indexed")["block_shape"][0]
    sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk_ids, bs, E)
    out = torch.empty(6, 2 * I, dtype=BF16)
    fwd(cfg13, inputs=torch.randn(3, H).to(BF16), weight=p13["weight"], weight_scale=p13["weight_scale"], outputs=out,
        sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=ntp, top_k=2, valid_shape_m=6,
        compute_config=_compute("indexed"), tuning_config=table)
    proc(cfg13, inputs=out, outputs=torch.empty(6, I, dtype=BF16), activation_type="binary_split", activation_impl=SILU,
         layout="normal")
    path = tmp_path / "humming_calls.json"
    path.write_text(json.dumps({"format": 1, "calls": rec.calls}, indent=1))
    back = json.loads(path.read_text())["calls"]
    assert [c["fn"] for c in back] == ["transform.prepare_and_transform_humming_tensors", "tune.get_heuristics_config",
                                       "forward.humming_forward", "forward.may_process_input"]
    assert back[2]["kwargs"]["sorted_ids"]["values"] == sorted_ids.tolist()
    assert back[2]["kwargs"]["num_tokens_padded"]["values"] == ntp.tolist()
    assert back[2]["args"][0]["layer_config"]["chord_mode"] == "indexed"
