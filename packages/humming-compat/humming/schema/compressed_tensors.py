"""compressed-tensors schemas. Chord computes ``pack-quantized`` int4 symmetric group-32 (Kimi K2.x).

The checkpoint tensors per expert: ``weight_packed`` int32 [N, K/8] (eight offset-binary
nibbles along K per word, low nibble first), ``weight_scale`` [N, K/32] in the model dtype
(BF16), ``weight_shape`` [2]. Every other format / strategy / option raises at construction
(that is, when vLLM parses the checkpoint's quantization config), naming it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .. import dtypes
from ..config.enum import WeightScaleType
from ..errors import not_supported
from .base import BaseInputSchema, BaseWeightSchema, add_expert_dim, unsupported_schema
from .humming import GROUP_SIZE, HummingWeightSchema

KNOWN_FORMATS = ("int-quantized", "float-quantized", "naive-quantized", "pack-quantized",
                 "nvfp4-pack-quantized", "mxfp4-pack-quantized")


@dataclasses.dataclass(kw_only=True)
class CompressedTensorsWeightSchema(BaseWeightSchema):
    quant_method: str = "compressed-tensors"
    format: str
    type: str
    num_bits: int
    strategy: str
    symmetric: bool = True
    block_structure: tuple[int, int] | None = None
    group_size: int | None = None
    actorder: str | None = None

    def __post_init__(self):
        if self.format not in KNOWN_FORMATS:
            raise ValueError(f"unknown compressed-tensors format {self.format!r}")
        checks = (
            (self.format == "pack-quantized", f"compressed-tensors format {self.format!r}"),
            (self.type == "int", f"compressed-tensors weight type {self.type!r}"),
            (self.num_bits == 4, f"compressed-tensors num_bits={self.num_bits}"),
            (self.strategy == "group", f"compressed-tensors strategy {self.strategy!r}"),
            (self.group_size == GROUP_SIZE, f"compressed-tensors group_size={self.group_size}"),
            (bool(self.symmetric), "asymmetric compressed-tensors weights (zero points)"),
            (self.actorder in (None, "static"), f"compressed-tensors actorder={self.actorder!r}"),
        )
        for ok, what in checks:
            if not ok:
                raise not_supported(what, "Chord reads pack-quantized int4 symmetric group-32 (Kimi K2.x)")
        self.weight_key = "weight_packed"

    def get_tensors_attrs(self, shape_n, shape_k, param_dtype, num_experts=None, has_bias=False,
                          stack_size=1) -> dict[str, dict[str, Any]]:
        if has_bias:
            raise not_supported("bias on quantized MoE/linear weights")
        _check_scale_dtype(param_dtype)
        attrs = {
            "weight_packed": {"shape": (shape_n, shape_k // 8), "dtype": torch.int32,
                              "extra_attrs": {"input_dim": 1, "output_dim": 0, "packed_dim": 1, "packed_factor": 8}},
            "weight_scale": {"shape": (shape_n, shape_k // GROUP_SIZE), "dtype": param_dtype,
                             "extra_attrs": {"input_dim": 1, "output_dim": 0, "scale_type": "group"}},
            "weight_shape": {"shape": (2,), "dtype": torch.int64, "extra_attrs": {}},
        }
        return add_expert_dim(attrs, num_experts)

    def to_humming_schema(self, param_dtype) -> HummingWeightSchema:
        _check_scale_dtype(param_dtype)
        return HummingWeightSchema(b_dtype=dtypes.uint4, bs_dtype=dtypes.bfloat16,
                                   weight_scale_group_size=GROUP_SIZE, weight_scale_type=WeightScaleType.GROUP)

    def convert_humming(self, tensors, shape_n_stacks, shape_k_stacks, param_dtype, num_experts=None,
                        device=None, convert_symmetric_integer: bool = True):
        """``weight_packed``/``weight_scale`` (all local experts) -> humming's ``weight``/``weight_scale``.

        The int32 words keep their compressed-tensors nibble order; the Chord packing happens in
        :func:`humming.transform.prepare_and_transform_humming_tensors`.
        """
        schema = self.to_humming_schema(param_dtype)
        extra = set(tensors) - {"weight_packed", "weight_scale", "weight_shape"}
        if extra:
            raise not_supported(f"compressed-tensors tensors {sorted(extra)} (zero points / bias / g_idx)")
        for name in ("weight_packed", "weight_scale"):
            if name not in tensors:
                raise ValueError(f"compressed-tensors conversion needs {name!r}; got {sorted(tensors)}")
        packed, scale = tensors["weight_packed"], tensors["weight_scale"]
        n, k = sum(shape_n_stacks), sum(shape_k_stacks)
        lead = (num_experts,) if num_experts else ()
        if tuple(packed.shape) != (*lead, n, k // 8) or tuple(scale.shape) != (*lead, n, k // GROUP_SIZE):
            raise ValueError(f"weight_packed {tuple(packed.shape)} / weight_scale {tuple(scale.shape)} do not "
                             f"match {lead + (n, k)} (N={shape_n_stacks}, K={shape_k_stacks})")
        return schema, {"weight": packed.view(torch.int32), "weight_scale": scale.to(torch.bfloat16)}


def _check_scale_dtype(param_dtype) -> None:
    if param_dtype is not None and param_dtype != torch.bfloat16:
        raise not_supported(f"model dtype {param_dtype} (the scales follow it)", "serve with --dtype bfloat16")


CompressedTensorsInputSchema = unsupported_schema(
    BaseInputSchema, "CompressedTensorsInputSchema",
    "compressed-tensors input_activations quantization (W4A8/W8A8 activations)")
