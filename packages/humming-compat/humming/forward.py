"""``humming.forward``: ``humming_forward`` and ``may_process_input`` as vLLM's MoE experts call them.

Translation only: the gemm type comes from ``compute_config`` (JSON), the routing block size
from ``tuning_config`` (the table ``get_heuristics_config`` built, looked up at
``valid_shape_m`` exactly as vLLM did for moe_align_block_size), and the weight tensors are the
Chord-packed ``weight``/``weight_scale`` the transform produced. Results are written into
``outputs`` (vLLM's workspace) and it is returned.
"""

from __future__ import annotations

import functools
import json

import torch

from .config import GemmType, LayerConfig
from .config.config import as_gemm_type, check_compute_flags
from .errors import not_supported
from .ops import activation_kind, chord_moe_gemm, chord_process_input
from .tune import block_m_from_tuning, check_mode


@torch.compiler.assume_constant_result
def _compute_key(compute_config) -> str:
    if compute_config is None:
        return ""
    return compute_config if isinstance(compute_config, str) else json.dumps(compute_config, sort_keys=True)


@functools.lru_cache(maxsize=256)
def _parse_compute(key: str) -> GemmType | None:
    cfg = json.loads(key) if key else {}
    check_compute_flags(bool(cfg.get("use_f16_accum")), bool(cfg.get("use_batch_invariant")))
    if cfg.get("use_m_major_input_scale"):
        raise not_supported("use_m_major_input_scale (input quantization)")
    gt = cfg.get("gemm_type")
    return None if gt is None else as_gemm_type(gt)


def _infer_gemm_type(config: LayerConfig, sorted_ids, expert_layout) -> GemmType:
    if sorted_ids is not None:
        return GemmType.INDEXED
    if expert_layout is not None:
        n = expert_layout.numel()
        if n == config.num_experts + 1:
            return GemmType.GROUPED_CONTIGUOUS
        if n == config.num_experts:
            return GemmType.GROUPED_MASKED
    raise ValueError("compute_config names no gemm_type and the routing arguments do not say which one")


