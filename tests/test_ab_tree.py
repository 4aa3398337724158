"""benchmarks/ab_tree.sh: a commit's kernels and host package as a tree for ncu_ab.sh / sweep.sh,
and a candidate kept as a patch applied to a fresh copy of one (--patch)."""

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def ab_tree(tmp_path: Path, *args: str, root: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "benchmarks" / "ab_tree.sh"), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "AB_ROOT": str(root or tmp_path / "ab")})


def first_line(path: Path) -> str:
    return path.read_text().splitlines()[0]


def test_patched_tree(tmp_path):
    head = (REPO / "csrc" / "common" / "tail_split.cuh").read_text().splitlines()[0]
    patch = tmp_path / "p.diff"
    patch.write_text("--- a/csrc/common/tail_split.cuh\n+++ b/csrc/common/tail_split.cuh\n@@ -1,1 +1,2 @@\n"
                     f"+// patched by the test\n {head}\n")
    res = ab_tree(tmp_path, "HEAD", "cand", "--patch", str(patch))
    assert res.returncode == 0, res.stderr
    tree = tmp_path / "ab" / "cand"
    assert res.stdout.strip() == f"cand:PYTHONPATH={tree}/packages/chord-runtime:CHORD_CSRC_DIR={tree}/csrc"
    assert first_line(tree / "csrc" / "common" / "tail_split.cuh") == "// patched by the test"
    assert (tree / "packages" / "chord-runtime" / "chord_kernels" / "dispatch" / "__init__.py").is_file()
    # a candidate's own tests and sanitizer cases run from its tree
    assert (tree / "tests" / "gpu" / "test_grouped_gpu.py").is_file() and (tree / "scripts").is_dir()
    assert (tree / "pyproject.toml").is_file()
    # A second run starts from a fresh copy (the patch applies again), and a patch that does not
    # apply is an error that names it.
    assert ab_tree(tmp_path, "HEAD", "cand", "--patch", str(patch)).returncode == 0
    bad = tmp_path / "bad.diff"
    bad.write_text(patch.read_text().replace(f" {head}", " // no such line"))
    res = ab_tree(tmp_path, "HEAD", "cand", "--patch", str(bad))
    assert res.returncode == 3 and "bad.diff does not apply" in res.stderr


def test_plain_tree_and_usage(tmp_path):
    res = ab_tree(tmp_path, "HEAD", "base")
    assert res.returncode == 0 and res.stdout.startswith("base:PYTHONPATH=")
    assert ab_tree(tmp_path, "HEAD", "x", "--patch").returncode == 2


def test_patch_applies_inside_a_work_tree(tmp_path):
    """The trees live in the checkout's git-ignored .ab: there, a plain `git apply` of a git-format
    patch takes its paths as the enclosing repository's and skips them all without an error (the
    c4, c4b and v46 trees built on 2026-12-04 were main's code). The patch must land, and a patch
    that changes nothing fails."""
    repo = tmp_path / "checkout"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    patch = tmp_path / "p.diff"
    head = (REPO / "csrc" / "common" / "tail_split.cuh").read_text().splitlines()[0]
    # git's own format (git diff), as the candidates' patches are: a plain diff -u applied anyway
    patch.write_text("diff --git a/csrc/common/tail_split.cuh b/csrc/common/tail_split.cuh\n"
                     "--- a/csrc/common/tail_split.cuh\n+++ b/csrc/common/tail_split.cuh\n@@ -1,1 +1,2 @@\n"
                     f"+// patched by the test\n {head}\n")
    res = ab_tree(tmp_path, "HEAD", "cand", "--patch", str(patch), root=repo / ".ab")
    assert res.returncode == 0, res.stderr
    assert first_line(repo / ".ab" / "cand" / "csrc" / "common" / "tail_split.cuh") == "// patched by the test"
    empty = tmp_path / "empty.diff"
    empty.write_text("")
    res = ab_tree(tmp_path, "HEAD", "cand", "--patch", str(empty), root=repo / ".ab")
    assert res.returncode == 3, res.stderr
