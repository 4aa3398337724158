"""ModelOpt schemas: importable for vLLM, rejected when used (Chord computes W4A16 only)."""

from .base import BaseInputSchema, BaseWeightSchema, unsupported_schema

ModeloptWeightSchema = unsupported_schema(BaseWeightSchema, "ModeloptWeightSchema", "ModelOpt weights (quant_method modelopt)")
ModeloptInputSchema = unsupported_schema(BaseInputSchema, "ModeloptInputSchema", "ModelOpt activations (quant_method modelopt)")
ModeloptMxfp8WeightSchema = unsupported_schema(BaseWeightSchema, "ModeloptMxfp8WeightSchema", "ModelOpt MXFP8 weights")
ModeloptNvfp4WeightSchema = unsupported_schema(BaseWeightSchema, "ModeloptNvfp4WeightSchema", "ModelOpt NVFP4 weights")
ModeloptNvfp4InputSchema = unsupported_schema(BaseInputSchema, "ModeloptNvfp4InputSchema", "ModelOpt NVFP4 activations")
