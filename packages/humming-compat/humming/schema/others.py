"""Schemes vLLM can name but Chord does not compute: importable, rejected when used."""

from .base import BaseInputSchema, BaseWeightSchema, unsupported_schema

AWQWeightSchema = unsupported_schema(BaseWeightSchema, "AWQWeightSchema", "AWQ weights (quant_method awq)")
GPTQWeightSchema = unsupported_schema(BaseWeightSchema, "GPTQWeightSchema", "GPTQ weights (quant_method gptq)")
AutoRoundWeightSchema = unsupported_schema(BaseWeightSchema, "AutoRoundWeightSchema", "AutoRound weights (quant_method auto-round)")
BitnetWeightSchema = unsupported_schema(BaseWeightSchema, "BitnetWeightSchema", "BitNet weights (quant_method bitnet)")
Mxfp4WeightSchema = unsupported_schema(BaseWeightSchema, "Mxfp4WeightSchema", "MXFP4 weights (quant_method mxfp4)")
GptOssMxfp4WeightSchema = unsupported_schema(BaseWeightSchema, "GptOssMxfp4WeightSchema", "gpt-oss MXFP4 weights (quant_method gpt_oss_mxfp4)")
QuarkWeightSchema = unsupported_schema(BaseWeightSchema, "QuarkWeightSchema", "Quark weights (quant_method quark)")
QuarkInputSchema = unsupported_schema(BaseInputSchema, "QuarkInputSchema", "Quark activations (quant_method quark)")
