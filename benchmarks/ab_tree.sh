#!/usr/bin/env bash
# An older commit's kernels and host package, side by side with the working tree in one sweep run
# (A/B on the same GPU, routing and minute: run-to-run spread on the H200 is up to 5-10 %, more
# than many changes). Extracts REV's csrc/ and chord_kernels/ into .ab/REV (git-ignored: carry
# ".ab" to the device with ".whl") and prints the sweep CONFIG that loads them:
#
#   bash benchmarks/ab_tree.sh 81d098a        # -> old:PYTHONPATH=.ab/81d098a/...:CHORD_CSRC_DIR=...
#   bash benchmarks/sweep.sh --scenarios tp8 --tokens 2048 -- new "$(bash benchmarks/ab_tree.sh 81d098a old)"
#
# The sweep log names the chord_kernels each config imported, so a config that silently fell
# back to the installed package shows.
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:?usage: ab_tree.sh REV [LABEL]}
LABEL=${2:-$REV}
if [[ -d .ab/$REV ]]; then DIR=.ab/$REV  # already extracted (the device copy has no .git)
else DIR=.ab/$(git rev-parse --short "$REV"); fi
if [[ ! -d $DIR ]]; then
  mkdir -p "$DIR"
  git archive "$REV" csrc packages/chord-runtime/chord_kernels | tar -x -C "$DIR"
fi
echo "$LABEL:PYTHONPATH=$DIR/packages/chord-runtime:CHORD_CSRC_DIR=$DIR/csrc"
