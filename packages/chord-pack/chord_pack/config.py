"""config.json: model dims, where ``quantization_config`` lives, and what Chord accepts in it."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ChordPackError

CONFIG_NAME = "config.json"
CHORD_KEY = "chord"  # the block chord-pack adds next to quantization_config
# A converted checkpoint's quantization_config declares it to vLLM's Humming route
# (quant_method "humming"); ``humming.schema`` (packages/humming-compat) reads these keys.
PACKED_FORMAT = "chord-packed"
SOURCE_QC_KEY = "source_quantization_config"  # the original compressed-tensors block, in `chord`

# What the Chord kernels implement: compressed-tensors pack-quantized, INT4, symmetric, group 32.
_REQUIRED_WEIGHT_ARGS = {
    "num_bits": (4, None),
    "type": ("int", None),
    "strategy": ("group", None),
    "group_size": (32, "unsupported group_size {got} (Chord kernels need 32)"),
    "symmetric": (True, "asymmetric int4 (zero points) not supported: symmetric is {got}"),
}


@dataclass
class ModelConfig:
    """The parts of config.json the converter needs (flat K2-Thinking or K2.5/K2.6 wrapper)."""

    path: Path
    raw: dict
    quant_owner: str | None  # None: top level; "text_config": under text_config
    hidden: int
    moe_intermediate: int
    num_experts: int
    num_layers: int
    first_k_dense: int
    moe_layer_freq: int
    ignore: list[str] = field(default_factory=list)

    @property
    def quantization_config(self) -> dict:
        return self._owner(self.raw)["quantization_config"]

    def _owner(self, cfg: dict) -> dict:
        return cfg if self.quant_owner is None else cfg[self.quant_owner]

    def moe_layers(self) -> list[int]:
        return [i for i in range(self.num_layers)
                if i >= self.first_k_dense and i % self.moe_layer_freq == 0]

    def is_ignored(self, module: str) -> bool:
        """Does ``quantization_config.ignore`` keep ``module`` in BF16 (compressed-tensors rules)?"""
        for entry in self.ignore:
            if entry.startswith("re:"):
                if re.match(entry[3:], module):
                    return True
            elif module == entry or module.endswith("." + entry):
                return True
        return False

    def with_chord_block(self, block: dict) -> dict:
        """A copy of config.json with ``chord`` placed beside ``quantization_config``, and
        ``quantization_config`` replaced by the Humming declaration of the packed tensors (the
        original compressed-tensors block moves into ``chord.source_quantization_config``)."""
        cfg = copy.deepcopy(self.raw)
        owner = self._owner(cfg)
        source_qc = owner["quantization_config"]
        owner[CHORD_KEY] = {**block, SOURCE_QC_KEY: source_qc}
        owner["quantization_config"] = humming_quantization_config(source_qc, block)
        return cfg


def humming_quantization_config(source_qc: dict, block: dict) -> dict:
    """What a converted checkpoint tells vLLM: ``quant_method "humming"`` (vLLM selects its Humming
    route, ``--quantization humming``, from it) and ``format "chord-packed"`` (our
    ``humming.schema`` then describes the packed tensors, so vLLM's own loaders slice them per
    rank and nothing is repacked at load). ``ignore`` is the source's list, so the same modules
    stay BF16. No key is named ``dtype``/``group_size``: vLLM also parses this dict as a Humming
    input schema, where those names are activation-quantization aliases."""
    return {
        "quant_method": "humming",
        "format": PACKED_FORMAT,
        "b_dtype": "uint4",
        "bs_dtype": "bfloat16",
        "weight_scale_group_size": 32,
        "chord_mode": block["mode"],
        "chord_block_k": block["block_k"],
        "chord_format_version": block["format_version"],
        "chord_sharding": block.get("sharding"),
        "ignore": list(source_qc.get("ignore") or []),
    }


def find_chord_block(cfg: dict) -> dict | None:
    """The chord block of a config dict, wherever it sits (top level or text_config)."""
    if isinstance(cfg.get(CHORD_KEY), dict):
        return cfg[CHORD_KEY]
    text = cfg.get("text_config")
    if isinstance(text, dict) and isinstance(text.get(CHORD_KEY), dict):
        return text[CHORD_KEY]
    return None


def read_json(path: Path, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ChordPackError(f"{path}: {what} not found") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ChordPackError(f"{path}: {what} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ChordPackError(f"{path}: {what} must be a JSON object")
    return data


def load_config(root: Path, *, allow_chord: bool = False) -> ModelConfig:
    """Read and validate ``root/config.json``; refuse what the Chord kernels cannot run."""
    path = root / CONFIG_NAME
    raw = read_json(path, "config.json")
    if not allow_chord and find_chord_block(raw) is not None:
        raise ChordPackError(
            f"{path}: this is already a Chord-packed checkpoint (config has a '{CHORD_KEY}' block); "
            "convert the original compressed-tensors checkpoint instead")
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw

    if isinstance(raw.get("quantization_config"), dict):
        owner = None
    elif text is not raw and isinstance(text.get("quantization_config"), dict):
        owner = "text_config"
    else:
        raise ChordPackError(
            f"{path}: no quantization_config (top level or text_config): not an INT4 "
            "compressed-tensors checkpoint")
    qcfg = raw["quantization_config"] if owner is None else text["quantization_config"]
    where = "quantization_config" if owner is None else "text_config.quantization_config"
    chord = find_chord_block(raw)
    if chord is not None and qcfg.get("format") == PACKED_FORMAT:
        # a chord-pack output: its quantization_config is the Humming declaration; the source's
        # compressed-tensors block (checked here as for a source) travels in the chord block
        qcfg = chord.get(SOURCE_QC_KEY)
        where = f"{CHORD_KEY}.{SOURCE_QC_KEY}"
        if not isinstance(qcfg, dict):
            raise ChordPackError(f"{path}: Chord-packed config has no {where}")
    validate_quantization_config(qcfg, f"{path}: {where}")

    def dim(key: str, default: int | None = None, minimum: int = 1) -> int:
        value = text.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ChordPackError(f"{path}: missing or invalid '{key}' ({value!r}) in the text config")
        return value

    ignore = qcfg.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(x, str) for x in ignore):
        raise ChordPackError(f"{path}: {where}.ignore must be a list of strings")
    return ModelConfig(
        path=path, raw=raw, quant_owner=owner,
        hidden=dim("hidden_size"), moe_intermediate=dim("moe_intermediate_size"),
        num_experts=dim("n_routed_experts"), num_layers=dim("num_hidden_layers"),
        first_k_dense=dim("first_k_dense_replace", 1, 0), moe_layer_freq=dim("moe_layer_freq", 1),
        ignore=list(ignore),
    )


def validate_quantization_config(qcfg: dict, where: str) -> None:
    """Accept only compressed-tensors pack-quantized INT4 symmetric group-32 weight-only."""
    method = qcfg.get("quant_method")
    if method == "fp8" or "weight_block_size" in qcfg:
        raise ChordPackError(
            f"{where}: quant_method {method!r}: FP8 checkpoint, not INT4 (chord-pack converts the "
            "INT4 W4A16 checkpoints: Kimi K2-Thinking, K2.5, K2.6)")
    if method != "compressed-tensors":
        raise ChordPackError(f"{where}: quant_method is {method!r}, expected 'compressed-tensors'")
    fmt = qcfg.get("format")
    if fmt != "pack-quantized":
        raise ChordPackError(f"{where}: format is {fmt!r}, expected 'pack-quantized'")
    if qcfg.get("transform_config"):
        raise ChordPackError(f"{where}: transform_config (rotated weights) is not supported")
    groups = qcfg.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ChordPackError(f"{where}: config_groups is missing or empty")
    for gname, group in groups.items():
        _validate_group(group, f"{where}.config_groups.{gname}")


def _validate_group(group: dict, where: str) -> None:
    if not isinstance(group, dict):
        raise ChordPackError(f"{where}: must be an object")
    if group.get("format") not in (None, "pack-quantized"):
        raise ChordPackError(f"{where}: format is {group['format']!r}, expected 'pack-quantized'")
    for key in ("input_activations", "output_activations"):
        if group.get(key) is not None:
            raise ChordPackError(f"{where}: {key} is set; Chord is weight-only W4A16 (BF16 activations)")
    w = group.get("weights")
    if not isinstance(w, dict):
        raise ChordPackError(f"{where}: weights is missing (not a weight-quantized scheme)")
    for key, (want, message) in _REQUIRED_WEIGHT_ARGS.items():
        got = w.get(key)
        if got != want or type(got) is not type(want):
            text = (message or "{key} is {got!r}, Chord needs {want!r}").format(key=key, got=got, want=want)
            raise ChordPackError(f"{where}.weights: {text}")
    if w.get("actorder") not in (None, False):
        raise ChordPackError(
            f"{where}.weights: actorder is {w['actorder']!r}: activation reordering (g_idx) not supported")
    if w.get("dynamic") not in (None, False):
        raise ChordPackError(f"{where}.weights: dynamic is {w['dynamic']!r}, expected false")
    if w.get("block_structure") is not None:
        raise ChordPackError(f"{where}.weights: block_structure is {w['block_structure']!r}, expected null")
