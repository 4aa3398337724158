"""``humming.config``: GemmType, LayerConfig and the enums vLLM compares against."""

from .config import ComputeConfig, LayerConfig
from .enum import (
    ActivationType,
    GemmType,
    InputQuantizationMode,
    MmaType,
    ProcessInputLayoutType,
    WeightScale2Type,
    WeightScaleType,
)

__all__ = [
    "ActivationType",
    "ComputeConfig",
    "GemmType",
    "InputQuantizationMode",
    "LayerConfig",
    "MmaType",
    "ProcessInputLayoutType",
    "WeightScale2Type",
    "WeightScaleType",
]
