"""scripts/bootstrap.sh: redis-server and Chromium only for the tests (--test-deps).

The script runs in a copy of the repository whose .venv is already set up, with a
PATH of stubs: a root `id`, an `apt-get` and a `fronde` that write down what they are
asked, and no redis-server or Chromium, so every install it would make shows.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _stub(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def run(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, missing: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run the script in a copy of the repository; its calls go to ``tmp_path/calls.log``.

    The build tools are on PATH but ``missing``."""
    repo, stubs, log = tmp_path / "repo", tmp_path / "bin", tmp_path / "calls.log"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "bootstrap.sh", repo / "scripts")
    (repo / "pyproject.toml").write_text("[project]\n")
    (repo / ".venv" / "bin").mkdir(parents=True)
    stamp = hashlib.sha256(b"[project]\n").hexdigest()
    (repo / ".venv" / ".fronde-deps").write_text(stamp + "\n")  # dependencies installed
    _stub(repo / ".venv" / "bin" / "python", "exit 0")
    _stub(repo / ".venv" / "bin" / "fronde", f'echo "fronde $*" >> {log}')
    stubs.mkdir()
    _stub(stubs / "apt-get", f'echo "apt-get $*" >> {log}')
    _stub(stubs / "id", "echo 0")
    for tool in ("cmake", "c++", "git"):
        if tool not in missing:
            _stub(stubs / tool, "exit 0")
    for tool in ("dirname", "sha256sum", "cut", "cat"):
        real = shutil.which(tool)
        assert real is not None, tool
        (stubs / tool).symlink_to(real)
    log.touch()
    return subprocess.run(
        ["/bin/bash", str(repo / "scripts" / "bootstrap.sh"), *args],
        env={"PATH": str(stubs), "PYTHON": sys.executable, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def bootstrap(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """Run the script; the commands it ran through apt-get and fronde, one a line."""
    done = run(tmp_path, *args, env=env)
    assert done.returncode == 0, done.stderr
    return (tmp_path / "calls.log").read_text().splitlines()


def test_plain_set_up_installs_neither_redis_nor_chromium(tmp_path: Path) -> None:
    """What ./reproduce.sh and a user who only serves run: nothing for the tests."""
    calls = bootstrap(tmp_path)
    assert not [c for c in calls if c.startswith("apt-get")]
    assert calls == [
        "fronde install",
        "fronde models fetch cpu-smollm2-135m",
        "fronde models fetch cpu-gemma-270m",
    ]


def test_test_deps_installs_redis_and_chromium_as_root(tmp_path: Path) -> None:
    """What scripts/test.sh (and so .ci/run) runs."""
    calls = bootstrap(tmp_path, "--test-deps")
    installs = [c for c in calls if c.startswith("apt-get install")]
    assert installs == ["apt-get install -y -qq redis-server", "apt-get install -y -qq chromium"]
    assert calls[-1] == "fronde models fetch cpu-gemma-270m"


def test_test_deps_without_chromium_when_asked(tmp_path: Path) -> None:
    calls = bootstrap(tmp_path, "--test-deps", env={"FRONDE_NO_CHROMIUM": "1"})
    assert [c for c in calls if c.startswith("apt-get install")] == [
        "apt-get install -y -qq redis-server"
    ]


def test_no_git_installs_it_for_the_patches(tmp_path: Path) -> None:
    done = run(tmp_path, missing=("git",))
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls[:2] == ["apt-get update -qq", "apt-get install -y -qq git"]


def test_an_unknown_option_is_one_line_and_installs_nothing(tmp_path: Path) -> None:
    done = run(tmp_path, "--test")
    assert done.returncode == 1
    assert done.stderr == "bootstrap: unknown option --test (the only one is --test-deps)\n"
    assert (tmp_path / "calls.log").read_text() == ""


def test_the_test_command_asks_for_the_test_deps_and_reproduce_does_not() -> None:
    test_sh = (REPO / "scripts" / "test.sh").read_text()
    reproduce = (REPO / "reproduce.sh").read_text()
    assert "scripts/bootstrap.sh --test-deps\n" in test_sh
    assert "scripts/bootstrap.sh\n" in reproduce and "--test-deps" not in reproduce
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()
