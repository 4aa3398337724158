"""``humming.schema``: checkpoint schemes -> humming's canonical schema (Chord: Kimi K2.x W4A16).

``BaseWeightSchema.from_config(cfg)`` dispatches on ``cfg["quant_method"]``. Supported:
``compressed-tensors`` (pack-quantized int4 symmetric group 32) and ``humming`` (uint4,
group-32 BF16 scales; with ``format "chord-packed"`` a pre-packed ``chord-pack convert`` output,
:class:`ChordPackedWeightSchema`). The other names exist so vLLM's imports and lookups succeed; using one
raises :class:`humming.errors.NotSupportedError` naming the scheme.
"""

from .base import BaseInputSchema, BaseWeightSchema
from .chord import ChordPackedWeightSchema
from .compressed_tensors import CompressedTensorsInputSchema, CompressedTensorsWeightSchema
from .fp8 import Fp8InputSchema, Fp8WeightSchema
from .humming import HummingInputSchema, HummingWeightSchema, is_humming_schema_compatible
from .modelopt import ModeloptInputSchema, ModeloptWeightSchema
from .others import (
    AutoRoundWeightSchema,
    AWQWeightSchema,
    BitnetWeightSchema,
    GptOssMxfp4WeightSchema,
    GPTQWeightSchema,
    Mxfp4WeightSchema,
    QuarkInputSchema,
    QuarkWeightSchema,
)

WEIGHT_SCHEMA_MAP = {
    "auto-round": AutoRoundWeightSchema,
    "auto_round": AutoRoundWeightSchema,
    "awq": AWQWeightSchema,
    "bitnet": BitnetWeightSchema,
    "compressed-tensors": CompressedTensorsWeightSchema,
    "fp8": Fp8WeightSchema,
    "gptq": GPTQWeightSchema,
    "humming": HummingWeightSchema,
    "modelopt": ModeloptWeightSchema,
    "mxfp4": Mxfp4WeightSchema,
    "gpt_oss_mxfp4": GptOssMxfp4WeightSchema,
    "quark": QuarkWeightSchema,
}
INPUT_SCHEMA_MAP = {
    "compressed-tensors": CompressedTensorsInputSchema,
    "fp8": Fp8InputSchema,
    "humming": HummingInputSchema,
    "modelopt": ModeloptInputSchema,
    "quark": QuarkInputSchema,
}
BaseWeightSchema.WEIGHT_SCHEMA_MAP = WEIGHT_SCHEMA_MAP
BaseInputSchema.INPUT_SCHEMA_MAP = INPUT_SCHEMA_MAP

__all__ = [
    "AWQWeightSchema", "AutoRoundWeightSchema", "BaseInputSchema", "BaseWeightSchema", "BitnetWeightSchema",
    "ChordPackedWeightSchema",
    "CompressedTensorsInputSchema", "CompressedTensorsWeightSchema", "Fp8InputSchema", "Fp8WeightSchema",
    "GPTQWeightSchema", "GptOssMxfp4WeightSchema", "HummingInputSchema", "HummingWeightSchema",
    "INPUT_SCHEMA_MAP", "Mxfp4WeightSchema", "QuarkInputSchema", "QuarkWeightSchema", "WEIGHT_SCHEMA_MAP",
    "is_humming_schema_compatible",
]
