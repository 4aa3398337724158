"""The older surface (vLLM before the functional API): ``HummingLayerMeta`` and ``HummingMethod``.

A thin wrapper over the functional API: the meta is a :class:`LayerConfig` that knows its
sublayer's parameter names, and the method's static helpers transform and run a layer through
:mod:`humming.transform` and :mod:`humming.forward`.
"""

from __future__ import annotations

import dataclasses

import torch

from .config import LayerConfig
from .forward import humming_forward, may_process_input
from .transform import prepare_and_transform_humming_tensors


@dataclasses.dataclass(kw_only=True, unsafe_hash=True)
class HummingLayerMeta(LayerConfig):
    sublayer_name: str = ""

    @classmethod
    def from_layer_config(cls, config: LayerConfig, sublayer_name: str = "") -> HummingLayerMeta:
        fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(LayerConfig)}
        return cls(**fields, sublayer_name=sublayer_name)

    @property
    def name_prefix(self) -> str:
        return f"{self.sublayer_name}_" if self.sublayer_name else ""

    @property
    def weight_name(self) -> str:
        return self.name_prefix + "weight"

    @property
    def weight_scale_name(self) -> str:
        return self.name_prefix + "weight_scale"


class HummingLayerMethod:
    @staticmethod
    def transform_humming_layer(layer: torch.nn.Module, sublayer_name: str, weight_schema, shape_n: int,
                                shape_k: int, num_experts: int, input_schema=None, gemm_type=None) -> HummingLayerMeta:
        prefix = f"{sublayer_name}_" if sublayer_name else ""
        tensors = {name[len(prefix):]: p.data for name, p in list(layer.named_parameters(recurse=False))
                   if name.startswith(prefix)}
        config, out = prepare_and_transform_humming_tensors(
            tensors, shape_n, shape_k, weight_schema, input_schema, num_experts=num_experts, gemm_type=gemm_type)
        for name in list(dict(layer.named_parameters(recurse=False))):
            if name.startswith(prefix):
                delattr(layer, name)
        for name, t in out.items():
            layer.register_parameter(prefix + name, torch.nn.Parameter(t, requires_grad=False))
        meta = HummingLayerMeta.from_layer_config(config, sublayer_name)
        metas = getattr(layer, "humming_metas", {})
        metas[sublayer_name] = meta
        layer.humming_metas = metas
        return meta

    @staticmethod
    def forward_layer(layer: torch.nn.Module, meta: HummingLayerMeta, inputs: torch.Tensor, **kwargs) -> torch.Tensor:
        return humming_forward(meta, inputs, getattr(layer, meta.weight_name),
                               weight_scale=getattr(layer, meta.weight_scale_name), **kwargs)

    may_process_input = staticmethod(may_process_input)


class HummingMethod(HummingLayerMethod):
    pass


__all__ = ["HummingLayerMeta", "HummingLayerMethod", "HummingMethod"]
