"""The tiny Kimi fixtures: made by compressed-tensors' own compressor, format-faithful, shipped copy reproducible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from chord_kernels.int4 import dequantize_packed, unpack_codes_along_k
from chord_pack.fixtures import QUANTIZATION_CONFIG, bundled_fixture, make_tiny_kimi_checkpoint
from safetensors import safe_open
from safetensors.torch import load_file

pytest.importorskip("compressed_tensors")
from chord_pack.fixtures import library_decompress  # noqa: E402  (needs compressed-tensors)

THINKING = bundled_fixture()


def load_all(root: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(root.glob("*.safetensors")):
        out.update(load_file(f))
    return out


@pytest.fixture(scope="module")
def k25(tmp_path_factory) -> Path:
    return make_tiny_kimi_checkpoint(tmp_path_factory.mktemp("k25") / "ckpt", "k2.5")


def test_shipped_fixture_is_byte_identical_to_a_fresh_library_run(tmp_path):
    fresh = make_tiny_kimi_checkpoint(tmp_path / "fresh", "k2-thinking")
    shipped = sorted(p.name for p in THINKING.iterdir())
    assert sorted(p.name for p in fresh.iterdir()) == shipped
    for name in shipped:
        assert (fresh / name).read_bytes() == (THINKING / name).read_bytes(), name


def test_bundled_fixture_is_small():
    assert sum(p.stat().st_size for p in THINKING.iterdir()) < 1.5 * 2**20


@pytest.mark.parametrize("variant", ["k2-thinking", "k2.5"])
def test_experts_decompress_like_the_library(variant, k25):
    root = THINKING if variant == "k2-thinking" else k25
    tensors = load_all(root)
    packed_names = [n for n in tensors if n.endswith(".weight_packed")]
    assert len(packed_names) == 2 * 4 * 3  # 2 MoE layers x 4 experts x gate/up/down
    saw_minus8 = saw_eps = False
    for name in packed_names:
        base = name.removesuffix(".weight_packed")
        packed, scale, shape = (tensors[f"{base}.{s}"] for s in ("weight_packed", "weight_scale", "weight_shape"))
        assert packed.dtype == torch.int32 and scale.dtype == torch.bfloat16 and shape.dtype == torch.int32
        assert shape.tolist() == [packed.shape[0], packed.shape[1] * 8]
        ref = library_decompress(packed, scale, shape)
        ours = dequantize_packed(packed, scale)
        assert ours.dtype == ref.dtype == torch.bfloat16
        assert torch.equal(ours.view(torch.int16), ref.view(torch.int16)), base
        saw_minus8 |= bool((unpack_codes_along_k(packed) == 0).any())
        saw_eps |= bool((scale == torch.finfo(torch.bfloat16).eps).any())
    assert saw_minus8, "the library's absmax/7.5 rule should produce code -8 (nibble 0)"
    assert saw_eps, "the all-zero group should get the library's eps scale"


def test_thinking_config_and_layout():
    cfg = json.loads((THINKING / "config.json").read_text())
    assert cfg["quantization_config"] == QUANTIZATION_CONFIG
    assert cfg["model_type"] == "kimi_k2" and cfg["architectures"] == ["DeepseekV3ForCausalLM"]
    from compressed_tensors import QuantizationConfig

    parsed = QuantizationConfig.model_validate(cfg["quantization_config"])
    assert parsed.format == "pack-quantized"

    index = json.loads((THINKING / "model.safetensors.index.json").read_text())
    wm = index["weight_map"]
    assert sorted(set(wm.values())) == ["model-00001-of-000002.safetensors", "model-00002-of-000002.safetensors"]
    split = [n for n in wm if n.endswith(".weight_packed")
             and len({wm[n.replace("weight_packed", s)] for s in ("weight_packed", "weight_scale", "weight_shape")}) > 1]
    assert split, "one expert's packed/scale/shape triple should span shards"
    total = 0
    for f in set(wm.values()):
        with safe_open(str(THINKING / f), "pt") as s:
            assert s.metadata() == {"format": "pt"}
            for k in s.keys():
                assert wm[k] == f
                t = s.get_tensor(k)
                total += t.numel() * t.element_size()
    assert index["metadata"]["total_size"] == total
    tensors = load_all(THINKING)
    assert tensors["model.layers.1.mlp.gate.e_score_correction_bias"].dtype == torch.float32
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                 "model.layers.0.mlp.gate_proj.weight", "model.layers.2.mlp.shared_experts.down_proj.weight",
                 "model.layers.1.self_attn.kv_a_proj_with_mqa.weight", "model.layers.1.mlp.gate.weight"):
        assert tensors[name].dtype == torch.bfloat16, name
    assert tensors["model.layers.1.mlp.experts.0.down_proj.weight_packed"].shape == (256, 16)
    assert tensors["model.layers.1.mlp.experts.0.gate_proj.weight_scale"].shape == (128, 8)


def test_k25_config_and_names(k25):
    cfg = json.loads((k25 / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["model_type"] == "kimi_k25"
    q = cfg["text_config"]["quantization_config"]
    assert q["config_groups"] == QUANTIZATION_CONFIG["config_groups"]
    assert "re:vision_tower.*" in q["ignore"] and cfg["text_config"]["hidden_size"] == 256
    tensors = load_all(k25)
    assert "language_model.model.layers.2.mlp.experts.3.up_proj.weight_packed" in tensors
    assert "language_model.lm_head.weight" in tensors
    vision = [n for n in tensors if n.startswith(("vision_tower.", "mm_projector."))]
    assert vision and all(tensors[n].dtype == torch.bfloat16 for n in vision)
    assert not [n for n in tensors if n.startswith("model.")]


def test_deterministic_for_a_seed_and_int64_shapes(tmp_path, k25):
    again = make_tiny_kimi_checkpoint(tmp_path / "again", "k2.5")
    for f in k25.iterdir():
        assert (again / f.name).read_bytes() == f.read_bytes(), f.name
    other = make_tiny_kimi_checkpoint(tmp_path / "other", "k2.5", seed=1, weight_shape_dtype=torch.int64, shards=3)
    assert len(list(other.glob("*.safetensors"))) == 3
    t = load_all(other)
    assert t["language_model.model.layers.1.mlp.experts.0.gate_proj.weight_shape"].dtype == torch.int64
    assert not torch.equal(t["language_model.model.embed_tokens.weight"],
                           load_all(k25)["language_model.model.embed_tokens.weight"])


def test_make_fixture_cli(tmp_path, k25, capsys):
    from chord_pack.cli import main

    assert main(["make-fixture", str(tmp_path / "cli"), "--variant", "k2.5"]) == 0
    assert "wrote k2.5 fixture" in capsys.readouterr().out
    for f in k25.iterdir():
        assert (tmp_path / "cli" / f.name).read_bytes() == f.read_bytes(), f.name
