"""The single topology: one llama-server serves every mode, the mode chosen per request.

llama-server b11434 fixes its speculators per process (``--spec-type``), which is why
Fronde starts one process per mode (``per-mode``). A binary built with Fronde's patch set
honours per-request fields instead (``/work/notes/spec-contract.md``, the contract both
sides share): ``speculative.n_max`` caps a request's drafts (0: it drafts nothing) and
``speculative.types`` names which of the server's speculators may draft for it. Then one
server, started with every speculator the modes need (:func:`single_args`), serves every
mode, and a mode becomes the body fields of :func:`mode_fields`:

==============  ==========================================================
mode            fields
==============  ==========================================================
baseline        ``speculative.n_max`` 0 (and ``backend_sampling`` true where
                ``backend.plain_args`` ask for ``--backend-sampling``)
ngram-simple    ``speculative.types`` ["ngram-simple"]
ngram-mod       ``speculative.types`` ["ngram-mod"]
cascade         ``speculative.types`` ["ngram-simple", "ngram-mod"]
draft           ``speculative.types`` ["draft-simple"]
==============  ==========================================================

The names are llama.cpp's own, as ``--spec-type`` spells them
(``common_speculative_type_from_name_map``, ``common/speculative.cpp``): the draft
model's speculator is ``draft-simple``, the name the draft mode's ``--spec-type`` gives
it. The order within a list does not matter: llama.cpp walks its speculators in its
own fixed priority (``common_speculative_init``: ngram-simple, ngram-mod, then the
draft model), which is the cascade's order.

Each mode stays a mode (router, ``x-fronde-mode``, metrics, ``/fronde/v1/router``):
:class:`SharedMode` is one mode's view of the shared process, so the pool lists every
mode and they are all up or all down together. :func:`per_request_support` checks at
start that a binary honours the fields (``/props`` and one request).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx

from fronde.backends.capability import check_per_request_speculation
from fronde.backends.client import BackendClient
from fronde.backends.process import BackendState, LlamaServerProcess
from fronde.backends.props import PropsCache
from fronde.backends.remote import RemoteMode
from fronde.errors import FrondeError
from fronde.modes import Mode, SpeculationSettings, mode_args

__all__ = [
    "CHECK_TIMEOUT_S",
    "N_MAX_FIELD",
    "SPEC_TYPES",
    "STOCK_FILE",
    "TYPES_FIELD",
    "SharedMode",
    "SharedServer",
    "known_stock",
    "mode_fields",
    "per_request_support",
    "remember_stock",
    "single_args",
    "with_fields",
]

N_MAX_FIELD = "speculative.n_max"
"""A request's cap on its draft length (0: it drafts nothing), as the contract names it."""

TYPES_FIELD = "speculative.types"
"""The speculators that may draft for a request, as the contract names it."""

SPEC_TYPES: dict[Mode, tuple[str, ...]] = {
    Mode.BASELINE: (),
    Mode.NGRAM_SIMPLE: ("ngram-simple",),
    Mode.NGRAM_MOD: ("ngram-mod",),
    Mode.CASCADE: ("ngram-simple", "ngram-mod"),
    Mode.DRAFT: ("draft-simple",),
}
"""Each mode's speculators, by llama.cpp's ``--spec-type`` names (the same as
:func:`~fronde.modes.mode_args` starts its process with)."""

CHECK_TIMEOUT_S = 60.0
"""The longest each request of :func:`per_request_support` may take, s (a 48-token
generation: well under a second on 2 CPU cores once the model is loaded)."""


def single_args(
    modes: Iterable[Mode], spec: SpeculationSettings, draft_model: Path | None
) -> list[str]:
    """One llama-server argv that starts every speculator ``modes`` need.

    Each mode's flags come from :func:`~fronde.modes.mode_args`, as per-mode starts
    them, merged: the ``--spec-type`` lists are joined (each name once) and every other
    flag is kept once. No two modes set one flag today: ngram-mod and the cascade share
    ``--spec-ngram-mod-*`` with the same values, and ``--spec-draft-n-max`` /
    ``--spec-draft-p-min`` belong to the draft model's speculator alone (llama.cpp keeps
    ``speculative.draft`` and ``speculative.ngram_mod`` apart, ``common/common.h``).

    Args:
        modes: the modes the server serves (baseline adds nothing).
        spec: the speculation settings.
        draft_model: the draft GGUF, needed when ``modes`` holds the draft mode.

    Returns:
        The extra argv (empty when no mode speculates).

    Raises:
        ValueError: two modes set one flag to different values (a profile could only
            do this by hand; it is refused, not resolved silently), or the draft mode
            without a draft model.
    """
    types: list[str] = []
    flags: dict[str, str] = {}
    for mode in modes:
        args = mode_args(mode, spec, draft_model)
        for flag, value in zip(args[::2], args[1::2], strict=True):
            if flag == "--spec-type":
                types += [t for t in value.split(",") if t not in types]
            elif flags.setdefault(flag, value) != value:
                raise ValueError(f"{flag}: {flags[flag]} for one mode, {value} for {mode}")
    out = ["--spec-type", ",".join(types)] if types else []
    return out + [part for pair in flags.items() for part in pair]


