#!/usr/bin/env bash
# An older commit's kernels and host package, side by side with the working tree in one sweep run
# (A/B on the same GPU, routing and minute: run-to-run spread on the H200 is up to 5-10 %, more
# than many changes). Extracts REV's csrc/ and chord_kernels/ into .ab/REV (git-ignored: carry
# ".ab" to the device with ".whl") and prints the sweep CONFIG that loads them:
#
#   bash benchmarks/ab_tree.sh 81d098a        # -> old:PYTHONPATH=.ab/81d098a/...:CHORD_CSRC_DIR=...
#   bash benchmarks/sweep.sh --scenarios tp8 --tokens 2048 -- new "$(bash benchmarks/ab_tree.sh 81d098a old)"
#
# A candidate kept as a patch (benchmarks/results/sweeps/*/*.diff, against csrc/ and chord_kernels/):
#
#   bash benchmarks/ab_tree.sh HEAD v46 --patch benchmarks/results/sweeps/2026-12-04_v46_trailing_warpgroup/v46.diff
#
# extracts REV afresh into .ab/LABEL (with tests/, scripts/ and pyproject.toml) and applies the
# patch there (the tree for ncu_ab.sh: v46=.ab/v46).
# The sweep log names the chord_kernels each config imported, so a config that silently fell
# back to the installed package shows. AB_ROOT moves .ab (tests).
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:?usage: ab_tree.sh REV [LABEL] [--patch FILE]}
LABEL=${2:-$REV}
PATCH=""
if [[ $# -ge 3 ]]; then
  [[ $3 == --patch && $# -eq 4 ]] || { echo "usage: ab_tree.sh REV [LABEL] [--patch FILE]" >&2; exit 2; }
  PATCH=$(realpath "$4")
fi
ROOT=${AB_ROOT:-.ab}
if [[ -n $PATCH ]]; then
  DIR=$ROOT/$LABEL
  rm -rf "$DIR" && mkdir -p "$DIR"
  # with the tests and scripts, so a candidate's own GPU tests and sanitizer cases apply and run
  # from its tree (cd .ab/LABEL, with PYTHONPATH and CHORD_CSRC_DIR pointing at its own folders)
  git archive "$REV" csrc packages/chord-runtime/chord_kernels tests scripts pyproject.toml | tar -x -C "$DIR"
  # git apply in a folder inside a work tree (.ab is in this checkout) takes the patch's paths as
  # the enclosing repository's and silently skips them all: the ceiling keeps it a plain patch tool.
  apply() { (cd "$DIR" && GIT_CEILING_DIRECTORIES="$(dirname "$PWD")" git apply "$@" "$PATCH"); }
  apply || { echo "ab_tree.sh: $4 does not apply to $REV" >&2; exit 3; }
  apply --check --reverse 2> /dev/null || { echo "ab_tree.sh: $4 left $DIR unchanged" >&2; exit 3; }
else
  if [[ -d $ROOT/$REV ]]; then DIR=$ROOT/$REV  # already extracted (the device copy has no .git)
  else DIR=$ROOT/$(git rev-parse --short "$REV"); fi
  if [[ ! -d $DIR ]]; then
    mkdir -p "$DIR"
    git archive "$REV" csrc packages/chord-runtime/chord_kernels | tar -x -C "$DIR"
  fi
fi
echo "$LABEL:PYTHONPATH=$DIR/packages/chord-runtime:CHORD_CSRC_DIR=$DIR/csrc"
