#!/usr/bin/env bash
# The test command: set up (cached; with redis-server and Chromium, which two tests
# need), then lint, type-check and run every test, the integration tests on the real
# llama-server and gemma model included.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not integration").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --test-deps
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff check" >&2
ruff check .
echo "== ruff format --check" >&2
ruff format --check .
echo "== pyright (strict)" >&2
pyright
echo "== lint-imports (layers, no transport above backends/, no import cycle)" >&2
lint-imports --no-cache
echo "== pytest" >&2
pytest "$@"