def mode_fields(mode: Mode, *, backend_sampling: bool = False) -> dict[str, Any]:
    """The body fields that make a request run as ``mode`` on the shared server.

    Args:
        mode: the mode.
        backend_sampling: baseline samples on the backend (``backend.plain_args`` ask
            for ``--backend-sampling``, which on the shared server would reach every
            mode: only the requests that draft nothing get it, per request).
    """
    if mode is Mode.BASELINE:
        fields: dict[str, Any] = {N_MAX_FIELD: 0}
        if backend_sampling:
            fields["backend_sampling"] = True
        return fields
    return {TYPES_FIELD: list(SPEC_TYPES[mode])}


def with_fields(
    body: dict[str, Any], fields: Mapping[str, Any], under: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``body`` with a mode's ``fields`` set over the client's; ``body`` itself when none.

    The mode's fields win: the router chose the mode, and ``x-fronde-mode`` says so.
    ``under``: fields set beneath the client's, which a client's own field of the same
    name overrides (the draft length by load: a client's ``speculative.n_max`` stays).
    """
    if under:
        return {**under, **body, **fields}
    return {**body, **fields} if fields else body


@dataclass
class SharedServer:
    """The llama-server that serves every mode, and whether its binary passed the check.

    Until :func:`per_request_support` has passed (:attr:`checked`), a server that is up
    reads ``starting``: no request may reach it before the pool knows that it serves
    modes (``auto`` may stop it and start one server per mode instead).

    Attributes:
        process: the llama-server child, or the remote hosts that each run one
            (``remote.all``: :mod:`fronde.backends.hosts`).
        checked: its binary honours the per-request fields (set by the pool).
    """

    process: LlamaServerProcess | RemoteMode
    checked: bool = False

    @property
    def state(self) -> BackendState:
        """The process's state, ``starting`` while it is up but not checked."""
        state = self.process.state
        return BackendState.STARTING if state is BackendState.READY and not self.checked else state


@dataclass
class SharedMode:
    """One mode's view of the llama-server that serves every mode.

    It offers what the pool and the routes read of a backend (``url``, ``state``,
    ``pid``, ``last_error``), all from the one process, plus the mode's :attr:`fields`.
    The pool supervises the process itself (one supervisor, not one per view).

    Attributes:
        mode: the mode.
        server: the shared server.
        fields: the body fields of :func:`mode_fields`.
    """

    mode: Mode
    server: SharedServer
    fields: dict[str, Any] = field(default_factory=dict[str, Any])

    @property
    def state(self) -> BackendState:
        """The shared server's state (:attr:`SharedServer.state`)."""
        return self.server.state

    @property
    def url(self) -> str:
        """The shared process's base URL (remote hosts: the one with the fewest in flight)."""
        return self.server.process.url

    @property
    def port(self) -> int | None:
        """The shared process's port, or None."""
        return self.server.process.port

    @property
    def pid(self) -> int | None:
        """The shared process's PID, or None."""
        return self.server.process.pid

    @property
    def returncode(self) -> int | None:
        """The shared process's exit status once it exited."""
        return self.server.process.returncode

    @property
    def last_error(self) -> str | None:
        """Why the shared process last failed, or None."""
        return self.server.process.last_error

    async def stop(self) -> None:
        """Stop the shared process (every mode goes down with it)."""
        await self.server.process.stop()

    async def wait(self) -> int | None:
        """Wait for the shared process to exit."""
        return await self.server.process.wait()


async def per_request_support(
    url: str, timeout_s: float = CHECK_TIMEOUT_S, props: PropsCache | None = None
) -> str | None:
    """Whether the llama-server at ``url`` honours per-request speculation: None, else why not.

    The checks of :func:`~fronde.backends.capability.check_per_request_speculation` (the
    ``/props`` flag, read fresh and kept in ``props``; llama-server's own 400 for
    ``speculative.n_max`` -1; and a copy-heavy greedy request with ``speculative.n_max`` 0
    that must draft nothing), each request within ``timeout_s``. Never raises: a failure
    is a reason.
    """
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as http:
            got = await check_per_request_speculation(BackendClient(http), url, props)
    except (FrondeError, httpx.HTTPError, ValueError) as exc:
        return f"the check failed: {type(exc).__name__}: {exc}"
    return None if got.supported else got.reason


STOCK_FILE = "stock-llama-servers.json"
"""Under the cache folder: the binaries ``auto`` found not to honour the fields, so that
the next start goes to per-mode at once instead of loading the model twice."""


def _identity(binary: Path) -> str:
    """A binary's path, size and mtime: a rebuild at the same path is checked again."""
    st = binary.stat()
    return f"{binary.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def known_stock(verdicts: Path, binary: Path) -> str | None:
    """Why ``binary`` was found not to honour the fields, if an earlier start found it."""
    try:
        data = json.loads(verdicts.read_text())
        return cast("dict[str, str]", data).get(_identity(binary))
    except (OSError, ValueError, AttributeError):
        return None


def remember_stock(verdicts: Path, binary: Path, why: str) -> None:
    """Note that ``binary`` does not honour the fields (best effort: never raises)."""
    try:
        data: dict[str, str] = json.loads(verdicts.read_text()) if verdicts.is_file() else {}
        data[_identity(binary)] = f"{why} (found {time.strftime('%Y-%m-%d %H:%M')})"
        verdicts.parent.mkdir(parents=True, exist_ok=True)
        verdicts.write_text(json.dumps(data, indent=1, sort_keys=True))
    except (OSError, ValueError, TypeError):
        pass
