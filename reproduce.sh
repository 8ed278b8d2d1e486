#!/usr/bin/env bash
# The main job, on a fresh machine: is Fronde faster than the one llama-server a user
# would run instead? Installs llama-server and the models (cached), then runs
# `fronde bench verdict`: workload A (40 prompts in 10 domains, each arm on fresh
# servers, arm order rotated over 2 repetitions) and workload B (three scripted agent
# sessions of 8 steps), for every arm: Fronde with each mode forced, the router cold
# and warm, and static llama-servers (--spec-default, the cascade
# --spec-type ngram-simple,ngram-mod, short drafts); workload A's arms run side by
# side, each prompt sent to every arm in turn. It prints
# the tables, the answer in a few lines and the verdict, and writes records.jsonl, charts
# and summary.md under runs/verdict-<profile>-<time>/ (the verdict's default --out).
#
#   ./reproduce.sh            full run (about 30 min on 2 CPU cores: 27 measured for gemma, 31 for SmolLM2)
#   ./reproduce.sh --quick    20 prompts, 48 tokens, one session (about 10 min)
#
# FRONDE_PROFILE picks the model: cpu-gemma-270m (default; a base model, prompted
# completion-style) or cpu-smollm2-135m (an instruct model, prompted as chat).
# Other `fronde bench verdict` options pass through (see --help); a run resumes
# with the same --out. Exit status: 0 VERDICT: PASS, 2 VERDICT: FAIL, 1 error.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh
export FRONDE_PROFILE="${FRONDE_PROFILE:-cpu-gemma-270m}"
exec .venv/bin/fronde bench verdict "$@"
