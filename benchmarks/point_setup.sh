# Sourced by the one-point tools (ncu_point.sh, cta_trace.sh) after they set SIDE and SCN: the
# output folder, the bench work folder and routing, the JIT cache, Chord installed, Humming's
# wheels in their own folder for SIDE=humming, and the routing files of scenario SCN.
OUT=${OUT:-.out/ncu}; mkdir -p "$OUT"
WORK=${BENCH_WORK:-/tmp/chord-bench}; ROUTING=$WORK/routing-ncu
HSITE=${HUMMING_SITE:-/tmp/humming_site}
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit} PYTHONUNBUFFERED=1

python3 -c "import chord_kernels" 2>/dev/null \
  || python3 -m pip install -q --no-build-isolation --no-deps -e packages/chord-runtime 2>&1 | tail -3
if [[ $SIDE == humming && ! -d $HSITE/humming ]]; then
  ls .whl/*.whl >/dev/null 2>&1 || { echo "no wheels in .whl/ (carry .whl)" >&2; exit 3; }
  python3 -m pip install -q --no-index --no-deps --upgrade --target "$HSITE" .whl/*.whl 2>&1 | tail -3
fi
[[ -s $ROUTING/manifest.json ]] && grep -q "\"$SCN\"" "$ROUTING/manifest.json" \
  || python3 -m benchmarks.make_routing --dir "$ROUTING" --scenarios "$SCN" > "$OUT/routing_ncu.log" 2>&1 \
  || { cat "$OUT/routing_ncu.log"; exit 4; }
