"""benchmarks/ncu_ab.sh, the device A/B of kernel trees, run on the CPU with `python3` and `ncu`
stubs that log their calls: the runs come in ABBA order with each tree's environment, the
routing covers exactly the points asked for, and every candidate gets its table against the base."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STUB = """#!/usr/bin/env bash
echo "$(basename "$0") PYTHONPATH=${PYTHONPATH:-} CHORD_CSRC_DIR=${CHORD_CSRC_DIR:-} TUNING=${CHORD_W4A16_TUNING:-} $*" >> "$STUB_LOG"
"""


def tree(root: Path, name: str) -> Path:
    path = root / name
    (path / "csrc" / "common").mkdir(parents=True)
    (path / "packages" / "chord-runtime" / "chord_kernels").mkdir(parents=True)
    return path


def run_script(tmp_path: Path, *args: str, **extra_env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("python3", "ncu"):
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_LOG": str(log), "AB_INSTALL": "0",
           **extra_env}
    env.pop("PYTHONPATH", None)
    env.pop("CHORD_CSRC_DIR", None)
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "ncu_ab.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=60)
    return proc, log.read_text().splitlines() if log.exists() else []


def test_abba_order_environments_routing_and_tables(tmp_path):
    old, cand = tree(tmp_path, "old"), tree(tmp_path, "cand")
    out = tmp_path / "ab"
    points = "--paths grouped_masked --scenarios ep8,ep16 --tokens 128 --dists uniform,skew"
    proc, calls = run_script(tmp_path, str(out), "grouped", points, f"old={old}", "new=.", f"cand={cand}",
                             AB_ENV_cand="CHORD_W4A16_TUNING=CWG=1,STAGES=8")
    assert proc.returncode == 0, proc.stderr
    routing = [c for c in calls if "benchmarks.make_routing" in c]
    assert len(routing) == 1 and "--scenarios ep8,ep16 --tokens 128 --dists uniform,skew --seed 0" in routing[0]
    assert "--paths" not in routing[0]
    precompiles = [c for c in calls if "benchmarks.precompile_points" in c]
    assert len(precompiles) == 3 and sum("TUNING=CWG=1,STAGES=8 " in c for c in precompiles) == 1
    runs = [c for c in calls if c.startswith("ncu ")]
    labels = [c.split("--log-file ")[1].split()[0].rsplit("ncu_grouped_", 1)[1].removesuffix(".csv") for c in runs]
    assert labels == ["old", "new", "cand", "cand2", "new2", "old2"]
    for call, label in zip(runs, labels, strict=True):
        # only the candidate's AB_ENV_cand overrides reach its runs
        assert ("TUNING=CWG=1,STAGES=8 " in call) == label.startswith("cand")
        if label.startswith("new"):  # this checkout: no overrides
            assert "PYTHONPATH= CHORD_CSRC_DIR= " in call
        else:
            path = old if label.startswith("old") else cand
            assert f"PYTHONPATH={path}/packages/chord-runtime CHORD_CSRC_DIR={path}/csrc " in call
        assert "--clock-control base" in call and points in call and f"--out {out}/grouped_{label}.json" in call
    tables = [c for c in calls if "benchmarks.ncu_ab_table" in c]
    assert [t.split("--cand ")[1] for t in tables] == ["new,new2", "cand,cand2"]
    assert all("--base old,old2" in t for t in tables)
    assert (out / "status").read_text().count("run ") == 6


@pytest.mark.parametrize("args,message", [
    (("grouped", "--tokens 1", "old=."), "two trees at least"),
    (("mma", "--tokens 1", "old=.", "new=."), "family grouped or indexed"),
    (("grouped", "--tokens 1", "old=.", "nolabel"), "LABEL=PATH"),
    (("grouped", "--tokens 1", "old=.", "new-1=."), "letters, digits and _"),
    (("grouped", "--tokens 1", "old=.", "new=/nonexistent"), "no csrc/"),
])
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, args, message):
    proc, calls = run_script(tmp_path, str(tmp_path / "ab"), *args)
    assert proc.returncode == 2 and message in proc.stderr
    assert calls == []


def test_ncu_ab_table_sums_a_grouped_pair(tmp_path):
    """A grouped call that launches a pair of tile loops (dispatch.Launch.pick) is two kernels
    under ncu: the table sums them for the point and names the one that ran."""
    import json

    from benchmarks import ncu_ab_table

    points = [{"check": "ok", "path": "grouped_contiguous", "scenario": "ep16", "dist": "uniform", "tokens": 2048,
               "proj": proj, "config": config}
              for proj, config in (("gate_up", "grouped_wgmma[BN=240] tile=240x128; paired with grouped_wgmma[BN=128]"),
                                   ("down", "grouped_wgmma[BN=128] tile=128x256"))]
    (tmp_path / "grouped_a.json").write_text(json.dumps({"points": points}))
    rows = [("chord_tall", 1500.0), ("chord_short", 3.0), ("chord_short", 900.0)]
    csv_text = '"ID","Kernel Name","Metric Name","Metric Value"\n' + "".join(
        f'"{i}","{name}","gpu__time_duration.sum","{ns * 1000:.0f}"\n' for i, (name, ns) in enumerate(rows))
    (tmp_path / "ncu_grouped_a.csv").write_text(csv_text)
    got = ncu_ab_table.load(tmp_path, "grouped", "a")
    assert got == {"contiguous ep16 uniform T2048 gate_up": ("tall +pair", 1503.0),
                   "contiguous ep16 uniform T2048 down": ("short", 900.0)}
    points[1]["check"] = "fail"  # a wrong candidate or a diagnostic build: timed, and marked
    (tmp_path / "grouped_a.json").write_text(json.dumps({"points": points + [{**points[1], "check": None}]}))
    assert ncu_ab_table.load(tmp_path, "grouped", "a")["contiguous ep16 uniform T2048 down"] == (
        "short (check failed)", 900.0)
    (tmp_path / "ncu_grouped_a.csv").write_text(csv_text.rsplit("\n", 2)[0] + "\n")  # one kernel short
    with pytest.raises(SystemExit, match="2 kernels timed for 2 checked points \\(3 launches\\)"):
        ncu_ab_table.load(tmp_path, "grouped", "a")


def test_a_tree_with_this_checkouts_code_is_refused(tmp_path):
    """A candidate tree identical to the checkout (a patch that did not land) measures nothing:
    refused before anything runs, unless AB_ENV_<label> gives it its own overrides."""
    same = tmp_path / "same"
    for sub in ("csrc", "packages/chord-runtime/chord_kernels"):
        shutil.copytree(REPO / sub, same / sub, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    proc, calls = run_script(tmp_path, str(tmp_path / "ab"), "indexed", "--tokens 1", "base=.", f"cand={same}")
    assert proc.returncode == 2 and "is this checkout's code" in proc.stderr and calls == []
    proc, _ = run_script(tmp_path, str(tmp_path / "ab2"), "indexed", "--tokens 1", "base=.", f"cand={same}",
                         AB_ENV_cand="CHORD_W4A16_TUNING=STAGES=4")
    assert proc.returncode == 0, proc.stderr
