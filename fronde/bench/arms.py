"""The arms a benchmark compares: Fronde (a mode forced, or routing) and static llama-servers.

An arm is started fresh for every block of work (:mod:`fronde.bench.protocol`), so
no n-gram pool has seen a prompt before its first request, and stopped after it.

- A **Fronde** arm runs `fronde serve` as a user runs it: with ``force`` set, only
  that mode is started and every request names it (``x-fronde-mode``); without, the
  profile's modes are started and the router decides.
- A **static** arm is one llama-server with the argv `fronde serve` gives its
  baseline (model, context, threads, slots, chat template) plus ``flags``: what a
  user would run instead of Fronde. With ``force`` set, it is the argv `fronde serve`
  gives that mode's backend (the load benchmark measures each backend alone).

``--spec-default`` in b11434 is ngram-mod with n_match 24, n_min 48 and n_max 64
(``common/arg.cpp``), which are also ngram-mod's defaults (``common/common.h``,
``common_params_speculative_ngram_mod``): the arm ``default`` stands for both
"``--spec-default``" and "ngram-mod, n_match 24". A cascade
(``--spec-type ngram-simple,ngram-mod``) asks each speculator in turn per step, the
first that drafts wins, and ngram-mod's pool learns every prompt
(``common/speculative.cpp``).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncGenerator, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fronde.bench.litellm import LITELLM_MODEL, litellm_proxy, litellm_python
from fronde.bench.serve import running_serve
from fronde.bench.workloads import Form, Item
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.modes import Mode
from fronde.runtime.install import find_llama_binary
from fronde.runtime.local import profile_of
from fronde.serving import LaunchSpec, LlamaServerProcess, plan_pool

__all__ = ["ARMS", "Arm", "Target", "arms_named", "started", "static_argv"]


@dataclass(frozen=True)
class Arm:
    """One way of serving the workload.

    Attributes:
        name: short key in records and tables (at most 9 characters, for 80 columns).
        kind: ``fronde`` (through `fronde serve`), ``static`` (one llama-server), or
            ``litellm`` (LiteLLM's proxy in front of one plain llama-server).
        force: Fronde arms: the mode every request names; None routes. Static arms:
            the mode whose backend argv is started (None: baseline's plus ``flags``).
        flags: static arms: llama-server speculation flags added to baseline's argv.
        priming: Fronde arms: send the priming workload before measuring (router warm).
        about: one line for the report's legend.
        env: Fronde arms: environment for `fronde serve` (settings such as
            ``FRONDE_RESIDENCY``), as (name, value) pairs.
        default: whether a run that names no arms runs it (``mod12`` is left out: it
            won no run of the 2026-12-01 verdicts, and Fronde's ``mod`` covers n_match).
        servers: static arms: how many llama-servers of that argv start; with more
            than one, each request goes to the least busy (:meth:`Target.server`).
        pin: a timed load block's client k names llama-server's slot k (``id_slot``)
            in every request (:func:`~fronde.bench.passes.timed_pass`).
        unflags: static arms: flags (without a value) taken out of the argv, e.g.
            ``--backend-sampling`` from the plain arm's ``backend.plain_args``.
        alone: Fronde arms with ``force``: start that mode alone (``--mode``); False
            starts every mode and only the requests name ``force`` (the one-server
            topology's plain requests beside its speculating ones).
        sets: static arms: (flag, value) pairs set in the argv last, replacing the value
            of a flag already there (``--spec-ngram-mod-n-max 16`` on a mode's argv: a
            draft-length arm of ``fronde bench load --draft-lengths``).
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
    Arm("router", "fronde", about="Fronde routing, cold (fresh servers)"),
    Arm("router-w", "fronde", priming=True, about="Fronde routing, warm (after the priming set)"),
)
"""Every arm, in table order."""


def arms_named(names: Sequence[str], *, draft: bool) -> list[Arm]:
    """The arms called ``names`` (the default ones when empty), in :data:`ARMS` order.

    Args:
        names: arm names; empty selects every arm whose ``default`` is set.
        draft: whether the profile has a draft model (else the ``draft`` arm is left out).

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

    Attributes:
        base_url: the arm's URL (the first server's with several).
        headers: sent with every request.
        model: the ``model`` every body names, when the arm needs one.
        urls: an arm of several servers: all of them (:meth:`server` picks one).
    """

    base_url: str
    headers: dict[str, str]
    model: str | None = None
    urls: tuple[str, ...] = ()
    busy: dict[str, int] = field(default_factory=dict[str, int], compare=False)

    @contextlib.contextmanager
    def server(self) -> Generator[str]:
        """The URL for one request, held until the block exits.

        ``base_url``, or of ``urls`` the one with the fewest requests in flight, the
        first on a tie: what a least-busy load balancer in front of them would do.
        """
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


def static_argv(arm: Arm, settings: Settings) -> tuple[Path, list[str]]:
    """The llama-server binary and argv a static ``arm`` starts under ``settings``.

    ``backend.plain_args`` go to the plain arm (baseline's argv) only, never to an arm
    that adds speculation flags to it; ``arm.unflags`` are taken out, then ``arm.sets``
    set (each flag's value replaced where the argv has it, else appended).

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
