"""Schema base classes: ``from_config`` dispatch on ``quant_method`` and tensor-attribute helpers."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..errors import not_supported


def add_expert_dim(attrs: dict[str, dict[str, Any]], num_experts: int | None) -> dict[str, dict[str, Any]]:
    """Prefix every tensor with the expert dimension (vLLM's FusedMoE parameters are [E, ...])."""
    if not num_experts:
        return attrs
    for attr in attrs.values():
        attr["shape"] = (num_experts,) + tuple(attr["shape"])
        extra = attr.setdefault("extra_attrs", {})
        for key in list(extra):
            if key.endswith("_dim"):
                extra[key] += 1
    return attrs


def _kwargs_from(cls, config: dict[str, Any]) -> dict[str, Any]:
    kwargs = {}
    for field in dataclasses.fields(cls):
        if field.name in config:
            kwargs[field.name] = config[field.name]
        else:
            for alias in cls.KWARGS_ALIAS.get(field.name, ()):
                if alias in config:
                    kwargs[field.name] = config[alias]
                    break
    return kwargs


def _from_config(cls, base, registry: dict, kind: str, config: dict[str, Any]):
    """The base class dispatches on ``quant_method`` to its registered subclass; a subclass
    builds itself from the config's keys (and their aliases)."""
    if cls is base:
        method = config["quant_method"]
        if method not in registry:
            raise ValueError(f"unsupported {kind} quant_method: {method}")
        return registry[method].from_config(config)
    return cls(**_kwargs_from(cls, config))


@dataclasses.dataclass(kw_only=True)
class BaseWeightSchema:
    quant_method: str

    WEIGHT_SCHEMA_MAP: ClassVar[dict[str, type[BaseWeightSchema]]] = {}
    KWARGS_ALIAS: ClassVar[dict[str, list[str]]] = {}

    may_add_expert_dim = staticmethod(add_expert_dim)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BaseWeightSchema:
        return _from_config(cls, BaseWeightSchema, cls.WEIGHT_SCHEMA_MAP, "weight", config)

    def get_tensors_attrs(self, shape_n: int, shape_k: int, param_dtype, num_experts: int | None = None,
                          has_bias: bool = False, stack_size: int = 1) -> dict[str, dict[str, Any]]:
        raise not_supported(f"weight quant_method {self.quant_method!r}")

    def get_padded_tensors_attrs(self, shape_n: int, shape_k: int, param_dtype, num_experts: int | None = None,
                                 has_bias: bool = False, pad_n_to_multiple: int = 1, pad_k_to_multiple: int = 1,
                                 stack_size: int = 1) -> dict[str, dict[str, Any]]:
        # Chord's kernels take N and K as they are (N % 16, K % BLOCK_K), so nothing is padded.
        return self.get_tensors_attrs(shape_n=shape_n, shape_k=shape_k, param_dtype=param_dtype,
                                      num_experts=num_experts, has_bias=has_bias, stack_size=stack_size)

    def process_loaded_weight(self, tensor, name: str):
        return tensor

    def to_humming_schema(self, param_dtype):
        raise not_supported(f"weight quant_method {self.quant_method!r}")

    def convert_humming(self, tensors, shape_n_stacks, shape_k_stacks, param_dtype, num_experts=None,
                        device=None, convert_symmetric_integer: bool = True):
        raise not_supported(f"weight quant_method {self.quant_method!r}")


@dataclasses.dataclass(kw_only=True)
class BaseInputSchema:
    quant_method: str

    INPUT_SCHEMA_MAP: ClassVar[dict[str, type[BaseInputSchema]]] = {}
    KWARGS_ALIAS: ClassVar[dict[str, list[str]]] = {}

    may_add_expert_dim = staticmethod(add_expert_dim)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BaseInputSchema:
        return _from_config(cls, BaseInputSchema, cls.INPUT_SCHEMA_MAP, "input", config)

    def get_tensors_attrs(self, shape_k: int, param_dtype, num_experts: int | None = None,
                          stack_size: int = 1) -> dict[str, dict[str, Any]]:
        return {}

    def to_humming_schema(self, param_dtype):
        raise not_supported(f"input quant_method {self.quant_method!r}")

    def convert_humming(self, tensors, shape_n_stacks, shape_k_stacks, param_dtype, num_experts=None, device=None):
        raise not_supported(f"input quant_method {self.quant_method!r}")


def unsupported_schema(base: type, class_name: str, what: str) -> type:
    """A schema class that vLLM can import and name, and that raises (naming ``what``) when used."""

    def __init__(self, *args, **kwargs):
        raise not_supported(what)

    @classmethod
    def from_config(cls, config):
        raise not_supported(what)

    return type(class_name, (base,), {"__init__": __init__, "from_config": from_config,
                                      "__doc__": f"Not supported by Chord: {what}."})
