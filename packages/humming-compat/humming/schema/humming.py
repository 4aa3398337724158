"""Humming's own schemas: the canonical description vLLM converts every checkpoint scheme to.

Chord computes exactly one: uint4 (offset binary, symmetric, no zero point) weights with one
BF16 scale per 32 input channels, and BF16 activations that are not quantized. Schemas for
anything else can be constructed (vLLM's backend probing builds some) but are rejected, with
the option named, as soon as a layer is converted, transformed or tuned with them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from .. import dtypes
from ..config.enum import InputQuantizationMode, WeightScale2Type, WeightScaleType
from ..errors import not_supported
from .base import BaseInputSchema, BaseWeightSchema, add_expert_dim

GROUP_SIZE = 32


def _as_dtype(value):
    return None if value is None else dtypes.DataType.from_any(value)


@dataclasses.dataclass(kw_only=True)
class HummingWeightSchema(BaseWeightSchema):
    quant_method: str = "humming"
    b_dtype: dtypes.DataType
    bs_dtype: dtypes.DataType | None = None
    weight_scale_group_size: int = 0
    weight_scale_group_size_n: int = 0
    weight_scale_type: WeightScaleType | str | None = None
    weight_scale_2_type: WeightScale2Type | str | None = None
    has_zero_point: bool = False
    is_fp_zero_point: bool = False
    hadamard_block_size: int = 0

    KWARGS_ALIAS: ClassVar[dict[str, list[str]]] = {
        "b_dtype": ["weight_dtype", "dtype"],
        "weight_scale_group_size": ["group_size"],
        "weight_scale_group_size_n": ["group_size_n"],
        "weight_scale_type": ["scale_type"],
        "weight_scale_2_type": ["scale_2_type"],
        "bs_dtype": ["weight_scale_dtype", "scale_dtype"],
    }

    def __post_init__(self):
        self.b_dtype = _as_dtype(self.b_dtype)
        if isinstance(self.b_dtype, dtypes.IntegerType) and self.b_dtype.is_signed:
            # symmetric signed int4 is stored offset binary: same codes as uint4
            self.b_dtype = dtypes.DataType.from_str("u" + str(self.b_dtype))
        self.bs_dtype = _as_dtype(self.bs_dtype)
        if isinstance(self.weight_scale_type, str):
            self.weight_scale_type = WeightScaleType(self.weight_scale_type)
        if self.weight_scale_type is None:
            if self.weight_scale_group_size_n > 1:
                self.weight_scale_type = WeightScaleType.BLOCK
            elif self.weight_scale_group_size > 0:
                self.weight_scale_type = WeightScaleType.GROUP
            else:
                self.weight_scale_type = WeightScaleType.CHANNEL
        if isinstance(self.weight_scale_2_type, str):
            self.weight_scale_2_type = WeightScale2Type(self.weight_scale_2_type)
        if self.weight_scale_2_type is None:
            self.weight_scale_2_type = WeightScale2Type.NONE

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> HummingWeightSchema:
        """``quant_method "humming"``; with ``format "chord-packed"`` (a ``chord-pack convert``
        output) the weights are already in Chord's layout: :class:`ChordPackedWeightSchema`."""
        if cls is HummingWeightSchema:
            from .chord import ChordPackedWeightSchema, is_chord_packed_config

            if is_chord_packed_config(config):
                return ChordPackedWeightSchema.from_config(config)
        return super().from_config(config)

    def unsupported_reason(self, param_dtype: torch.dtype | None = None) -> str | None:
        """The first option Chord does not implement, named, or None."""
        if self.b_dtype != dtypes.uint4:
            return f"weight dtype {self.b_dtype}"
        if self.weight_scale_type != WeightScaleType.GROUP or self.weight_scale_group_size != GROUP_SIZE:
            return (f"weight scales {self.weight_scale_type.value} with group size "
                    f"{self.weight_scale_group_size} (Chord needs group size {GROUP_SIZE})")
        if self.weight_scale_group_size_n > 1:
            return f"block weight scales (group_size_n={self.weight_scale_group_size_n})"
        if self.weight_scale_2_type != WeightScale2Type.NONE:
            return f"secondary weight scales ({self.weight_scale_2_type.value})"
        if self.has_zero_point:
            return "weight zero points (asymmetric quantization)"
        if self.hadamard_block_size not in (0, 1, -1, None):
            return f"Hadamard transform (hadamard_block_size={self.hadamard_block_size})"
        bs = self.bs_dtype if self.bs_dtype is not None else (
            dtypes.DataType.from_any(param_dtype) if param_dtype is not None else dtypes.bfloat16)
        if bs != dtypes.bfloat16:
            return f"weight scale dtype {bs} (Chord needs bfloat16 scales)"
        return None

    def check_supported(self, param_dtype: torch.dtype | None = None) -> None:
        reason = self.unsupported_reason(param_dtype)
        if reason is not None:
            raise not_supported(reason)

    def get_tensors_attrs(self, shape_n, shape_k, param_dtype, num_experts=None, has_bias=False,
                          stack_size=1) -> dict[str, dict[str, Any]]:
        """The unpacked humming layout: ``weight`` int32 [N, K/8] (8 codes along K per word) and
        ``weight_scale`` [N, K/32] (a pre-packed Chord checkpoint: :mod:`humming.schema.chord`)."""
        self.check_supported(param_dtype)
        if has_bias:
            raise not_supported("bias on quantized MoE/linear weights")
        attrs = {
            "weight": {"shape": (shape_n, shape_k // 8), "dtype": torch.int32,
                       "extra_attrs": {"input_dim": 1, "output_dim": 0, "packed_dim": 1, "packed_factor": 8}},
            "weight_scale": {"shape": (shape_n, shape_k // GROUP_SIZE), "dtype": torch.bfloat16,
                             "extra_attrs": {"input_dim": 1, "output_dim": 0, "scale_type": "group"}},
        }
        return add_expert_dim(attrs, num_experts)

    def to_humming_schema(self, param_dtype) -> HummingWeightSchema:
        return dataclasses.replace(self)

    def convert_humming(self, tensors, shape_n_stacks, shape_k_stacks, param_dtype, num_experts=None,
                        device=None, convert_symmetric_integer: bool = True):
        self.check_supported(param_dtype)
        unknown = set(tensors) - {"weight", "weight_scale"}
        if unknown:
            raise not_supported(f"extra weight tensors {sorted(unknown)}")
        out = {"weight": tensors["weight"].view(torch.int32), "weight_scale": tensors["weight_scale"]}
        return dataclasses.replace(self, bs_dtype=dtypes.bfloat16), out

    @classmethod
    def quant_tensor(cls, tensor, schema, param_dtype):
        raise not_supported("online quantization of unquantized weights (VLLM_HUMMING_ONLINE_QUANT_CONFIG)",
                            "serve an INT4 compressed-tensors checkpoint")

    def requant_tensors(self, tensors, target_weight_schema, param_dtype):
        raise not_supported("re-quantization (force_requant)")

    def is_compatible_with(self, input_schema, param_dtype=None) -> bool:
        return is_humming_schema_compatible(input_schema, self, param_dtype)


@dataclasses.dataclass(kw_only=True)
class HummingInputSchema(BaseInputSchema):
    quant_method: str = "humming"
    a_dtype: dtypes.DataType | None = None
    input_scale_group_size: int = 0
    input_scale_dtype: dtypes.DataType | None = None
    input_quant_mode: InputQuantizationMode | str | None = None

    KWARGS_ALIAS: ClassVar[dict[str, list[str]]] = {
        "a_dtype": ["input_dtype", "dtype"],
        "input_scale_group_size": ["group_size"],
        "input_scale_dtype": ["scale_dtype"],
        "input_quant_mode": ["quant_mode", "quantization_mode"],
    }

    def __post_init__(self):
        self.a_dtype = _as_dtype(self.a_dtype)
        self.input_scale_dtype = _as_dtype(self.input_scale_dtype)
        if isinstance(self.input_quant_mode, str):
            self.input_quant_mode = InputQuantizationMode(self.input_quant_mode)

    def get_activation_bits(self) -> int:
        return 16 if self.a_dtype is None else self.a_dtype.num_bits

    @property
    def static_tensor_scale_name(self) -> str | None:
        if self.input_quant_mode == InputQuantizationMode.StaticTensor:
            return "input_scale"
        if self.input_quant_mode == InputQuantizationMode.StaticTensorDynamicGroup:
            return "input_scale_2"
        return None

    def unsupported_reason(self, param_dtype: torch.dtype | None = None) -> str | None:
        mode = self.input_quant_mode or InputQuantizationMode.Disabled
        if mode != InputQuantizationMode.Disabled:
            return f"input quantization ({mode.value}, VLLM_HUMMING_INPUT_QUANT_CONFIG)"
        a = self.a_dtype if self.a_dtype is not None else (
            dtypes.DataType.from_any(param_dtype) if param_dtype is not None else dtypes.bfloat16)
        if a != dtypes.bfloat16:
            return f"activation dtype {a} (Chord needs bfloat16 activations)"
        return None

    def check_supported(self, param_dtype: torch.dtype | None = None) -> None:
        reason = self.unsupported_reason(param_dtype)
        if reason is not None:
            raise not_supported(reason)

    def get_tensors_attrs(self, shape_k, param_dtype, num_experts=None, stack_size=1):
        return {}

    def to_humming_schema(self, param_dtype) -> HummingInputSchema:
        return dataclasses.replace(self)

    def convert_humming(self, tensors, shape_n_stacks, shape_k_stacks, param_dtype, num_experts=None, device=None):
        self.check_supported(param_dtype)
        return dataclasses.replace(self), {}

    def is_compatible_with(self, weight_schema, param_dtype=None) -> bool:
        return is_humming_schema_compatible(self, weight_schema, param_dtype)


def is_humming_schema_compatible(input_schema, weight_schema, param_dtype=None) -> bool:
    """True only for the pair Chord computes; vLLM then falls back or names the failure."""
    return (isinstance(input_schema, HummingInputSchema) and isinstance(weight_schema, HummingWeightSchema)
            and input_schema.unsupported_reason(param_dtype) is None
            and weight_schema.unsupported_reason(param_dtype) is None)
