"""``humming.tune.get_heuristics_config``: the tuning table vLLM reads its routing block size from.

For the indexed path vLLM iterates the table as ``(lower, upper, cfg)`` entries and uses
``cfg["block_shape"][0]`` of the entry with ``lower < valid_shape_m <= upper`` as the
``moe_align_block_size`` block size. Chord's block size per window is
``chord_kernels.dispatch.indexed_block_m(valid_shape_m, num_experts, n, k)`` for the layer's
shape (vLLM builds a table for gate_up and one for down, and aligns twice if they differ). The table is
JSON-serialisable; vLLM hands it back to ``humming_forward`` as ``tuning_config``.
"""

from __future__ import annotations

import functools
import json

from ..config import GemmType, LayerConfig
from ..config.config import as_gemm_type, check_compute_flags, chord_mode_for
from ..device import DeviceInfo, get_device_index  # noqa: F401  (names vLLM 0.32 patches)
from ..errors import ModeMismatchError, not_supported

TABLE_END = 1 << 40  # upper bound of the last window ("any M")


def check_mode(layer_config: LayerConfig, gemm_type) -> str:
    """The Chord mode ``gemm_type`` needs; raise if the weights were packed for another one."""
    from chord_kernels.layouts import BLOCK_K_BY_MODE

    gt = as_gemm_type(gemm_type)
    need = chord_mode_for(gt)
    have = layer_config.chord_mode
    if have is None:
        raise not_supported("a LayerConfig that Chord's transform did not produce")
    if have == need:
        return need
    if layer_config.chord_mode_source in ("auto", "checkpoint") and BLOCK_K_BY_MODE[have] == BLOCK_K_BY_MODE[need]:
        return need  # indexed and contiguous share one packed format (BLOCK_K 64)
    if layer_config.chord_mode_source == "checkpoint":
        raise ModeMismatchError(
            f"the checkpoint was packed by chord-pack for Chord mode {have!r} (BLOCK_K {BLOCK_K_BY_MODE[have]}) "
            f"but vLLM runs gemm_type {gt.value!r}, which needs mode {need!r} (BLOCK_K {BLOCK_K_BY_MODE[need]}); "
            f"serve it with the gemm type of its mode (VLLM_HUMMING_MOE_GEMM_TYPE) or re-convert with "
            f"chord-pack --mode {need}")
    raise ModeMismatchError(
        f"the weights were packed for Chord mode {have!r} but vLLM runs gemm_type {gt.value!r}, which needs "
        f"{need!r}; set VLLM_HUMMING_MOE_GEMM_TYPE to the gemm type you serve with before loading "
        f"(or convert with chord-pack --mode {need})")


@functools.lru_cache(maxsize=256)
def _indexed_table(num_experts: int, n: int, k: int) -> tuple:
    from chord_kernels.dispatch import indexed_block_m_windows

    return tuple((lo, TABLE_END if hi is None else hi, bm) for lo, hi, bm in indexed_block_m_windows(num_experts, n, k))


def get_heuristics_config(
    layer_config: LayerConfig,
    shape_m: int | None = None,
    use_f16_accum: bool = False,
    use_batch_invariant: bool = False,
    use_m_major_input_scale: bool = False,
    gemm_type: str | GemmType | None = "dense",
    device=None,
):
    """A list of ``[lower, upper, {"block_shape": [block_m, block_n, block_k], ...}]`` covering
    every M (or, with ``shape_m``, the one entry's dict). Rejects F16 accumulation,
    batch-invariant mode and a gemm type the weights were not packed for."""
    check_compute_flags(use_f16_accum, use_batch_invariant)
    if use_m_major_input_scale:
        raise not_supported("use_m_major_input_scale (input quantization)")
    if gemm_type is None:
        raise ValueError("gemm_type must be specified for MoE GEMM")
    gt = as_gemm_type(gemm_type)
    mode = check_mode(layer_config, gt)
    block_k = layer_config.chord_block_k
    if gt == GemmType.INDEXED:
        rows = _indexed_table(layer_config.num_experts, layer_config.shape_n, layer_config.shape_k)
    else:
        rows = ((-1, TABLE_END, 64),)
    table = [[lo, hi, {"block_shape": [bm, 128, block_k], "chord_mode": mode, "gemm_type": gt.value}]
             for lo, hi, bm in rows]
    if isinstance(shape_m, int):
        return lookup(table, shape_m)
    return table


VLLM_FALLBACK_BLOCK_M = 64  # what vLLM uses when no window matches


def lookup(table, valid_shape_m: int) -> dict:
    """The entry vLLM picks: ``lower < valid_shape_m <= upper`` (vLLM's fallback if none)."""
    for lo, hi, cfg in table:
        if lo < valid_shape_m <= hi:
            return cfg
    return {"block_shape": [VLLM_FALLBACK_BLOCK_M, 128, 0]}


@functools.lru_cache(maxsize=1024)
def block_m_from_tuning(tuning_config: str, valid_shape_m: int) -> int:
    """The block size vLLM used for moe_align_block_size, read back from the JSON table."""
    table = json.loads(tuning_config)
    if isinstance(table, dict):
        return int(table["block_shape"][0])
    return int(lookup(table, valid_shape_m)["block_shape"][0])
