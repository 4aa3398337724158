"""Which tensors are routed-expert INT4 triples and which pass through; every check on them.

All checks here read headers plus the 2-element ``weight_shape`` tensors only (and, with
``check_scales``, the expert scales). With an expert range (an EP rank), only the shards
holding that rank's experts and the pass-through tensors are opened (:func:`needed_shards`);
the other experts are checked from the index (names, layers, expert numbers, completeness).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from .checkpoint import Checkpoint, Reader, TensorInfo
from .config import ModelConfig
from .errors import ChordPackError

PROJS = ("gate_proj", "up_proj", "down_proj")
PARAMS = ("weight_packed", "weight_scale", "weight_shape")
EXPERT_RE = re.compile(
    r"^(?P<prefix>(?:.*\.)?)layers\.(?P<layer>\d+)\.mlp\.experts\.(?P<expert>\d+)\."
    r"(?P<proj>gate_proj|up_proj|down_proj)\.(?P<param>\w+)$")
# Linear modules of the DeepSeek-V3/Kimi text model that the ignore list must keep in BF16.
LINEAR_RE = re.compile(
    r"(?:^|\.)(?:self_attn\.(?:q_proj|q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj)"
    r"|mlp\.(?:shared_experts\.)?(?:gate|up|down)_proj|lm_head)$")
QUANT_PARAMS = ("weight_packed", "weight_scale", "weight_shape")
MAX_LISTED = 5


@dataclass(frozen=True)
class ExpertProj:
    """One routed-expert projection: its three source tensors and logical [N, K]."""

    prefix: str
    layer: int
    expert: int
    proj: str
    packed: TensorInfo
    scale: TensorInfo
    shape: TensorInfo
    n: int
    k: int

    @property
    def module(self) -> str:
        return f"{self.prefix}layers.{self.layer}.mlp.experts.{self.expert}.{self.proj}"

    def tensors(self) -> tuple[TensorInfo, TensorInfo, TensorInfo]:
        return self.packed, self.scale, self.shape


@dataclass
class Scan:
    experts: list[ExpertProj]  # sorted by (layer, expert, proj)
    passthrough: list[TensorInfo]  # every other tensor, copied byte-for-byte
    prefix: str  # text-model prefix of the expert names ("model." or "language_model.model.")
    extra_layer_tensors: int = 0  # expert tensors of layers >= num_hidden_layers, passed through


Experts = tuple[int, int] | None  # routed experts [lo, hi) kept by an EP rank; None: all


def is_dropped(name: str, cfg: ModelConfig, experts: Experts) -> bool:
    """A routed-expert tensor of another EP rank: neither written nor read by this slice."""
    if experts is None:
        return False
    m = EXPERT_RE.match(name)
    return (m is not None and int(m["layer"]) < cfg.num_layers
            and not experts[0] <= int(m["expert"]) < experts[1])


def needed_shards(weight_map: dict[str, str], cfg: ModelConfig, experts: Experts) -> set[str]:
    """The shards a slice reads: those holding a tensor it keeps (its experts or a pass-through)."""
    return {shard for name, shard in weight_map.items() if not is_dropped(name, cfg, experts)}


def expected_dims(cfg: ModelConfig, proj: str) -> tuple[int, int]:
    if proj == "down_proj":
        return cfg.hidden, cfg.moe_intermediate
    return cfg.moe_intermediate, cfg.hidden


def check_finite_scale(info: TensorInfo, scale: torch.Tensor, row0: int = 0, group0: int = 0) -> None:
    """``scale``: bf16 [rows, groups]. Refuse inf/nan scales (zero and subnormal scales are legal: all-zero groups get eps)."""
    exponent = scale.view(torch.int16) & 0x7F80  # bf16: all-ones exponent is inf or nan
    bad = exponent == 0x7F80
    if bool(bad.any()):
        r, g = (int(i) for i in bad.nonzero()[0])
        raise ChordPackError(f"{info.where()}: non-finite scale {float(scale[r, g])} "
                             f"at row {r + row0}, group {g + group0}")


def scan_checkpoint(ckpt: Checkpoint, cfg: ModelConfig, *, check_scales: bool = False,
                    experts: Experts = None) -> Scan:
    """Classify and check every tensor; ``check_scales`` also reads every expert scale (1/9 of
    the expert bytes) to refuse non-finite values before anything is written.

    ``experts = (lo, hi)`` (an EP rank) returns and fully checks only experts [lo, hi); every
    other routed expert is checked by name from the index only (it may sit in an unopened shard).
    Every tensor that is kept must be in an opened shard.
    """
    for shard in ckpt.shards.values():
        marks = {k: v for k, v in shard.metadata.items() if k.startswith("chord.")}
        if marks:
            raise ChordPackError(f"shard {shard.name}: metadata says it was written by chord-pack "
                                 f"({marks}): already Chord-packed; convert the original checkpoint")
    triples: dict[tuple[str, int, int, str], dict[str, str]] = {}  # -> {param: tensor name}
    passthrough: list[TensorInfo] = []
    extra = 0
    for name in sorted(ckpt.weight_map):
        m = EXPERT_RE.match(name)
        module, _, param = name.rpartition(".")
        _check_param_kind(cfg, ckpt.where(name), module, param, routed=m is not None)
        if m is None or int(m["layer"]) >= cfg.num_layers:  # beyond num_hidden_layers (e.g. MTP): not ours
            passthrough.append(_opened(ckpt, name))
            extra += m is not None
            continue
        key = (m["prefix"], int(m["layer"]), int(m["expert"]), m["proj"])
        triples.setdefault(key, {})[param] = name
    prefix = _single_prefix(ckpt, cfg, triples)
    _check_expert_set(ckpt, cfg, triples, prefix)
    kept = []
    with Reader(ckpt.root) as reader:
        for (pfx, layer, expert, proj), names in sorted(triples.items(), key=lambda kv: kv[0][1:]):
            if experts is not None and not experts[0] <= expert < experts[1]:
                continue  # another EP rank's expert: checked from the index above, never read
            parts = {param: _opened(ckpt, name) for param, name in names.items()}
            n, k = _check_triple(cfg, reader, proj, parts)
            if check_scales:
                check_finite_scale(parts["weight_scale"], reader.tensor(parts["weight_scale"]))
            kept.append(ExpertProj(pfx, layer, expert, proj, parts["weight_packed"],
                                   parts["weight_scale"], parts["weight_shape"], n, k))
    return Scan(experts=kept, passthrough=passthrough, prefix=prefix, extra_layer_tensors=extra)


def _opened(ckpt: Checkpoint, name: str) -> TensorInfo:
    if not ckpt.is_open(name):  # a caller bug: the shard selection and the scan disagree
        raise ChordPackError(f"{ckpt.where(name)}: needed, but its shard was not opened")
    return ckpt.info(name)


def _check_param_kind(cfg: ModelConfig, where: str, module: str, param: str, routed: bool) -> None:
    if param == "weight_zero_point":
        raise ChordPackError(f"{where}: asymmetric int4 not supported (zero-point tensor present)")
    if param == "weight_g_idx":
        raise ChordPackError(f"{where}: activation reordering (g_idx) not supported")
    ignored = cfg.is_ignored(module)
    if param in QUANT_PARAMS and (ignored or not routed):
        why = ("quantization_config.ignore keeps this module in BF16" if ignored else
               "only routed experts may be INT4 in a Kimi K2.x checkpoint")
        raise ChordPackError(f"{where}: tensor kind disagrees with quantization_config.ignore: "
                             f"{param} on {module}, but {why}")
    if routed and param not in QUANT_PARAMS:
        raise ChordPackError(
            f"{where}: tensor kind disagrees with quantization_config.ignore: routed expert has "
            f"plain '{param}' but the config says it is INT4 pack-quantized "
            "(a BF16 checkpoint passed off as INT4?)")
    if param == "weight" and not ignored and LINEAR_RE.search(module):
        raise ChordPackError(
            f"{where}: tensor kind disagrees with quantization_config.ignore: Linear {module} is "
            "plain BF16 but no ignore entry matches it, so the config says it is INT4")


def _single_prefix(ckpt: Checkpoint, cfg: ModelConfig, triples: dict) -> str:
    prefixes = sorted({key[0] for key in triples})
    if not prefixes:
        raise ChordPackError(f"{ckpt.root}: no routed-expert tensors (*.mlp.experts.E.*_proj.weight_packed) found")
    if len(prefixes) > 1:
        raise ChordPackError(f"{ckpt.root}: routed experts under several prefixes {prefixes}")
    return prefixes[0]


def _check_expert_set(ckpt: Checkpoint, cfg: ModelConfig, triples: dict, prefix: str) -> None:
    moe_layers = set(cfg.moe_layers())
    for (_, layer, expert, _proj), parts in sorted(triples.items(), key=lambda kv: kv[0][1:]):
        some = ckpt.where(next(iter(parts.values())))
        if layer not in moe_layers:
            raise ChordPackError(
                f"{some}: layer {layer} has routed experts but config.json makes it dense "
                f"(first_k_dense_replace {cfg.first_k_dense}, moe_layer_freq {cfg.moe_layer_freq})")
        if expert >= cfg.num_experts:
            raise ChordPackError(f"{some}: expert {expert} out of range "
                                 f"(config n_routed_experts = {cfg.num_experts})")
    missing = [f"{prefix}layers.{layer}.mlp.experts.{e}.{proj}.{param}"
               for layer in sorted(moe_layers) for e in range(cfg.num_experts) for proj in PROJS
               for param in PARAMS if param not in triples.get((prefix, layer, e, proj), {})]
    if missing:
        listed = ", ".join(missing[:MAX_LISTED])
        raise ChordPackError(
            f"{ckpt.root / (ckpt.index_name or 'model.safetensors')}: {len(missing)} routed-expert "
            f"tensors missing (never treated as zero), first: {listed}")


def _check_triple(cfg: ModelConfig, reader: Reader, proj: str, parts: dict[str, TensorInfo]) -> tuple[int, int]:
    packed, scale, shape = parts["weight_packed"], parts["weight_scale"], parts["weight_shape"]
    if packed.dtype != "I32":
        raise ChordPackError(f"{packed.where()}: dtype {packed.dtype}, expected I32 packed INT4 words")
    if scale.dtype != "BF16":
        raise ChordPackError(f"{scale.where()}: dtype {scale.dtype}, expected BF16 scales")
    if shape.dtype not in ("I32", "I64") or shape.shape != (2,):
        raise ChordPackError(f"{shape.where()}: {shape.dtype} {list(shape.shape)}, expected I32/I64 [2]")
    n, k = (int(v) for v in reader.tensor(shape).tolist())
    want = expected_dims(cfg, proj)
    shapes = (f"weight_shape {[n, k]}, weight_packed {list(packed.shape)}, "
              f"weight_scale {list(scale.shape)}")
    if (n, k) != want:
        raise ChordPackError(f"{shape.where()}: weight_shape disagrees with config.json: {shapes}; "
                             f"config dims give [{want[0]}, {want[1]}]")
    if k % 32:
        raise ChordPackError(f"{shape.where()}: K={k} is not a multiple of 32")
    if packed.shape != (n, k // 8):
        raise ChordPackError(f"{packed.where()}: weight_shape disagrees with the packed tensor: {shapes}; "
                             f"expected weight_packed [{n}, {k // 8}]")
    if len(scale.shape) != 2 or scale.shape[0] != n:
        raise ChordPackError(f"{scale.where()}: weight_scale shape disagrees: {shapes}; "
                             f"expected [{n}, {k // 32}]")
    if scale.shape[1] != k // 32:
        implied = f"group size {k // scale.shape[1]}" if scale.shape[1] and k % scale.shape[1] == 0 else "no group size"
        raise ChordPackError(f"{scale.where()}: weight_scale has {scale.shape[1]} columns for K={k}: "
                             f"{implied} in the tensors (Chord kernels need 32); {shapes}")
    return n, k
