"""Humming's data-type names, as vLLM uses them.

vLLM builds dicts keyed by these constants at import time and compares them by their string
form (``"uint4"``, ``"bfloat16"``, ``"float8e4m3"``), so every value is hashable and equal to
any object with the same ``str``. Naming a dtype is free; only uint4 weights with BF16
activations and scales are computed (see :mod:`humming.errors`).
"""

from __future__ import annotations

import dataclasses
import re

import torch


@dataclasses.dataclass(kw_only=True, eq=False, repr=False)
class DataType:
    num_bits: int
    is_signed: bool = True
    exponent_bits: int = 0
    mantissa_bits: int = 0

    is_integer_type = False
    is_floating_point_type = False

    @property
    def dtype_str(self) -> str:
        return self.to_str()

    @classmethod
    def from_str(cls, s: str | DataType) -> DataType:
        if isinstance(s, DataType):
            return s
        text = str(s).strip().lower()
        if "float" in text or text == "half":
            return FloatingPointType.from_str(text)
        if "int" in text:
            return IntegerType.from_str(text)
        raise ValueError(f"unknown humming dtype {s!r}")

    @classmethod
    def from_torch_dtype(cls, torch_dtype: torch.dtype) -> DataType:
        name = str(torch_dtype).removeprefix("torch.")
        if "float" in name:
            return FloatingPointType.from_str(name.replace("fnuz", "").replace("fnu", "").replace("fn", ""))
        if "int" in name:
            return IntegerType.from_str(name)
        raise ValueError(f"no humming dtype for {torch_dtype}")

    @classmethod
    def from_any(cls, dtype) -> DataType:
        if isinstance(dtype, DataType):
            return dtype
        if isinstance(dtype, str):
            return cls.from_str(dtype)
        if isinstance(dtype, torch.dtype):
            return cls.from_torch_dtype(dtype)
        raise ValueError(f"unsupported dtype: {dtype!r}")

    def to_str(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.to_str()

    __repr__ = __str__

    def __hash__(self) -> int:
        return hash(str(self))

    def __eq__(self, other) -> bool:
        return str(self) == str(other)


@dataclasses.dataclass(kw_only=True, eq=False, repr=False)
class IntegerType(DataType):
    is_integer_type = True

    @classmethod
    def from_str(cls, s: str) -> IntegerType:
        found = re.fullmatch(r"(u?)int(\d+)", str(s).strip().lower())
        if not found:
            raise ValueError(f"invalid integer dtype {s!r}")
        return cls(is_signed=found.group(1) == "", num_bits=int(found.group(2)))

    def to_str(self) -> str:
        return f"{'' if self.is_signed else 'u'}int{self.num_bits}"


_NAMED_FLOATS = {"float16": (16, 5, 10), "half": (16, 5, 10), "bfloat16": (16, 8, 7), "float32": (32, 8, 23)}


@dataclasses.dataclass(kw_only=True, eq=False, repr=False)
class FloatingPointType(DataType):
    is_floating_point_type = True

    def __post_init__(self):
        sign_bits = self.num_bits - self.exponent_bits - self.mantissa_bits
        if sign_bits not in (0, 1):
            raise ValueError(f"float{self.num_bits}e{self.exponent_bits}m{self.mantissa_bits} has {sign_bits} sign bits")
        self.is_signed = sign_bits == 1

    @classmethod
    def from_str(cls, s: str) -> FloatingPointType:
        text = str(s).strip().lower()
        if text in _NAMED_FLOATS:
            bits, e, m = _NAMED_FLOATS[text]
            return cls(num_bits=bits, exponent_bits=e, mantissa_bits=m)
        found = re.fullmatch(r"float(\d+)_?e(\d+)m(\d+)", text)
        if not found:
            raise ValueError(f"invalid floating point dtype {s!r}")
        bits, e, m = (int(g) for g in found.groups())
        return cls(num_bits=bits, exponent_bits=e, mantissa_bits=m)

    def to_str(self) -> str:
        for name, spec in _NAMED_FLOATS.items():
            if name != "half" and spec == (self.num_bits, self.exponent_bits, self.mantissa_bits):
                return name
        return f"float{self.num_bits}e{self.exponent_bits}m{self.mantissa_bits}"


def _int(name: str) -> IntegerType:
    return IntegerType.from_str(name)


def _float(name: str) -> FloatingPointType:
    return FloatingPointType.from_str(name)


uint1, uint2, uint3, uint4, uint5, uint6, uint7, uint8 = (_int(f"uint{b}") for b in range(1, 9))
int2, int3, int4, int6, int8, int32 = (_int(f"int{b}") for b in (2, 3, 4, 6, 8, 32))

float2e0m1 = _float("float2e0m1")
float3e0m2 = _float("float3e0m2")
float4e0m3 = _float("float4e0m3")
float5e0m4 = _float("float5e0m4")
float6e0m5 = _float("float6e0m5")
float7e0m6 = _float("float7e0m6")
float8e0m7 = _float("float8e0m7")
float4e2m1 = _float("float4e2m1")
float6e2m3 = _float("float6e2m3")
float6e3m2 = _float("float6e3m2")
float8e3m4 = _float("float8e3m4")
float8e4m3 = _float("float8e4m3")
float8e5m2 = _float("float8e5m2")
float8e5m3 = _float("float8e5m3")
float8e8m0 = _float("float8e8m0")
float16 = _float("float16")
bfloat16 = _float("bfloat16")
float32 = _float("float32")

torch_dtype_map = {
    int8: torch.int8,
    float8e8m0: torch.float8_e8m0fnu,
    float8e4m3: torch.float8_e4m3fn,
    float8e5m2: torch.float8_e5m2,
    float16: torch.float16,
    bfloat16: torch.bfloat16,
    float32: torch.float32,
}

# What Chord computes (Kimi K2.x W4A16).
SUPPORTED_WEIGHT_DTYPES = (uint4,)
SUPPORTED_ACTIVATION_DTYPES = (bfloat16,)
