"""chord-pack convert / inspect / verify on the tiny Kimi fixtures (both variants, all modes, EP, TP)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from chord_kernels.layouts import BLOCK_K_BY_MODE, FORMAT_VERSION
from chord_pack import ChordPackError
from chord_pack.convert import convert
from chord_pack.fixtures import bundled_fixture, make_tiny_kimi_checkpoint
from chord_pack.info import inspect_checkpoint
from chord_pack.plan import Sharding
from chord_pack.verify import verify
from safetensors import safe_open
from safetensors.torch import load_file, save_file

THINKING = bundled_fixture()
MODES = ("indexed", "contiguous", "masked")
PARAMS = ("weight_packed", "weight_scale", "weight_shape")
quiet = dict(progress=False, log=lambda _msg: None)


@pytest.fixture(scope="module")
def k25(tmp_path_factory) -> Path:
    pytest.importorskip("compressed_tensors")
    return make_tiny_kimi_checkpoint(tmp_path_factory.mktemp("k25") / "ckpt", "k2.5")


@pytest.fixture(params=["k2-thinking", "k2.5"])
def src(request) -> Path:
    return THINKING if request.param == "k2-thinking" else request.getfixturevalue("k25")


def load_all(root: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(root.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def tree_hash(root: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


# ---- an independent reading of both formats, from their written specs ------------------------

def decode_compressed_tensors(packed: torch.Tensor) -> torch.Tensor:
    """Format notes §4: byte b of a row holds column 2b (low nibble) and 2b+1 (high nibble)."""
    b = packed.contiguous().view(torch.uint8)  # little-endian words -> bytes in column order
    return torch.stack([b & 0xF, b >> 4], dim=-1).reshape(packed.shape[0], -1)


NIBBLE_OF_ELEMENT = [[0, 2, 4, 6, 1, 3, 5, 7].index(e) for e in range(8)]  # word holds [e0,e2,e4,e6,e1,e3,e5,e7]


def decode_chord(qweight: torch.Tensor, block_k: int) -> torch.Tensor:
    """layouts.py docstring, element by element: qweight [N/16, K/BK, 32, BK/16] -> codes [N, K].

    Tile (n//16, k//16) is one m16n8k16 A fragment: lane l owns rows g = l//4, g+8 and columns
    2(l%4)+{0,1}, +8; registers a0=(g, c..c+1) a1=(g+8, c..) a2=(g, c+8..) a3=(g+8, c+8..);
    element e = 2*reg + {x:0, y:1} sits in nibble NIBBLE_OF_ELEMENT[e] of the lane's word.
    """
    n_tiles, k_blocks = qweight.shape[0], qweight.shape[1]
    n = torch.arange(n_tiles * 16).view(-1, 1)
    k = torch.arange(k_blocks * block_k).view(1, -1)
    r, c = n % 16, k % 16
    lane = 4 * (r % 8) + (c % 8) // 2
    reg = (r // 8) + 2 * (c // 8)
    element = 2 * reg + c % 2
    nibble = torch.tensor(NIBBLE_OF_ELEMENT)[element]
    word = qweight[n // 16, k // block_k, lane, (k % block_k) // 16]
    return ((word >> (4 * nibble)) & 0xF).to(torch.uint8)


# ---- conversions ----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_convert_verify_inspect(src, mode, tmp_path):
    before = tree_hash(src)
    out = tmp_path / "out"
    result = convert(src, out, mode, **quiet)
    assert not result.skipped and result.packed == 24
    assert tree_hash(src) == before, "SRC must never be modified"
    assert [p.name for p in tmp_path.iterdir()] == ["out"], "no staging folder may remain"
    assert verify(src, out, log=lambda _m: None).packed == 24

    s = inspect_checkpoint(out)
    assert (s["mode"], s["block_k"], s["format_version"]) == (mode, BLOCK_K_BY_MODE[mode], FORMAT_VERSION)
    assert s["packed_tensors"] == {"weight_packed": 24, "weight_scale": 24, "weight_shape": 24}
    assert s["sharding"] is None and s["source"] == {"path": str(src), "repo": None, "revision": None}
    n_src = len(json.loads((src / "model.safetensors.index.json").read_text())["weight_map"])
    assert s["passthrough_tensors"] == n_src - 72

    cfg = json.loads((out / "config.json").read_text())
    owner = cfg if "quantization_config" in cfg else cfg["text_config"]
    assert "quantization_config" in owner and owner["chord"]["mode"] == mode
    assert owner["chord"]["block_k"] == BLOCK_K_BY_MODE[mode] and owner["chord"]["source"]["revision"] is None
    src_cfg = json.loads((src / "config.json").read_text())
    src_qc = (src_cfg if "quantization_config" in src_cfg else src_cfg["text_config"])["quantization_config"]
    # the Humming declaration vLLM reads (quant_method humming -> humming.schema's Chord-packed
    # schema); the compressed-tensors block it replaces travels in the chord block
    assert owner["quantization_config"] == {
        "quant_method": "humming", "format": "chord-packed", "b_dtype": "uint4", "bs_dtype": "bfloat16",
        "weight_scale_group_size": 32, "chord_mode": mode, "chord_block_k": BLOCK_K_BY_MODE[mode],
        "chord_format_version": FORMAT_VERSION, "chord_sharding": None, "ignore": src_qc["ignore"]}
    assert owner["chord"]["source_quantization_config"] == src_qc
    assert (out / "generation_config.json").read_bytes() == (src / "generation_config.json").read_bytes()
    for f in out.glob("*.safetensors"):
        with safe_open(str(f), "pt") as sf:
            assert sf.metadata() == {"format": "pt", "chord.mode": mode,
                                     "chord.block_k": str(BLOCK_K_BY_MODE[mode]), "chord.format_version": "1"}


def test_passthrough_is_byte_for_byte_and_names_are_kept(src, tmp_path):
    out = tmp_path / "out"
    convert(src, out, "contiguous", **quiet)
    a, b = load_all(src), load_all(out)
    assert set(a) == set(b)
    src_map = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    out_map = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert src_map == out_map, "output shards mirror the source's shard assignment"
    passthrough = [n for n in a if ".experts." not in n]
    assert any(n.startswith("vision_tower.") for n in passthrough) == ("language_model.lm_head.weight" in a)
    for name in passthrough:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].contiguous().view(torch.uint8).equal(b[name].contiguous().view(torch.uint8)), name


@pytest.mark.parametrize("mode", MODES)
def test_packed_bytes_match_an_independent_decoder(mode, tmp_path):
    out = tmp_path / "out"
    convert(THINKING, out, mode, **quiet)
    a, b = load_all(THINKING), load_all(out)
    bk = BLOCK_K_BY_MODE[mode]
    for base in ("model.layers.1.mlp.experts.0.gate_proj", "model.layers.2.mlp.experts.3.down_proj",
                 "model.layers.1.mlp.experts.1.up_proj"):
        q, s = b[f"{base}.weight_packed"], b[f"{base}.weight_scale"]
        n, k = a[f"{base}.weight_shape"].tolist()
        assert q.dtype == torch.int32 and q.shape == (n // 16, k // bk, 32, bk // 16)
        assert s.dtype == torch.bfloat16 and s.shape == (k // 32, n)
        assert b[f"{base}.weight_shape"].tolist() == [n, k]
        assert b[f"{base}.weight_shape"].dtype == a[f"{base}.weight_shape"].dtype
        assert torch.equal(decode_chord(q, bk), decode_compressed_tensors(a[f"{base}.weight_packed"])), base
        assert torch.equal(s.t().view(torch.int16), a[f"{base}.weight_scale"].view(torch.int16)), base


@pytest.mark.parametrize("mode", ["indexed", "contiguous"])
def test_ep_slices_cover_every_expert_once(src, mode, tmp_path):
    seen: dict[str, torch.Tensor] = {}
    full = tmp_path / "full"
    convert(src, full, mode, **quiet)
    for rank in range(2):
        out = tmp_path / f"ep{rank}"
        convert(src, out, mode, sharding=Sharding("ep", 2, rank), **quiet)
        verify(src, out, log=lambda _m: None)
        s = inspect_checkpoint(out)
        assert s["sharding"] == {"kind": "ep", "size": 2, "rank": rank, "experts": [2 * rank, 2 * rank + 2]}
        t = load_all(out)
        experts = {int(n.split(".experts.")[1].split(".")[0]) for n in t if ".experts." in n}
        assert experts == {2 * rank, 2 * rank + 1}, "global expert numbering is kept"
        seen.update({n: v for n, v in t.items() if ".experts." in n})
    f = load_all(full)
    assert set(seen) == {n for n in f if ".experts." in n}
    assert all(torch.equal(seen[n], f[n]) for n in seen)


def test_tp_slices_intermediate_dim(src, tmp_path):
    a = load_all(src)
    pfx = "model." if "model.embed_tokens.weight" in a else "language_model.model."
    parts = []
    for rank in range(2):
        out = tmp_path / f"tp{rank}"
        convert(src, out, "indexed", sharding=Sharding("tp", 2, rank), **quiet)
        verify(src, out, log=lambda _m: None)
        assert inspect_checkpoint(out)["sharding"] == {"kind": "tp", "size": 2, "rank": rank,
                                                        "intermediate": [64 * rank, 64 * rank + 64]}
        parts.append(load_all(out))
    base = f"{pfx}layers.2.mlp.experts.1"
    for proj, dim in (("gate_proj", 0), ("up_proj", 0), ("down_proj", 1)):
        codes = decode_compressed_tensors(a[f"{base}.{proj}.weight_packed"])
        shape = a[f"{base}.{proj}.weight_shape"].tolist()
        for rank, t in enumerate(parts):
            want_shape = list(shape)
            want_shape[dim] //= 2
            assert t[f"{base}.{proj}.weight_shape"].tolist() == want_shape
            got = decode_chord(t[f"{base}.{proj}.weight_packed"], 64)
            assert torch.equal(got, codes.narrow(dim, 64 * rank, 64)), (proj, rank)


def test_tp_slice_must_fit_block_k(tmp_path):
    with pytest.raises(ChordPackError, match="BLOCK_K 128"):
        convert(THINKING, tmp_path / "out", "masked", sharding=Sharding("tp", 2, 0), **quiet)
    with pytest.raises(ChordPackError, match="--tp-size 3"):
        convert(THINKING, tmp_path / "out", "indexed", sharding=Sharding("tp", 3, 0), **quiet)
    with pytest.raises(ChordPackError, match="not divisible by --ep-size 3"):
        convert(THINKING, tmp_path / "out", "indexed", sharding=Sharding("ep", 3, 0), **quiet)
    assert not any(tmp_path.iterdir())


def test_rerun_is_idempotent_and_other_settings_are_refused(tmp_path):
    out = tmp_path / "out"
    convert(THINKING, out, "indexed", **quiet)
    before = tree_hash(out)
    msgs: list[str] = []
    assert convert(THINKING, out, "indexed", progress=False, log=msgs.append).skipped
    assert "already holds this conversion" in msgs[0]
    with pytest.raises(ChordPackError, match="different settings.*mode: existing 'indexed', requested 'masked'"):
        convert(THINKING, out, "masked", **quiet)
    with pytest.raises(ChordPackError, match="different settings.*sharding"):
        convert(THINKING, out, "indexed", sharding=Sharding("ep", 2, 0), **quiet)
    assert tree_hash(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_out_that_is_not_chord_output_is_refused_and_empty_out_is_used(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ChordPackError, match="not a chord-pack output"):
        convert(THINKING, tmp_path / "busy", "indexed", **quiet)
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    convert(THINKING, tmp_path / "empty", "indexed", **quiet)
    assert (tmp_path / "empty" / "config.json").is_file()


def test_stale_staging_folder_is_replaced(tmp_path):
    from chord_pack.convert import staging_dir

    out = tmp_path / "out"
    settings = {"mode": "indexed", "block_k": 64, "format_version": FORMAT_VERSION,
                "source": {"path": str(THINKING), "repo": None, "revision": None}, "sharding": None}
    stale = staging_dir(out, settings)
    stale.mkdir()
    (stale / "model-00001-of-000002.safetensors").write_bytes(b"half a shard")
    convert(THINKING, out, "indexed", **quiet)
    assert not stale.exists()
    verify(THINKING, out, log=lambda _m: None)


def test_verify_names_the_first_differing_tensor(tmp_path):
    out = tmp_path / "out"
    convert(THINKING, out, "indexed", **quiet)
    name = "model.layers.2.mlp.experts.2.down_proj.weight_packed"
    wm = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    shard = out / wm[name]
    with safe_open(str(shard), "pt") as sf:
        tensors = {k: sf.get_tensor(k) for k in sf.keys()}
        meta = sf.metadata()
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[5] ^= 0x10
    save_file(tensors, str(shard), metadata=meta)
    with pytest.raises(ChordPackError, match=f"FAILED.*OUT {shard.name}: tensor {name}: code at") as e:
        verify(THINKING, out, log=lambda _m: None)
    assert e.value.exit_code == 1


def test_verify_catches_a_changed_passthrough_tensor(tmp_path):
    out = tmp_path / "out"
    convert(THINKING, out, "masked", **quiet)
    name = "model.layers.1.mlp.gate.e_score_correction_bias"
    shard = out / json.loads((out / "model.safetensors.index.json").read_text())["weight_map"][name]
    with safe_open(str(shard), "pt") as sf:
        tensors = {k: sf.get_tensor(k) for k in sf.keys()}
        meta = sf.metadata()
    tensors[name] = tensors[name].clone()
    tensors[name][2] = torch.nextafter(tensors[name][2], torch.tensor(1e9))
    save_file(tensors, str(shard), metadata=meta)
    with pytest.raises(ChordPackError, match=f"FAILED.*tensor {name}: byte 8 differs") as e:
        verify(THINKING, out, log=lambda _m: None)
    assert e.value.exit_code == 1


def test_single_file_checkpoint_and_progress_bar(tmp_path, capsys):
    src = tmp_path / "single"
    src.mkdir()
    (src / "config.json").write_bytes((THINKING / "config.json").read_bytes())
    save_file(load_all(THINKING), str(src / "model.safetensors"), metadata={"format": "pt"})
    out = tmp_path / "out"
    convert(src, out, "indexed", progress=True, log=lambda _m: None)
    assert "B/s" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors",
                                                     "model.safetensors.index.json"]
    verify(src, out, log=lambda _m: None)


def test_verify_and_inspect_refuse_a_non_chord_checkpoint(tmp_path):
    with pytest.raises(ChordPackError, match="not a Chord-packed checkpoint"):
        inspect_checkpoint(THINKING)
    with pytest.raises(ChordPackError, match="not a Chord-packed checkpoint"):
        verify(THINKING, THINKING)


def test_sources_that_are_not_local_folders(tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-empty")))
    with pytest.raises(ChordPackError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE"):
        convert("moonshotai/Kimi-K2-Thinking", tmp_path / "out", "indexed", **quiet)
    with pytest.raises(ChordPackError, match="no such checkpoint folder"):
        convert(str(tmp_path / "nowhere" / "x" / "y"), tmp_path / "out", "indexed", **quiet)
    with pytest.raises(ChordPackError, match="must not be inside SRC"):
        convert(THINKING, THINKING / "packed", "indexed", **quiet)
    assert not (THINKING / "packed").exists() and not any(tmp_path.iterdir())


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chord_pack.cli", *args], capture_output=True, text=True, timeout=120)


def test_cli_convert_inspect_verify(tmp_path):
    out = tmp_path / "out"
    r = run_cli("convert", str(THINKING), str(out), "--mode", "masked", "--ep-size", "2", "--ep-rank", "1")
    assert r.returncode == 0, r.stderr
    assert "12 expert projections packed (masked, BLOCK_K 128)" in r.stdout
    r = run_cli("inspect", str(out))
    assert r.returncode == 0, r.stderr
    assert "mode:            masked" in r.stdout and "EP 2, rank 1 (experts [2, 4))" in r.stdout
    r = run_cli("verify", str(THINKING), str(out))
    assert r.returncode == 0 and "verify OK" in r.stdout, r.stderr
    r = run_cli("convert", str(THINKING), str(out), "--mode", "indexed")
    assert r.returncode == 2 and r.stderr.startswith("chord-pack: error: ") and "different settings" in r.stderr


def test_cli_in_process(tmp_path, capsys):
    from chord_pack.cli import main

    out = tmp_path / "out"
    assert main(["convert", str(THINKING), str(out), "--mode", "contiguous", "--tp-size", "2",
                 "--tp-rank", "0", "--no-progress"]) == 0
    assert main(["convert", str(THINKING), str(out), "--mode", "contiguous", "--tp-size", "2",
                 "--tp-rank", "0"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert main(["inspect", "--json", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["block_k"] == 64 and summary["sharding"]["kind"] == "tp"
    assert main(["inspect", str(THINKING)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("chord-pack: error: ") and "config.json" in err
    assert main(["convert", str(THINKING), str(tmp_path / "o2"), "--mode", "indexed", "--ep-size", "2"]) == 2
    assert "--ep-size and --ep-rank must be given together" in capsys.readouterr().err
    assert main(["convert", str(THINKING), str(tmp_path / "o2"), "--mode", "indexed", "--ep-size", "2",
                 "--ep-rank", "0", "--tp-size", "2", "--tp-rank", "0"]) == 2
    assert "mutually exclusive" in capsys.readouterr().err
    assert main(["verify", str(THINKING), str(out)]) == 0
    assert "verify OK" in capsys.readouterr().out
    assert not (tmp_path / "o2").exists()
