"""``prepare_and_transform_humming_tensors``: compressed-tensors INT4 experts -> Chord's packed layout.

vLLM calls this once per MoE sublayer (``w13``, ``w2``) at the end of weight loading, with all
local experts' ``weight`` (int32 [E, N, K/8], compressed-tensors nibble order) and
``weight_scale`` (BF16 [E, N, K/32]). The result replaces the layer's parameters:
``weight`` = Chord ``qweight`` int32 [E, N/16, K/BLOCK_K, 32, BLOCK_K/16] and ``weight_scale``
= BF16 [E, K/32, N]. The packing mode comes from the gemm type vLLM will run and is recorded
in the returned :class:`LayerConfig`, so running the weights with another gemm type is a clear
error. Nothing is padded: Chord takes N % 16 == 0 and K % BLOCK_K == 0 as they are.

A pre-packed checkpoint (``chord-pack convert`` output, :class:`ChordPackedWeightSchema`) is
not repacked: its loaded tensors are re-viewed as ``PackedW4A16`` (same storage, no copy) and
its recorded mode is checked against the gemm type vLLM runs.
"""

from __future__ import annotations

import os

import torch

from . import dtypes
from .config import GemmType, InputQuantizationMode, LayerConfig, WeightScaleType
from .config.config import as_gemm_type, chord_mode_for
from .device import DeviceInfo, check_supported_device
from .errors import not_supported
from .schema import ChordPackedWeightSchema, HummingInputSchema, HummingWeightSchema
from .schema.humming import GROUP_SIZE

__all__ = ["DeviceInfo", "gemm_type_from_env", "prepare_and_transform_humming_tensors"]

GEMM_TYPE_ENV = "VLLM_HUMMING_MOE_GEMM_TYPE"


def gemm_type_from_env() -> tuple[GemmType, str]:
    """vLLM's VLLM_HUMMING_MOE_GEMM_TYPE, as (gemm type, source).

    ``indexed`` -> indexed; ``grouped`` -> grouped_contiguous; other names verbatim. Unset or
    ``auto``: vLLM picks indexed without expert parallelism and grouped_contiguous with it,
    which this function cannot see; it answers indexed with source ``auto`` (indexed and
    contiguous weights share one packed format, BLOCK_K 64, so either runs them).
    """
    raw = os.environ.get(GEMM_TYPE_ENV, "").strip().lower()
    if raw in ("", "auto"):
        return GemmType.INDEXED, "auto"
    if raw == "grouped":
        return GemmType.GROUPED_CONTIGUOUS, "env"
    return as_gemm_type(raw), "env"


def _pack_experts(weight: torch.Tensor, scale: torch.Tensor, mode: str):
    """Unpack and repack one expert at a time (keeps the transient memory to one expert)."""
    from chord_kernels.int4 import unpack_codes_along_k
    from chord_kernels.layouts import pack_w4a16

    parts = [pack_w4a16(unpack_codes_along_k(weight[e:e + 1]), scale[e:e + 1], mode) for e in range(weight.shape[0])]
    first = parts[0]
    qweight = torch.cat([p.qweight for p in parts]) if len(parts) > 1 else first.qweight
    scales = torch.cat([p.scale for p in parts]) if len(parts) > 1 else first.scale
    return qweight, scales, first.block_k