def humming_forward(
    config: LayerConfig,
    inputs: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor | None = None,
    zero_point: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    weight_scale_2: torch.Tensor | None = None,
    outputs: torch.Tensor | None = None,
    input_scale: torch.Tensor | None = None,
    input_scale_2: torch.Tensor | None = None,
    sorted_ids: torch.Tensor | None = None,
    expert_ids: torch.Tensor | None = None,
    num_tokens_padded: torch.Tensor | None = None,
    expert_layout: torch.Tensor | None = None,
    locks: torch.Tensor | None = None,
    top_k: int = 1,
    valid_shape_m: int = 0,
    compute_config: dict | str | None = None,
    tuning_config: dict | list | str | None = None,
    hadamard_block_size: int | None = None,
    use_pdl: bool | None = None,
) -> torch.Tensor:
    for name, value in (("zero_point", zero_point), ("bias", bias), ("weight_scale_2", weight_scale_2),
                        ("input_scale", input_scale), ("input_scale_2", input_scale_2)):
        if value is not None:
            raise not_supported(f"humming_forward with {name}")
    if hadamard_block_size is not None and hadamard_block_size > 1:
        raise not_supported(f"Hadamard transform (hadamard_block_size={hadamard_block_size})")
    if weight_scale is None:
        raise ValueError("humming_forward needs weight_scale (Chord's group-32 BF16 scales)")
    gt = _parse_compute(_compute_key(compute_config)) or _infer_gemm_type(config, sorted_ids, expert_layout)
    mode = check_mode(config, gt)
    n = weight_scale.shape[-1]
    block_m, expected_m = 1, 1
    if gt == GemmType.INDEXED:
        if sorted_ids is None or expert_ids is None or num_tokens_padded is None:
            raise ValueError("gemm_type indexed needs sorted_ids, expert_ids and num_tokens_padded")
        block_m = block_m_from_tuning(_compute_key(tuning_config), int(valid_shape_m))
        if expert_ids.numel() != -(-sorted_ids.numel() // block_m):
            raise ValueError(
                f"the tuning table gives block size {block_m} at valid_shape_m={valid_shape_m}, but sorted_ids "
                f"({sorted_ids.numel()}) and expert_ids ({expert_ids.numel()} blocks) were aligned with another "
                "block size; pass the tuning_config and valid_shape_m used for moe_align_block_size")
        rows = inputs.shape[0] * top_k
    else:
        if expert_layout is None:
            raise ValueError(f"gemm_type {gt.value} needs expert_layout (offsets or counts)")
        rows = inputs.reshape(-1, inputs.shape[-1]).shape[0]
        expected_m = max(1, -(-int(valid_shape_m) // max(config.num_experts, 1)))
    if outputs is None:
        outputs = torch.empty(rows, n, dtype=torch.bfloat16, device=inputs.device)
    chord_moe_gemm(inputs.reshape(-1, inputs.shape[-1]), weight, weight_scale, outputs, sorted_ids, expert_ids,
                   num_tokens_padded, expert_layout, mode, config.chord_block_k, int(top_k), block_m, expected_m)
    return outputs


def _process(inputs, outputs=None, *, activation_type="none", activation_impl=None, layout="normal",
             expert_tokens=None, scatter_idx=None, num_valid_tokens=None, zero_invalid=False,
             hadamard_block_size=None, quant_mode="none", **unused):
    if quant_mode not in (None, "none"):
        raise not_supported(f"input quantization ({quant_mode})")
    if hadamard_block_size is not None and hadamard_block_size > 1:
        raise not_supported(f"Hadamard transform (hadamard_block_size={hadamard_block_size})")
    if layout not in ("normal", "scatter", "grouped_mask"):
        raise not_supported(f"process_input layout {layout!r}")
    kind = activation_kind(activation_type, activation_impl)
    scatter = layout == "scatter"
    if scatter and (scatter_idx is None or scatter_idx.dim() != 2):
        raise ValueError("layout 'scatter' needs a 2-D scatter_idx")
    if layout == "grouped_mask" and expert_tokens is None:
        raise ValueError("layout 'grouped_mask' needs expert_tokens")
    needed = kind != "none" or scatter or num_valid_tokens is not None or (layout == "grouped_mask" and zero_invalid)
    if not needed:
        if outputs is not None and outputs is not inputs:
            outputs.copy_(inputs)
            return outputs, None, None
        return inputs, None, None
    if outputs is None:
        cols = inputs.shape[-1] // 2 if kind == "silu_mul" else inputs.shape[-1]
        rows = inputs.reshape(-1, inputs.shape[-1]).shape[0] * (scatter_idx.shape[1] if scatter else 1)
        outputs = torch.empty(rows, cols, dtype=inputs.dtype, device=inputs.device)
    chord_process_input(inputs, outputs, kind, layout, scatter_idx, expert_tokens, num_valid_tokens, bool(zero_invalid))
    return outputs, None, None


def may_process_input(
    config: LayerConfig,
    inputs: torch.Tensor,
    *,
    outputs: torch.Tensor | None = None,
    group_scales: torch.Tensor | None = None,
    token_scales: torch.Tensor | None = None,
    activation_type: str = "none",
    activation_impl: str | None = None,
    hadamard_block_size: int | None = None,
    layout: str = "normal",
    expert_tokens: torch.Tensor | None = None,
    scatter_idx: torch.Tensor | None = None,
    num_valid_tokens: torch.Tensor | None = None,
    zero_invalid: bool = False,
    m_major_scale: bool = False,
    use_pdl: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Returns ``(processed, group_scales, token_scales)``; the scales are None (BF16 inputs)."""
    if config.input_quant_mode is not None and config.input_quant_mode.should_quantize:
        raise not_supported(f"input quantization ({config.input_quant_mode.value})")
    if group_scales is not None or token_scales is not None:
        raise not_supported("input scales (quantized activations)")
    return _process(inputs, outputs=outputs, activation_type=activation_type, activation_impl=activation_impl,
                    layout=layout, expert_tokens=expert_tokens, scatter_idx=scatter_idx,
                    num_valid_tokens=num_valid_tokens, zero_invalid=zero_invalid,
                    hadamard_block_size=hadamard_block_size)


def may_quant_input(config: LayerConfig, inputs: torch.Tensor, input_scale=None, quanted_input=None, use_pdl=None):
    """BF16 activations are never quantized: returns ``(inputs, None)``."""
    if config.input_quant_mode is not None and config.input_quant_mode.should_quantize:
        raise not_supported(f"input quantization ({config.input_quant_mode.value})")
    return inputs, None


__all__ = ["humming_forward", "may_process_input", "may_quant_input"]
