"""The self-draft pair: a GGUF requantized to F16 once, by its sha256, with a fake llama-quantize.

The real llama-quantize and the real pair run in tests/integration/test_draft_pair_real.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fronde.errors import FrondeError, ToolMissingError
from fronde.runtime.requant import REQUANT_DIR, requantize_once, self_draft_pair

FAKE_QUANTIZE = """#!/bin/sh
# the fake llama-quantize: --allow-requantize SRC OUT TYPE; counts its runs in $0.runs
echo run >> "$0.runs"
[ "$1" = --allow-requantize ] || { echo "needs --allow-requantize" >&2; exit 2; }
cat "$2" > "$3"
printf '%s' "$4" >> "$3"
"""


def installed(cache: Path, script: str = FAKE_QUANTIZE) -> Path:
    """A cache whose `fronde install` left ``script`` as llama-quantize; the tool's path."""
    bin_dir = cache / "llama.cpp" / "b0-cpu" / "bin"
    bin_dir.mkdir(parents=True)
    tool = bin_dir / "llama-quantize"
    tool.write_text(script)
    tool.chmod(0o755)
    (cache / "llama.cpp" / "current.json").write_text(json.dumps({"bin_dir": str(bin_dir)}))
    return tool


def runs(tool: Path) -> int:
    path = tool.with_name(tool.name + ".runs")
    return len(path.read_text().splitlines()) if path.is_file() else 0


@pytest.fixture
def q4(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "tiny.Q4_1.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF" + b"\x01" * 64)
    return path


def test_the_target_is_made_once_and_named_by_the_sources_sha(tmp_path: Path, q4: Path) -> None:
    cache = tmp_path / "cache"
    tool = installed(cache)
    pair = self_draft_pair(q4, cache)
    assert pair.made and pair.draft == q4.resolve()
    assert pair.target.parent == cache / REQUANT_DIR
    assert pair.target.name.startswith("tiny.Q4_1.") and pair.target.name.endswith(".F16.gguf")
    assert pair.target.read_bytes() == q4.read_bytes() + b"F16"
    again = self_draft_pair(q4, cache)
    assert (again.target, again.made, runs(tool)) == (pair.target, False, 1)
    assert pair.serve_args == ["--model", str(pair.target), "--draft", str(q4.resolve())]


def test_a_changed_source_gets_a_new_target(tmp_path: Path, q4: Path) -> None:
    cache = tmp_path / "cache"
    installed(cache)
    first = self_draft_pair(q4, cache).target
    q4.write_bytes(b"GGUF" + b"\x02" * 80)  # new content: new size and sha256
    second = self_draft_pair(q4, cache)
    assert second.made and second.target != first
    assert second.target.read_bytes().startswith(b"GGUF\x02")


def test_a_failed_llama_quantize_leaves_nothing(tmp_path: Path, q4: Path) -> None:
    cache = tmp_path / "cache"
    installed(cache, "#!/bin/sh\necho 'llama_model_quantize: failed' >&2\nexit 1\n")
    with pytest.raises(FrondeError, match=r"llama-quantize F16 failed \(1\): .*failed"):
        requantize_once(q4, "F16", cache)
    assert list((cache / REQUANT_DIR).iterdir()) == []  # no target, no .partial


def test_no_llama_quantize_says_to_run_fronde_install(tmp_path: Path, q4: Path) -> None:
    with pytest.raises(ToolMissingError) as caught:
        self_draft_pair(q4, tmp_path / "cache")
    message = caught.value.message
    assert "\n" not in message and "needs llama-quantize" in message
    assert message.endswith("run `fronde install`")
    assert "FRONDE_LLAMA_SERVER" not in message  # that override is llama-server's alone


def test_the_command_prints_how_to_serve_the_pair(tmp_path: Path, q4: Path) -> None:
    cache = tmp_path / "cache"
    installed(cache)

    def command() -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "fronde", "models", "self-draft", str(q4)]
        env = {**os.environ, "FRONDE_CACHE_DIR": str(cache)}
        return subprocess.run(argv, capture_output=True, text=True, env=env, check=False)

    made, again = command(), command()
    assert made.returncode == again.returncode == 0, made.stderr
    [target] = (cache / REQUANT_DIR).iterdir()
    assert made.stdout == again.stdout == f"fronde serve --model {target} --draft {q4}\n"
    assert made.stderr.strip().endswith(": written")
    assert again.stderr.strip().endswith(": already there")


def test_the_command_without_llama_quantize_is_one_line(tmp_path: Path, q4: Path) -> None:
    argv = [sys.executable, "-m", "fronde", "models", "self-draft", str(q4)]
    env = {**os.environ, "FRONDE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("fronde: error: making the F16 copy of tiny.Q4_1.gguf needs llama-q")