def prepare_and_transform_humming_tensors(
    tensors: dict[str, torch.Tensor],
    shape_n: int,
    shape_k: int,
    weight_schema: HummingWeightSchema,
    input_schema: HummingInputSchema | None = None,
    num_experts: int | None = None,
    pad_n_to_multiple: int = 1,
    pad_k_to_multiple: int = 1,
    has_bias: bool = False,
    torch_dtype: torch.dtype | None = None,
    device: int | torch.device | None = None,
    *,
    gemm_type: GemmType | str | None = None,
) -> tuple[LayerConfig, dict[str, torch.Tensor]]:
    if not isinstance(weight_schema, HummingWeightSchema):
        if hasattr(weight_schema, "to_humming_schema"):
            weight_schema = weight_schema.to_humming_schema(torch_dtype or torch.bfloat16)
        else:
            raise TypeError(f"weight_schema must be a HummingWeightSchema, got {type(weight_schema).__name__}")
    weight_schema.check_supported(torch_dtype)
    if input_schema is None:
        input_schema = HummingInputSchema()
    input_schema.check_supported(torch_dtype)
    if torch_dtype is not None and torch_dtype != torch.bfloat16:
        raise not_supported(f"model dtype {torch_dtype}", "serve with --dtype bfloat16")
    if has_bias or "bias" in tensors:
        raise not_supported("bias on quantized expert weights")
    if not num_experts:
        raise not_supported("dense (non-MoE) quantized linear layers",
                            "Kimi K2.x keeps its non-expert layers unquantized (the checkpoint's ignore list)")
    if isinstance(weight_schema, ChordPackedWeightSchema):
        return _wrap_prepacked(tensors, shape_n, shape_k, weight_schema, num_experts, device, gemm_type)
    tensors = dict(tensors)
    if "weight" not in tensors and "weight_packed" in tensors:
        tensors["weight"] = tensors.pop("weight_packed")
    tensors.pop("weight_shape", None)
    extra = set(tensors) - {"weight", "weight_scale"}
    if extra:
        raise not_supported(f"weight tensors {sorted(extra)}")
    weight, scale = tensors["weight"].view(torch.int32), tensors["weight_scale"]
    want_w, want_s = (num_experts, shape_n, shape_k // 8), (num_experts, shape_n, shape_k // GROUP_SIZE)
    if tuple(weight.shape) != want_w or tuple(scale.shape) != want_s:
        raise ValueError(f"weight {tuple(weight.shape)} / weight_scale {tuple(scale.shape)}: expected "
                         f"{want_w} / {want_s} for N={shape_n}, K={shape_k}, {num_experts} experts")
    check_supported_device(device if device is not None else weight.device)

    gt, source = _gemm_type(gemm_type)
    mode = chord_mode_for(gt)
    try:
        qweight, packed_scale, block_k = _pack_experts(weight, scale.to(torch.bfloat16), mode)
    except ValueError as exc:
        raise ValueError(f"cannot pack this layer for Chord's {mode!r} kernels (N={shape_n}, K={shape_k}): {exc}") from exc

    sm_version = None
    if weight.is_cuda:
        sm_version = DeviceInfo(weight.device).sm_version
    config = LayerConfig(
        sm_version=sm_version, shape_n=shape_n, shape_k=shape_k, pad_shape_n=0, pad_shape_k=0,
        num_experts=num_experts, b_dtype=dtypes.uint4, a_dtype=dtypes.bfloat16, c_dtype=dtypes.bfloat16,
        bs_dtype=dtypes.bfloat16, input_quant_mode=InputQuantizationMode.Disabled,
        weight_scale_group_size=GROUP_SIZE, weight_scale_type=WeightScaleType.GROUP,
        chord_mode=mode, chord_mode_source=source, chord_block_k=block_k,
    )
    return config, {"weight": qweight, "weight_scale": packed_scale}


def _gemm_type(gemm_type):
    """The gemm type vLLM asked for and where it came from ("explicit", or the env's)."""
    return (as_gemm_type(gemm_type), "explicit") if gemm_type is not None else gemm_type_from_env()


def _wrap_prepacked(tensors, shape_n, shape_k, schema: ChordPackedWeightSchema, num_experts, device, gemm_type):
    """A Chord-packed checkpoint: view the loaded parameters as ``PackedW4A16`` (no copy, no
    repack) and check its mode against the gemm type vLLM will run, where that is already known
    (an explicit VLLM_HUMMING_MOE_GEMM_TYPE, or ``auto``, which never runs ``grouped_masked``);
    vLLM's experts re-check it with the final gemm type (``humming.tune.check_mode``)."""
    from chord_kernels.layouts import BLOCK_K_BY_MODE

    from .errors import ModeMismatchError

    extra = set(tensors) - {"weight", "weight_scale"}
    if extra:
        raise not_supported(f"weight tensors {sorted(extra)} in a Chord-packed checkpoint")
    if not num_experts:
        raise not_supported("dense (non-MoE) quantized linear layers")
    packed = schema.packed_tensors(tensors["weight"], tensors["weight_scale"])
    if (packed.num_experts, packed.n, packed.k) != (num_experts, shape_n, shape_k):
        raise ValueError(f"Chord-packed weight holds {(packed.num_experts, packed.n, packed.k)} (E, N, K); "
                         f"vLLM expects {(num_experts, shape_n, shape_k)}")
    check_supported_device(device if device is not None else packed.device)
    gt, source = _gemm_type(gemm_type)
    need = chord_mode_for(gt)
    if BLOCK_K_BY_MODE[need] != packed.block_k:
        how = {"auto": f"{GEMM_TYPE_ENV} unset/auto", "env": f"{GEMM_TYPE_ENV}={gt.value}"}.get(source, "requested")
        raise ModeMismatchError(
            f"the checkpoint was packed by chord-pack for Chord mode {packed.mode!r} (BLOCK_K {packed.block_k}) "
            f"but vLLM runs gemm_type {gt.value!r} ({how}), which needs mode {need!r} (BLOCK_K "
            f"{BLOCK_K_BY_MODE[need]}); serve it with the gemm type of its mode or re-convert with "
            f"chord-pack --mode {need}")
    sm_version = DeviceInfo(packed.device).sm_version if packed.qweight.is_cuda else None
    config = LayerConfig(
        sm_version=sm_version, shape_n=shape_n, shape_k=shape_k, pad_shape_n=0, pad_shape_k=0,
        num_experts=num_experts, b_dtype=dtypes.uint4, a_dtype=dtypes.bfloat16, c_dtype=dtypes.bfloat16,
        bs_dtype=dtypes.bfloat16, input_quant_mode=InputQuantizationMode.Disabled,
        weight_scale_group_size=GROUP_SIZE, weight_scale_type=WeightScaleType.GROUP,
        chord_mode=packed.mode, chord_mode_source="checkpoint", chord_block_k=packed.block_k,
    )
    return config, {"weight": packed.qweight, "weight_scale": packed.scale}
