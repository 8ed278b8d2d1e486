#!/usr/bin/env bash
# Paired rounds of scripts/ttft_split.py, the build without patch 0008 (old) and with it
# (new) alternating, the first of each pair alternating too. Run from the checkout's root:
#   results/ttft-keepalive-cpu-smollm2-20261206/run.sh ROUNDS TAG [ttft_split args...]
# Each run's output goes to results/ttft-keepalive-cpu-smollm2-20261206/raw/TAG-rR-BUILD.txt,
# headed by `uptime` before it.
set -euo pipefail
here=results/ttft-keepalive-cpu-smollm2-20261206
rounds=$1 tag=$2; shift 2
cache=$HOME/.cache/fronde/llama.cpp
old=$cache/b11434-cpu-947a58dfa7a1-p2250b54c65c5/bin/llama-server  # 0001-0007
new=$cache/b11434-cpu-947a58dfa7a1-pf7c5eb1bb912/bin/llama-server  # 0001-0008
mkdir -p "$here/raw"
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then order="old new"; else order="new old"; fi
  for b in $order; do
    bin=$old; [[ $b == new ]] && bin=$new
    out=$here/raw/$tag-r$r-$b.txt
    { echo "uptime: $(uptime)"; echo "llama-server: $bin"; } > "$out"
    FRONDE_LLAMA_SERVER=$bin PYTHONPATH=$PWD python scripts/ttft_split.py "$@" >> "$out" 2>&1
    grep -H "paired, TTFT" "$out"
  done
done
