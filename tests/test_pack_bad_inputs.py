"""Every refusal of chord-pack convert: a clear error naming the file and tensor, and no OUT left behind
(plus the odd inputs it accepts on purpose)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from chord_pack import ChordPackError
from chord_pack.convert import convert
from chord_pack.fixtures import bundled_fixture
from safetensors import safe_open
from safetensors.torch import save_file

THINKING = bundled_fixture()
INDEX = "model.safetensors.index.json"
EXPERT = "model.layers.1.mlp.experts.0.gate_proj"


def copy_fixture(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(THINKING, src)
    return src


def load_json(path: Path) -> dict:
    return json.loads(path.read_text())


def shard_of(src: Path, name: str) -> Path:
    return src / load_json(src / INDEX)["weight_map"][name]


def edit_shard(src: Path, shard: Path, fn: Callable[[dict, dict], None]) -> None:
    """Rewrite one shard through ``fn(tensors, metadata)`` and keep the index in step."""
    with safe_open(str(shard), "pt") as sf:
        tensors = {k: sf.get_tensor(k) for k in sf.keys()}
        meta = sf.metadata()
    fn(tensors, meta)
    save_file(tensors, str(shard), metadata=meta)
    index = load_json(src / INDEX)
    wm = {k: v for k, v in index["weight_map"].items() if v != shard.name}
    wm.update({k: shard.name for k in tensors})
    index["weight_map"] = dict(sorted(wm.items()))
    (src / INDEX).write_text(json.dumps(index))


def edit_tensor(src: Path, name: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    def change(tensors, _meta):
        tensors[name] = fn(tensors[name])
    edit_shard(src, shard_of(src, name), change)


def edit_config(src: Path, fn: Callable[[dict], None]) -> None:
    cfg = load_json(src / "config.json")
    fn(cfg)
    (src / "config.json").write_text(json.dumps(cfg))


def refuse(src: Path, *needles: str, mode: str = "indexed") -> str:
    """convert must raise naming every needle, and leave nothing next to (or at) OUT."""
    out = src.parent / "out"
    with pytest.raises(ChordPackError) as e:
        convert(src, out, mode, progress=False, log=lambda _m: None)
    msg = str(e.value)
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"
    assert e.value.exit_code == 2
    assert not out.exists()
    assert sorted(p.name for p in src.parent.iterdir()) == ["src"], "no staging folder may remain"
    return msg


# ---- files, headers, index ------------------------------------------------------------------

def test_truncated_shard(tmp_path):
    src = copy_fixture(tmp_path)
    shard = src / "model-00002-of-000002.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[:-1000])
    refuse(src, "shard model-00002-of-000002.safetensors truncated", f"{len(data) - 1000} bytes",
           f"header needs {len(data)}", "tensor ")


def test_corrupt_header(tmp_path):
    src = copy_fixture(tmp_path)
    shard = src / "model-00001-of-000002.safetensors"
    data = bytearray(shard.read_bytes())
    data[8:12] = b"\xff\xfe{["
    shard.write_bytes(bytes(data))
    refuse(src, "shard model-00001-of-000002.safetensors: corrupt safetensors header")


def test_index_names_a_missing_file(tmp_path):
    src = copy_fixture(tmp_path)
    index = load_json(src / INDEX)
    index["weight_map"][f"{EXPERT}.weight_scale"] = "model-00003-of-000002.safetensors"
    (src / INDEX).write_text(json.dumps(index))
    refuse(src, INDEX, "model-00003-of-000002.safetensors which does not exist", f"{EXPERT}.weight_scale")


def test_tensor_missing_from_its_shard(tmp_path):
    src = copy_fixture(tmp_path)
    index = load_json(src / INDEX)
    name = f"{EXPERT}.weight_packed"
    right = index["weight_map"][name]
    wrong = next(f for f in set(index["weight_map"].values()) if f != right)
    index["weight_map"][name] = wrong
    (src / INDEX).write_text(json.dumps(index))
    refuse(src, f"index says tensor {name} is in {wrong}, not found there")


def test_missing_expert_tensor(tmp_path):
    src = copy_fixture(tmp_path)
    name = "model.layers.2.mlp.experts.3.down_proj.weight_scale"
    edit_shard(src, shard_of(src, name), lambda t, _m: t.pop(name))
    refuse(src, "1 routed-expert tensors missing", name, INDEX)


def test_missing_whole_expert(tmp_path):
    src = copy_fixture(tmp_path)
    base = "model.layers.2.mlp.experts.1."
    for shard in src.glob("*.safetensors"):
        edit_shard(src, shard, lambda t, _m: [t.pop(k) for k in list(t) if k.startswith(base)])
    refuse(src, "9 routed-expert tensors missing", f"{base}gate_proj.weight_packed")


# ---- expert tensors -------------------------------------------------------------------------

def test_weight_shape_disagrees_with_tensors(tmp_path):
    src = copy_fixture(tmp_path)
    edit_tensor(src, f"{EXPERT}.weight_shape", lambda t: torch.tensor([128, 512], dtype=t.dtype))
    refuse(src, f"{EXPERT}.weight_shape", "weight_shape [128, 512]", "weight_packed [128, 32]",
           "weight_scale [128, 8]", str(shard_of(src, f"{EXPERT}.weight_shape").name))


def test_packed_shape_disagrees_with_weight_shape(tmp_path):
    src = copy_fixture(tmp_path)
    edit_tensor(src, f"{EXPERT}.weight_packed", lambda t: t[:, :16].contiguous())
    refuse(src, f"{EXPERT}.weight_packed", "weight_packed [128, 16]", "expected weight_packed [128, 32]")


def test_scale_dtype_not_bf16(tmp_path):
    src = copy_fixture(tmp_path)
    edit_tensor(src, f"{EXPERT}.weight_scale", lambda t: t.to(torch.float16))
    refuse(src, f"{EXPERT}.weight_scale", "dtype F16, expected BF16")


def test_group_size_64_in_the_tensors(tmp_path):
    src = copy_fixture(tmp_path)
    edit_tensor(src, f"{EXPERT}.weight_scale", lambda t: t[:, ::2].contiguous())
    refuse(src, f"{EXPERT}.weight_scale", "group size 64", "Chord kernels need 32")


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_scale(tmp_path, value):
    src = copy_fixture(tmp_path)
    name = "model.layers.2.mlp.experts.3.up_proj.weight_scale"

    def poison(t):
        t = t.clone()
        t[5, 3] = value
        return t

    edit_tensor(src, name, poison)
    refuse(src, shard_of(src, name).name, f"tensor {name}", "non-finite scale", "row 5, group 3")


def test_zero_point_tensor(tmp_path):
    src = copy_fixture(tmp_path)
    name = f"{EXPERT}.weight_zero_point"
    edit_shard(src, shard_of(src, f"{EXPERT}.weight_packed"),
               lambda t, _m: t.update({name: torch.zeros(16, 8, dtype=torch.int32)}))
    refuse(src, f"tensor {name}", "asymmetric int4 not supported")


def test_g_idx_tensor(tmp_path):
    src = copy_fixture(tmp_path)
    name = f"{EXPERT}.weight_g_idx"
    edit_shard(src, shard_of(src, f"{EXPERT}.weight_packed"),
               lambda t, _m: t.update({name: torch.zeros(256, dtype=torch.int32)}))
    refuse(src, f"tensor {name}", "g_idx", "not supported")


def test_bf16_experts_passed_off_as_int4(tmp_path):
    src = copy_fixture(tmp_path)

    def dequantized(t, _m):
        for k in [k for k in t if k.startswith(EXPERT)]:
            t.pop(k)
        t[f"{EXPERT}.weight"] = torch.zeros(128, 256, dtype=torch.bfloat16)

    for shard in src.glob("*.safetensors"):
        edit_shard(src, shard, dequantized if shard.name == shard_of(src, f"{EXPERT}.weight_packed").name
                   else lambda t, _m: [t.pop(k) for k in list(t) if k.startswith(EXPERT)])
    refuse(src, f"tensor {EXPERT}.weight", "disagrees with quantization_config.ignore", "BF16 checkpoint")


def test_ignore_list_that_misses_attention(tmp_path):
    src = copy_fixture(tmp_path)
    edit_config(src, lambda c: c["quantization_config"]["ignore"].remove("re:.*self_attn.*"))
    refuse(src, "disagrees with quantization_config.ignore", "self_attn", "tensor model.layers.")


def test_ignore_list_that_covers_the_experts(tmp_path):
    src = copy_fixture(tmp_path)
    edit_config(src, lambda c: c["quantization_config"]["ignore"].append("re:.*experts.*"))
    refuse(src, "disagrees with quantization_config.ignore", "weight_packed on model.layers.1.mlp.experts.0")


def test_expert_count_disagrees_with_config(tmp_path):
    src = copy_fixture(tmp_path)
    edit_config(src, lambda c: c.update(n_routed_experts=3))
    refuse(src, "expert 3 out of range", "n_routed_experts = 3", "tensor model.layers.1.mlp.experts.3.")


def test_experts_in_a_dense_layer(tmp_path):
    src = copy_fixture(tmp_path)
    edit_config(src, lambda c: c.update(first_k_dense_replace=2))
    refuse(src, "layer 1 has routed experts but config.json makes it dense",
           "tensor model.layers.1.mlp.experts.0.")


def test_experts_beyond_num_hidden_layers_pass_through(tmp_path):
    """Extra layers (an MTP layer, say) are not the converter's: copied unchanged, not refused."""
    src = copy_fixture(tmp_path)
    mtp = "model.layers.3.mlp.experts.0.gate_proj.weight_packed"
    shard = shard_of(src, f"{EXPERT}.weight_packed")
    edit_shard(src, shard, lambda t, _m: t.update({mtp: torch.arange(64, dtype=torch.int32)}))
    msgs: list[str] = []
    convert(src, tmp_path / "out", "indexed", progress=False, log=msgs.append)
    assert "1 expert tensors of layers beyond num_hidden_layers 3" in msgs[0]
    from chord_pack.verify import verify

    assert verify(src, tmp_path / "out", log=lambda _m: None).passthrough == 44


