"""Humming's enums, with the values vLLM compares against."""

from __future__ import annotations

import enum


class InputQuantizationMode(str, enum.Enum):  # noqa: UP042 (humming compares str members)
    Disabled = "none"
    StaticTensor = "static_tensor"
    DynamicToken = "dynamic_token"
    DynamicGroup = "dynamic_group"
    StaticTensorDynamicGroup = "static_tensor_dynamic_group"
    DynamicGroupToken = "dynamic_group_token"

    @property
    def should_quantize(self) -> bool:
        return self is not InputQuantizationMode.Disabled

    @property
    def has_tensor_scale(self) -> bool:
        return self in (InputQuantizationMode.StaticTensor, InputQuantizationMode.StaticTensorDynamicGroup)

    @property
    def has_token_scale(self) -> bool:
        return self in (InputQuantizationMode.DynamicToken, InputQuantizationMode.DynamicGroupToken)

    @property
    def has_group_scale(self) -> bool:
        return self in (InputQuantizationMode.DynamicGroup, InputQuantizationMode.StaticTensorDynamicGroup,
                        InputQuantizationMode.DynamicGroupToken)

    @property
    def has_dynamic_scale(self) -> bool:
        return self.has_token_scale or self.has_group_scale

    @property
    def has_secondary_scale(self) -> bool:
        return self.has_group_scale and (self.has_tensor_scale or self.has_token_scale)


class MmaType(enum.Enum):
    MMA = "mma"
    WGMMA = "wgmma"
    UMMA = "umma"
    MXMMA = "mxmma"


class WeightScaleType(enum.Enum):
    GROUP = "group"
    BLOCK = "block"
    CHANNEL = "channel"
    TENSOR = "tensor"


class WeightScale2Type(enum.Enum):
    NONE = "none"
    CHANNEL = "channel"
    TENSOR = "tensor"


class GemmType(enum.Enum):
    DENSE = "dense"
    INDEXED = "indexed"
    GROUPED_CONTIGUOUS = "grouped_contiguous"
    GROUPED_MASKED = "grouped_masked"


class ActivationType(str, enum.Enum):  # noqa: UP042 (humming compares str members)
    None_ = "none"
    Unary = "unary"
    BinarySplit = "binary_split"
    BinaryInterleaved = "binary_interleaved"


class ProcessInputLayoutType(str, enum.Enum):  # noqa: UP042 (humming compares str members)
    Normal = "normal"
    GroupedMask = "grouped_mask"
    Scatter = "scatter"


# Which Chord packing mode serves which MoE gemm type.
CHORD_MODE_BY_GEMM_TYPE = {
    GemmType.INDEXED: "indexed",
    GemmType.GROUPED_CONTIGUOUS: "contiguous",
    GemmType.GROUPED_MASKED: "masked",
}
