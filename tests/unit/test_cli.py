"""The CLI: failures are one line that says what to fix, and exit status 1; its help;
the line `fronde serve` prints once it serves."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from fronde.backends.process import free_port
from fronde.bench.commands import BENCH_EXTRA
from fronde.cli import app, ready_line
from fronde.modes import Mode
from fronde.runtime.models import load_profile

REPO_MODELS = Path(__file__).resolve().parents[2] / "models"


def fronde(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fronde", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


def test_bad_setting_is_one_line(tmp_path: Path) -> None:
    r = fronde("serve", env={"FRONDE_BACKEND__THREADS": "0", "FRONDE_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "fronde: error: invalid setting in the FRONDE_* environment or the defaults: "
        "backend.threads: Input should be greater than or equal to 1 (got '0')"
    ]


def test_serve_without_install_says_run_install(tmp_path: Path) -> None:
    r = fronde("serve", env={"FRONDE_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 1
    assert "run `fronde install`" in r.stderr
    assert "Traceback" not in r.stderr


def test_serve_with_unknown_profile_lists_the_known(tmp_path: Path, fake_binary: Path) -> None:
    env = {"FRONDE_CACHE_DIR": str(tmp_path), "FRONDE_LLAMA_SERVER": str(fake_binary)}
    r = fronde("serve", "--profile", "nope", env=env)
    assert r.returncode == 1
    assert "no profile 'nope'" in r.stderr and "cpu-gemma-270m" in r.stderr


def test_serve_with_missing_model_says_fetch(tmp_path: Path, fake_binary: Path) -> None:
    shutil.copy(REPO_MODELS / "cpu-smollm2-135m.toml", tmp_path)
    env = {
        "FRONDE_CACHE_DIR": str(tmp_path),
        "FRONDE_LLAMA_SERVER": str(fake_binary),
        "FRONDE_MODELS_DIR": str(tmp_path),
    }
    r = fronde("serve", env=env)
    assert r.returncode == 1
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("fronde: error: smollm2-135m-instruct-q4_1 is missing")
    assert line.endswith("run `fronde models fetch cpu-smollm2-135m`")


def test_a_missing_gpu_model_names_its_profile_in_the_hint(
    tmp_path: Path, fake_binary: Path
) -> None:
    shutil.copy(REPO_MODELS / "gpu-qwen3-8b.toml", tmp_path)
    env = {
        "FRONDE_CACHE_DIR": str(tmp_path),
        "FRONDE_LLAMA_SERVER": str(fake_binary),
        "FRONDE_MODELS_DIR": str(tmp_path),
    }
    r = fronde("serve", "--profile", "gpu-qwen3-8b", env=env)
    assert r.returncode == 1
    [line] = r.stderr.strip().splitlines()
    assert line.endswith("run `fronde models fetch gpu-qwen3-8b`")


def test_models_fetch_unknown_profile(tmp_path: Path) -> None:
    r = fronde("models", "fetch", "nope")
    assert r.returncode == 1
    assert r.stderr.startswith("fronde: error: no profile 'nope'")


def _occupy(where: str) -> socket.socket:
    """A socket listening on a free port: on loopback, on every IPv4 address, or on both
    IPv4 and IPv6 (one dual-stack socket, as many servers listen)."""
    if where == "dual-stack":
        sock = socket.socket(socket.AF_INET6)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", 0))
    else:
        sock = socket.socket()
        sock.bind(("0.0.0.0" if where == "any" else "127.0.0.1", 0))  # noqa: S104 (the point)
    sock.listen()
    return sock


@pytest.mark.parametrize(
    ("where", "host"),
    [("loopback", None), ("any", None), ("dual-stack", None), ("loopback", "localhost")],
)
def test_a_port_in_use_is_one_line_before_any_backend_starts(
    tmp_path: Path, where: str, host: str | None
) -> None:
    """Fronde's line and status 1, never uvicorn's bind error and its exit status 3."""
    if where == "dual-stack" and not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    flags = ["--host", host] if host else []
    with _occupy(where) as taken:
        port = taken.getsockname()[1]
        r = fronde("serve", "--port", str(port), *flags, env={"FRONDE_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"fronde: error: {host or '127.0.0.1'}:{port} is in use: pass --port N, "
        "or stop what listens there"
    ]


def test_a_port_out_of_range_blames_the_flag() -> None:
    r = fronde("serve", "--port", "99999")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "fronde: error: --port 99999: Input should be less than or equal to 65535"
    ]


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every command and group under ``command``, itself first."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _help(*path: str) -> str:
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, prog_name="fronde")
    assert r.exit_code == 0, r.output
    return r.output


def test_serve_help_shows_its_defaults_and_click_metavars() -> None:
    text = _help("serve")
    for shown in (
        "--port INTEGER",
        "[default: 8080]",
        "[default: 127.0.0.1]",
        "[default: cpu-smollm2-135m]",
        "--model PATH",
        "--mode [baseline|ngram-simple|ngram-mod|cascade|draft]",
    ):
        assert shown in text
    assert "<" not in text


@pytest.mark.parametrize(
    "path", list(_commands(typer.main.get_command(app))), ids=lambda p: " ".join(p) or "fronde"
)
def test_every_help_fits_80_columns_keeps_its_defaults_and_no_python_types(
    path: tuple[str, ...],
) -> None:
    """No ``<bool>``, ``<int>``, ``<list[str]>``; a ``[default: ...]`` written in a help
    text is shown, not taken for rich markup; a list of commands is not cut with "..."."""
    text = _help(*path)
    assert re.findall(r"<[\w|\[\].-]+>", text) == []
    assert [line for line in text.splitlines() if len(line) > 80] == []
    flat = " ".join(text.split())
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    for param in command.params:
        for written in re.findall(r"\[default: [^\]]*\]", param.help or ""):
            assert " ".join(written.split()) in flat
    for sub in getattr(command, "commands", {}).values():
        assert " ".join(sub.get_short_help_str(1000).split()) in flat


def _fake_profile_env(tmp_path: Path, fake_binary: Path, load_s: float) -> dict[str, str]:
    """Environment for `fronde serve` on the default profile, backends faked.

    The GGUF is a sparse file of the manifest's size (the fake reads none of it); each
    fake backend answers /health 503 for ``load_s`` seconds, as a model loads.
    """
    shutil.copy(REPO_MODELS / "cpu-smollm2-135m.toml", tmp_path)
    target = load_profile(tmp_path, "cpu-smollm2-135m").target
    with (tmp_path / target.file).open("wb") as f:
        f.truncate(target.size or 1)
    return {
        "FRONDE_CACHE_DIR": str(tmp_path),
        "FRONDE_MODELS_DIR": str(tmp_path),
        "FRONDE_LLAMA_SERVER": str(fake_binary),
        "FRONDE_LOG_FORMAT": "json",
        "FRONDE_BACKEND__EXTRA_ARGS": json.dumps(["--fake-load-s", str(load_s)]),
    }


def _read_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline() if ready else ""


def test_serve_prints_one_ready_line_once_the_floor_serves(
    tmp_path: Path, fake_binary: Path
) -> None:
    """While the backends load, /health is 503, the port is already held (a second
    serve gets the one line) and stdout is silent; then one line names the base URL,
    the live page and the modes up, and /health is 200 at once."""
    port = free_port()
    env = {**os.environ, **_fake_profile_env(tmp_path, fake_binary, load_s=2.0)}
    with (tmp_path / "stderr.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fronde", "serve", "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        statuses: list[int] = []
        deadline = time.monotonic() + 30
        line = ""
        while not line and time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):  # not listening yet
                statuses.append(httpx.get(f"{url}/health", timeout=5).status_code)
            line = _read_line(proc, 0.2)
        assert line, "no ready line within 30 s"
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        assert 503 in statuses  # the line came after the load, not when uvicorn started
        modes = [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE]
        assert line.rstrip("\n") == ready_line(url, modes)
        assert f"{url}/v1 " in line and f"{url}/ui " in line
        assert line.rstrip("\n").endswith("modes up: baseline, ngram-simple, ngram-mod, cascade")
        second = fronde("serve", "--port", str(port), env=env)
        assert second.returncode == 1
        assert second.stderr.strip().splitlines() == [
            f"fronde: error: 127.0.0.1:{port} is in use: pass --port N, or stop what listens there"
        ]
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)
    assert rest == ""  # one line on stdout, once
    events = [json.loads(x) for x in (tmp_path / "stderr.log").read_text().splitlines()]
    [left] = [e for e in events if e["event"] == "backend.left_out"]
    assert (left["mode"], left["level"]) == ("draft", "info")  # by design, not a warning
    [ready] = [e for e in events if e["event"] == "serve.ready"]
    assert (ready["base_url"], ready["ui"]) == (f"{url}/v1", f"{url}/ui")


def test_bench_verdict_reads_its_settings_file_from_config(tmp_path: Path) -> None:
    """--config is the settings file, as on every command (the old battery made it a filter)."""
    missing = tmp_path / "nope.toml"
    r = fronde("bench", "verdict", "--config", str(missing), "--out", str(tmp_path / "out"))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [f"fronde: error: config file not found: {missing}"]


def test_version_names_fronde_and_the_pinned_llama_cpp_build() -> None:
    from fronde import __version__

    r = fronde("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"fronde {__version__} (llama.cpp b11434)"


def test_bench_help_maps_each_question_to_its_command_and_time() -> None:
    """`fronde bench --help` says which question each benchmark answers and how long it takes."""
    from fronde.bench.commands import BENCH_MAP, bench_app

    names = [c.name or "" for c in bench_app.registered_commands]
    assert names == list(BENCH_MAP)  # every command in the map, in its order
    assert names[0] == "verdict"
    for name, line in BENCH_MAP.items():
        assert "?" in line or name == "report", name
        assert "2 cores: " in line or name == "report", name
    r = fronde("bench", "--help", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    listed = r.stdout.split("Commands:")[1]
    first = [
        line.split()[0] for line in listed.splitlines() if line.startswith("  ") and line[2] != " "
    ]
    assert first == names  # in the map's order
    flat = " ".join(r.stdout.split())
    for name in names:
        assert f"{name} {BENCH_MAP[name]}" in flat, name  # wrapped between words only
    assert "Measure decode speed" not in r.stdout
    assert "./reproduce.sh runs it" in flat


def test_bench_verdict_help_names_the_folder_it_writes_by_default() -> None:
    r = fronde("bench", "verdict", "--help", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    flat = re.sub(r"-\s+", "-", " ".join(r.stdout.split()))  # click wraps after a hyphen
    assert "[default: runs/verdict-PROFILE-UTCTIME, new each run]" in flat


def test_a_benchmark_without_the_bench_extra_says_how_to_install_it(tmp_path: Path) -> None:
    # As if only `pip install .` had run: the bench extra's packages cannot be imported.
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in sorted(BENCH_EXTRA))
    code = (
        f"import sys; {blocked}; sys.argv = ['fronde', 'bench', 'report', {str(tmp_path)!r}]; "
        "from fronde.cli import main; main()"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 1
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("fronde: error: ")
    assert line.endswith(
        "is missing: the benchmarks need the bench extra (pip install 'fronde[bench]')"
    )
    r = fronde("--help")  # serving's commands still load without it
    assert r.returncode == 0


def test_the_bench_extra_is_what_only_the_benchmarks_import() -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    bench = pyproject["project"]["optional-dependencies"]["bench"]
    names = {re.split(r"[<>=;\[ ]", req, maxsplit=1)[0] for req in bench}
    assert names == BENCH_EXTRA
    serving = {
        re.split(r"[<>=;\[ ]", req, maxsplit=1)[0] for req in pyproject["project"]["dependencies"]
    }
    assert not names & serving
    assert "fronde[bench]" in pyproject["project"]["optional-dependencies"]["dev"]
