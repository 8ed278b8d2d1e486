"""The arms a benchmark compares: Fronde (a mode forced, or routing) and static llama-servers.

Every arm is started fresh for each block of work and stopped after it. A **Fronde**
arm runs `fronde serve` as a user runs it: ``force`` starts only that mode and every
request names it (``x-fronde-mode``); without, the router decides. A **static** arm is
one llama-server with the argv `fronde serve` gives baseline plus ``flags``, or, with
``force``, the argv it gives that mode's backend. ``--spec-default`` in b11434 is
ngram-mod with n_match 24, n_min 48, n_max 64 (``common/arg.cpp``); a cascade
(``--spec-type ngram-simple,ngram-mod``) asks each speculator in turn per step.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncGenerator, Generator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from fronde.bench.serve import LITELLM_MODEL, litellm_proxy, litellm_python, running_serve
from fronde.bench.workloads import Form, Item
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.modes import Mode
from fronde.runtime.install import find_llama_binary
from fronde.runtime.local import profile_of
from fronde.serving import NO_CACHE_IDLE_SLOTS, LaunchSpec, LlamaServerProcess, plan_pool

__all__ = [
    "ARMS",
    "NO_HINDSIGHT",
    "PINNED_CIS",
    "Arm",
    "Target",
    "arms_named",
    "started",
    "static_argv",
]


@dataclass(frozen=True)
class Arm:
    """One way of serving the workload.

    Attributes:
        name: short key in records and tables (at most 9 characters).
        kind: ``fronde`` (`fronde serve`), ``static`` (llama-server) or ``litellm``
            (LiteLLM's proxy in front of a plain llama-server).
        force: Fronde: the mode every request names (None routes); static: the mode
            whose backend argv is started (None: baseline's plus ``flags``).
        flags: static: speculation flags added to baseline's argv; ``unflags`` taken out
            of it; ``sets`` (flag, value) pairs replacing a value or appended.
        priming: Fronde: send the priming workload before measuring (router warm).
        about: one line for the report's legend.
        env: Fronde: environment for `fronde serve`, as (name, value) pairs.
        default: whether a run that names no arms runs it.
        servers: static: how many llama-servers of that argv; each request goes to the
            least busy (:meth:`Target.server`).
        pin: a timed load block's client k names slot k (``id_slot``).
        alone: Fronde with ``force``: start that mode alone (``--mode``); False starts
            every mode and only the requests name ``force``.
    """

    name: str
    kind: Literal["fronde", "static", "litellm"]
    force: Mode | None = None
    flags: tuple[str, ...] = ()
    priming: bool = False
    about: str = ""
    env: tuple[tuple[str, str], ...] = ()
    default: bool = True
    servers: int = 1
    pin: bool = False
    unflags: tuple[str, ...] = ()
    alone: bool = True
    sets: tuple[tuple[str, str], ...] = ()

    @property
    def routed(self) -> bool:
        """Whether Fronde's router decides (a Fronde arm with no forced mode)."""
        return self.kind == "fronde" and self.force is None

    @property
    def reachable(self) -> bool:
        """Whether the router could serve a request this way (a forced Fronde mode)."""
        return self.kind == "fronde" and self.force is not None


PINNED_CIS = Arm(
    "pinned-cis",
    "static",
    pin=True,
    unflags=(NO_CACHE_IDLE_SLOTS,),
    about="`pinned` with llama-server's own `--cache-idle-slots` (every idle slot saved to "
    "the prompt cache at each new task; Fronde's servers and the other arms turn it off)",
)
"""``pinned ÷ pinned-cis`` (``pinned``: :data:`fronde.bench.load.PINNED`) is what
``backend.cache_idle_slots = false`` gives a server whose clients pin their slots
(:data:`~fronde.backends.process.NO_CACHE_IDLE_SLOTS`)."""

NO_HINDSIGHT = ("FRONDE_ROUTER__HINDSIGHT", "false")
"""The environment pair that turns ``router.hindsight`` off: no answer feeds the book."""

_ROUTER = Arm("router", "fronde", about="Fronde routing, cold (fresh servers)")


def _router_with(name: str, setting: tuple[str, str], about: str) -> Arm:
    """The cold router arm with one setting changed, run only when named."""
    return replace(_ROUTER, name=name, env=(setting,), default=False, about=about)


ARMS: tuple[Arm, ...] = (
    Arm("base", "fronde", Mode.BASELINE, about="Fronde, baseline forced (plain decoding)"),
    Arm("simple", "fronde", Mode.NGRAM_SIMPLE, about="Fronde, ngram-simple forced"),
    Arm(
        "mod",
        "fronde",
        Mode.NGRAM_MOD,
        about="Fronde, ngram-mod forced (n_match 24, n_min 16, n_max 32 by default)",
    ),
    Arm(
        "casc",
        "fronde",
        Mode.CASCADE,
        about="Fronde, cascade forced (ngram-simple, then ngram-mod as in `mod`)",
    ),
    Arm("draft", "fronde", Mode.DRAFT, about="Fronde, draft model forced"),
    Arm(
        "plain", "static", about="llama-server, plain decoding (no speculation flag)", default=False
    ),
    Arm(
        "default",
        "static",
        flags=("--spec-default",),
        about="llama-server --spec-default (= ngram-mod n_match 24, n_min 48, n_max 64)",
    ),
    Arm(
        "cascade",
        "static",
        flags=("--spec-type", "ngram-simple,ngram-mod"),
        about="llama-server --spec-type ngram-simple,ngram-mod",
    ),
    Arm(
        "mod12",
        "static",
        flags=("--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "12"),
        about="llama-server ngram-mod, n_match 12",
        default=False,
    ),
    Arm(
        "short",
        "static",
        flags=(
            *("--spec-type", "ngram-mod"),
            *("--spec-ngram-mod-n-min", "16", "--spec-ngram-mod-n-max", "32"),
        ),
        about="llama-server ngram-mod, short drafts (n_min 16, n_max 32)",
    ),
    _ROUTER,
    Arm("router-w", "fronde", priming=True, about="Fronde routing, warm (after the priming set)"),
    _router_with(
        "router-nh",
        NO_HINDSIGHT,
        "Fronde routing, cold, router.hindsight off: what feeding the book costs",
    ),
    _router_with(
        "router-m",
        ("FRONDE_ROUTER__PREDICT_MISSES", "always"),
        "Fronde routing, cold, a predicted mode also clears the book's miss on it",
    ),
    _router_with(
        "router-z0",
        ("FRONDE_ROUTER__PREDICT_SIGMAS", "0"),
        "Fronde routing, cold, router.predict_sigmas 0: the bucket's point prediction alone",
    ),
    _router_with(
        "router-fixc",
        ("FRONDE_ROUTER__FIT_DRAFT_COST", "false"),
        "Fronde routing, cold, router.fit_draft_cost off: router.draft_cost for every mode",
    ),
)
"""Every arm, in table order."""


def arms_named(names: Sequence[str], *, draft: bool) -> list[Arm]:
    """The arms called ``names`` (the default ones when empty), in :data:`ARMS` order.

    Without a ``draft`` model the ``draft`` arm is left out.

    Raises:
        FrondeError: a name that is no arm (the message lists them).
    """
    known = {a.name: a for a in ARMS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise FrondeError(f"no arm {', '.join(unknown)}; arms: {', '.join(known)}")
    chosen = [a for a in ARMS if a.name in names or (not names and a.default)]
    return [a for a in chosen if draft or a.force is not Mode.DRAFT]


@dataclass(frozen=True)
class Target:
    """A started arm: where to send requests, with which headers and model name.

    ``base_url`` is the first server's; ``urls`` all of them when there are several;
    ``model`` the name every body gives, when the arm needs one.
    """

    base_url: str
    headers: dict[str, str]
    model: str | None = None
    urls: tuple[str, ...] = ()
    busy: dict[str, int] = field(default_factory=dict[str, int], compare=False)

    @contextlib.contextmanager
    def server(self) -> Generator[str]:
        """The URL for one request, held until the block exits: the least busy of ``urls``."""
        if not self.urls:
            yield self.base_url
            return
        url = min(self.urls, key=lambda u: self.busy.get(u, 0))
        self.busy[url] = self.busy.get(url, 0) + 1
        try:
            yield url
        finally:
            self.busy[url] -= 1

    def body(self, item: Item, form: Form, max_tokens: int) -> dict[str, Any]:
        """``item``'s request body for this target (its model name when it needs one)."""
        body = item.body(form, max_tokens)
        return body | {"model": self.model} if self.model else body


@contextlib.asynccontextmanager
async def started(
    arm: Arm, settings: Settings, config_file: Path | None, log_dir: Path
) -> AsyncGenerator[Target]:
    """Start ``arm`` on fresh servers; stop everything on exit (also after a failure).

    Raises:
        FrondeError: a server did not start (``BackendStartError`` is one).
    """
    if arm.kind == "static":
        async with contextlib.AsyncExitStack() as stack:
            urls = [
                await stack.enter_async_context(_static(arm, settings, log_dir, k))
                for k in range(arm.servers)
            ]
            yield Target(urls[0], {}, urls=tuple(urls) if len(urls) > 1 else ())
        return
    if arm.kind == "litellm":
        async with _static(arm, settings, log_dir) as url:
            proxy = litellm_proxy(litellm_python(settings.cache_dir), url)
            base = await asyncio.to_thread(proxy.__enter__)
            try:
                yield Target(base, {}, LITELLM_MODEL)
            finally:
                await asyncio.to_thread(proxy.__exit__, None, None, None)
        return
    extra: tuple[str, ...] = ("--profile", settings.profile) if settings.model is None else ()
    if arm.force is not None and arm.alone:
        extra += ("--mode", str(arm.force))
    timeout_s = settings.backend.start_timeout_s + 30
    # running_serve polls synchronously; a thread keeps the event loop free.
    cm = running_serve(config_file, timeout_s, extra, env=dict(arm.env))
    serve = await asyncio.to_thread(cm.__enter__)
    try:
        yield Target(serve.base_url, {"x-fronde-mode": str(arm.force)} if arm.force else {})
    finally:
        await asyncio.to_thread(cm.__exit__, None, None, None)
        await asyncio.to_thread(_keep_log, serve.log, log_dir)


def _keep_log(log: Path, log_dir: Path) -> None:
    """Copy a Fronde arm's log beside its block's llama-server logs, as ``fronde-serve.log``.

    ``server.stamps`` lines, when on, are read from there (``scripts/gpu/stamps_of.py``).
    Only a regular file is copied (a log given as ``/dev/null`` is not), and never moved:
    the arm's own file stays where ``running_serve`` put it. A copy that fails is skipped.
    """
    if not log.is_file():
        return
    with contextlib.suppress(OSError):
        log_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, log_dir / "fronde-serve.log")


THREADS_HTTP = "--threads-http"
"""llama-server's flag for its fixed HTTP threads."""


def static_argv(arm: Arm, settings: Settings) -> tuple[Path, list[str]]:
    """The llama-server binary and argv a static ``arm`` starts under ``settings``.

    ``backend.plain_args`` go to no arm that adds speculation flags, and none gets the
    ``--threads-http`` Fronde gives the servers it starts
    (:mod:`fronde.backends.connections`): a static arm is the server a user runs.

    Raises:
        FrondeError: llama-server is not installed, or the model is missing.
    """
    binary = find_llama_binary(settings.cache_dir, settings.llama_server)
    mode = arm.force or Mode.BASELINE
    update: dict[str, Any] = {"modes": [mode]}
    if any(f.startswith("--spec") for f in arm.flags):
        # A speculative static arm: baseline's argv without its plain-only flags.
        update["backend"] = settings.backend.model_copy(update={"plain_args": []})
    plan = plan_pool(
        settings.model_copy(update=update),
        profile_of(settings),
        binary,
        Path(tempfile.gettempdir()),
    )
    if mode not in plan.specs:
        raise FrondeError(f"arm {arm.name}: {plan.left_out.get(mode, f'no {mode} backend')}")
    args = [a for a in plan.specs[mode].args if a not in arm.unflags]
    if THREADS_HTTP in args:  # Fronde's own setting for its servers, not a user's
        at = args.index(THREADS_HTTP)
        del args[at : at + 2]
    for flag, value in arm.sets:
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return binary, [*args, *arm.flags]


@contextlib.asynccontextmanager
async def _static(arm: Arm, settings: Settings, log_dir: Path, k: int = 0) -> AsyncGenerator[str]:
    binary, args = static_argv(arm, settings)
    name = f"{arm.name}-{k}" if k else arm.name  # the k-th server of a several-server arm
    spec = LaunchSpec(name, binary, args, log_dir / f"{name}.log")
    proc = LlamaServerProcess(spec, start_timeout_s=settings.backend.start_timeout_s)
    try:
        await proc.start()
        yield proc.url
    finally:
        await proc.stop()
