"""FP8 schemas: importable for vLLM, rejected when used (Chord computes W4A16 only)."""

from .base import BaseInputSchema, BaseWeightSchema, unsupported_schema

Fp8WeightSchema = unsupported_schema(BaseWeightSchema, "Fp8WeightSchema", "FP8 weights (quant_method fp8)")
Fp8InputSchema = unsupported_schema(BaseInputSchema, "Fp8InputSchema", "FP8 activations (quant_method fp8)")
