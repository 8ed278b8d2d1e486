#!/usr/bin/env bash
# What the proxy itself costs: `fronde bench overhead` against the test suite's fake
# llama-server (tests/fakes/fake_llama_server.py: instant tokens, no model), so the
# figures are Fronde's and LiteLLM's own time. fronde/ never imports tests/: this
# script hands the fake over as an executable. Options pass through (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
fake=$(mktemp -d)/llama-server
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$PWD/.venv/bin/python" "$PWD/tests/fakes/fake_llama_server.py" > "$fake"
chmod +x "$fake"
exec .venv/bin/fronde bench overhead --llama-server "$fake" "$@"
