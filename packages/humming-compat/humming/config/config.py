"""``LayerConfig`` (what vLLM reads back after the transform) and ``ComputeConfig``."""

from __future__ import annotations

import dataclasses
import json

from .. import dtypes
from ..device import DeviceInfo  # noqa: F401  (vLLM 0.32's _patch_humming looks this name up)
from ..errors import not_supported
from .enum import (
    CHORD_MODE_BY_GEMM_TYPE,
    GemmType,
    InputQuantizationMode,
    WeightScale2Type,
    WeightScaleType,
)


@dataclasses.dataclass(kw_only=True, unsafe_hash=True)
class LayerConfig:
    """One GEMM layer (or one MoE sublayer, ``w13`` / ``w2``) as Chord packed it.

    vLLM reads ``num_experts``, ``shape_n``/``shape_k`` (padded), ``pad_shape_n``/``pad_shape_k``
    (logical = padded - pad), ``a_dtype``/``c_dtype`` and ``input_quant_mode``. Chord never
    pads (its kernels take N % 16 == 0 and K % BLOCK_K == 0 as they are), so the pads are 0.
    ``chord_mode`` records the packing mode (``indexed``/``contiguous``/``masked``) and
    ``chord_mode_source`` how it was chosen (``explicit``, ``env`` or ``auto``).
    """

    sm_version: int | None = None
    shape_n: int
    shape_k: int
    pad_shape_n: int = 0
    pad_shape_k: int = 0
    num_experts: int = 0
    b_dtype: dtypes.DataType
    a_dtype: dtypes.DataType
    c_dtype: dtypes.DataType
    bs_dtype: dtypes.DataType | None = None
    as_dtype: dtypes.DataType | None = None
    input_quant_mode: InputQuantizationMode | str | None = None
    input_scale_group_size: int = 0
    weight_scale_group_size: int = 0
    weight_scale_group_size_n: int = 0
    weight_scale_type: WeightScaleType | str | None = None
    weight_scale_2_type: WeightScale2Type | str | None = None
    has_zero_point: bool = False
    is_fp_zero_point: bool = False
    has_bias: bool = False
    chord_mode: str | None = None
    chord_mode_source: str = "explicit"
    chord_block_k: int = 0

    def __post_init__(self):
        for name in ("a_dtype", "b_dtype", "c_dtype", "bs_dtype", "as_dtype"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, dtypes.DataType):
                setattr(self, name, dtypes.DataType.from_any(value))
        if self.input_quant_mode is None:
            self.input_quant_mode = InputQuantizationMode.Disabled
        elif isinstance(self.input_quant_mode, str):
            self.input_quant_mode = InputQuantizationMode(self.input_quant_mode)
        if isinstance(self.weight_scale_type, str):
            self.weight_scale_type = WeightScaleType(self.weight_scale_type)
        if self.weight_scale_type is None:
            self.weight_scale_type = WeightScaleType.GROUP if self.weight_scale_group_size else WeightScaleType.CHANNEL
        if isinstance(self.weight_scale_2_type, str):
            self.weight_scale_2_type = WeightScale2Type(self.weight_scale_2_type)
        if self.weight_scale_2_type is None:
            self.weight_scale_2_type = WeightScale2Type.NONE
        self.problem_shape = (0, self.shape_n, self.shape_k)
        self.pad_shape = (0, self.pad_shape_n, self.pad_shape_k)

    def to_dict(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.value if hasattr(v, "value") else (str(v) if isinstance(v, dtypes.DataType) else v)
        return out

    def to_str(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def check_device(self, device) -> None:
        from ..device import check_supported_device

        check_supported_device(device)

    @property
    def param_dtype(self):
        return dtypes.torch_dtype_map[self.c_dtype]


@dataclasses.dataclass(kw_only=True, frozen=True)
class ComputeConfig:
    use_f16_accum: bool = False
    use_batch_invariant: bool = False
    use_m_major_input_scale: bool = False
    gemm_type: GemmType | None = None

    def __post_init__(self):
        if isinstance(self.gemm_type, str):
            object.__setattr__(self, "gemm_type", as_gemm_type(self.gemm_type))
        check_compute_flags(self.use_f16_accum, self.use_batch_invariant)


def as_gemm_type(value) -> GemmType:
    if isinstance(value, GemmType):
        return value
    try:
        return GemmType(str(value))
    except ValueError:
        raise not_supported(f"gemm_type {value!r}") from None


def check_compute_flags(use_f16_accum: bool, use_batch_invariant: bool) -> None:
    """vLLM passes VLLM_HUMMING_USE_F16_ACCUM and VLLM_BATCH_INVARIANT here; Chord has neither."""
    if use_f16_accum:
        raise not_supported("VLLM_HUMMING_USE_F16_ACCUM=1 (FP16 accumulation)",
                            "Chord accumulates in FP32; unset VLLM_HUMMING_USE_F16_ACCUM")
    if use_batch_invariant:
        raise not_supported("VLLM_BATCH_INVARIANT=1 (batch-invariant kernels)",
                            "Chord's split of work depends on the batch; unset VLLM_BATCH_INVARIANT")


def chord_mode_for(gemm_type) -> str:
    gt = as_gemm_type(gemm_type)
    if gt not in CHORD_MODE_BY_GEMM_TYPE:
        raise not_supported(f"gemm_type {gt.value!r} (dense / linear layers)",
                            "Kimi K2.x's non-expert layers are unquantized; only MoE gemm types run on Chord")
    return CHORD_MODE_BY_GEMM_TYPE[gt]