def test_dims_disagree_with_config(tmp_path):
    src = copy_fixture(tmp_path)
    edit_config(src, lambda c: c.update(moe_intermediate_size=64))
    refuse(src, "weight_shape disagrees with config.json", "model.layers.1.mlp.experts.0.down_proj.weight_shape")


# ---- quantization_config --------------------------------------------------------------------

@pytest.mark.parametrize(("key", "value", "needle"), [
    ("group_size", 64, "unsupported group_size 64 (Chord kernels need 32)"),
    ("symmetric", False, "asymmetric int4"),
    ("actorder", "group", "activation reordering (g_idx) not supported"),
    ("num_bits", 8, "num_bits is 8"),
    ("type", "float", "type is 'float'"),
    ("strategy", "channel", "strategy is 'channel'"),
])
def test_unsupported_weight_scheme(tmp_path, key, value, needle):
    src = copy_fixture(tmp_path)
    edit_config(src, lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"].update({key: value}))
    refuse(src, "config.json", "config_groups.group_0.weights", needle)


def test_other_format(tmp_path):
    src = copy_fixture(tmp_path)
    edit_config(src, lambda c: c["quantization_config"].update(format="nvfp4-pack-quantized"))
    refuse(src, "config.json", "format is 'nvfp4-pack-quantized'")


def test_fp8_checkpoint(tmp_path):
    src = copy_fixture(tmp_path)
    edit_config(src, lambda c: c.update(quantization_config={
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}))
    refuse(src, "config.json", "FP8 checkpoint, not INT4")


def test_unquantized_checkpoint(tmp_path):
    src = copy_fixture(tmp_path)
    edit_config(src, lambda c: c.pop("quantization_config"))
    refuse(src, "config.json", "no quantization_config")


# ---- Chord output fed back in ---------------------------------------------------------------

def test_chord_output_fed_back_in(tmp_path):
    packed = tmp_path / "src"
    convert(THINKING, packed, "indexed", progress=False, log=lambda _m: None)
    refuse(packed, "config.json", "already a Chord-packed checkpoint")


def test_chord_shard_metadata_fed_back_in(tmp_path):
    src = copy_fixture(tmp_path)
    shard = src / "model-00002-of-000002.safetensors"
    edit_shard(src, shard, lambda _t, m: m.update({"chord.mode": "masked"}))
    refuse(src, f"shard {shard.name}", "written by chord-pack", "already Chord-packed")


def test_inspect_counts_extra_layer_experts_as_passthrough(tmp_path):
    """An MTP layer's expert tensors are copied, not packed: inspect must count them as pass-through."""
    from chord_pack.info import inspect_checkpoint

    src = copy_fixture(tmp_path)
    mtp = "model.layers.3.mlp.experts.0.gate_proj.weight_packed"
    shard = shard_of(src, f"{EXPERT}.weight_packed")
    edit_shard(src, shard, lambda t, _m: t.update({mtp: torch.arange(64, dtype=torch.int32)}))
    convert(src, tmp_path / "out", "indexed", progress=False, log=lambda _m: None)
    s = inspect_checkpoint(tmp_path / "out")
    assert s["packed_tensors"] == {"weight_packed": 24, "weight_scale": 24, "weight_shape": 24}
    assert s["passthrough_tensors"] == 44
