#!/usr/bin/env bash
# The main job, on a fresh machine: install llama-server and the model (cached),
# run the battery (8 prompts × every config, bracketed by baseline, the router
# through `fronde serve`), the five-edit agent loop, then print the invariant
# verdict and write the JSONL, charts and summary.md under runs/battery-<time>/.
#
#   ./reproduce.sh            full CPU run (3 reps, 128/256 tokens; about 50 min on 2 cores)
#   ./reproduce.sh --quick    1 rep, 64/128 tokens (about 15 min)
#
# Every figure comes from the gemma-3-270m profile (cpu-gemma-270m): the battery's prompts
# are completion-style, written for a base model. FRONDE_PROFILE picks another profile.
# Other `fronde bench battery` options pass through (see --help).
# Exit status: 0 VERDICT: PASS, 2 VERDICT: FAIL, 1 error.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh
out="runs/battery-$(date -u +%Y%m%dT%H%M%SZ)"
export FRONDE_PROFILE="${FRONDE_PROFILE:-cpu-gemma-270m}"
echo "== profile: $FRONDE_PROFILE (the battery's prompts are completion-style, for a base model)" >&2
exec .venv/bin/fronde bench battery --out "$out" "$@"
