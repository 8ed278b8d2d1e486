#!/usr/bin/env bash
# The main job: set everything up (cached), start `fronde serve` on the default
# profile, and measure each mode's decode tok/s through Fronde against the same
# llama-server directly, interleaved in one run; print the table and a verdict.
# Exit status: 0 PASS, 2 FAIL (Fronde cost more than 5 % decode speed), 1 error.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh
mkdir -p runs
out="runs/modes-$(date -u +%Y%m%dT%H%M%SZ).json"
exec .venv/bin/fronde bench modes --max-tokens "${MAX_TOKENS:-128}" --reps "${REPS:-5}" --out "$out" "$@"
