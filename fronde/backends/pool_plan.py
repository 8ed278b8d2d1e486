"""What a pool starts: one launch spec per local mode, or one shared by every mode.

:func:`plan_pool` turns the settings and a profile into a :class:`PoolPlan`: the
per-mode launch specs (one llama-server per mode), and, where ``backend.topology``
allows it, the one launch spec that serves every local mode (:mod:`fronde.backends.single`)
with each mode's request fields. Which of the two runs is settled when the pool
starts (``auto`` checks the binary then). :func:`remote_plan` plans a pool that needs no
local model: every mode remote, or remote hosts that serve every mode (``remote.all``).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fronde.backends.connections import connections_per_server
from fronde.backends.process import NO_CACHE_IDLE_SLOTS, LaunchSpec
from fronde.backends.single import STOCK_FILE, known_stock, mode_fields, single_args
from fronde.config import Settings
from fronde.errors import ModelError
from fronde.modes import BACKEND_SAMPLING_FLAGS, Mode, mode_args
from fronde.runtime.models import Profile, chat_template_file, model_path

__all__ = [
    "LOG_RUNS_KEPT",
    "PlanTopology",
    "PoolPlan",
    "plan_pool",
    "remote_plan",
    "run_log_dir",
]

PlanTopology = Literal["single", "per-mode", "auto"]
"""``single``: the shared spec runs; ``per-mode``: the per-mode specs run; ``auto``: the
shared spec is tried first and the per-mode specs run where the binary does not honour
the per-request fields."""

LOG_RUNS_KEPT = 10
"""How many per-run backend log folders are kept under ``<cache>/logs``."""

SINGLE_LOG = "single.log"
"""The shared llama-server's log file, beside the per-mode ``<mode>.log`` files."""


@dataclass(frozen=True)
class PoolPlan:
    """What to start: a launch spec per local mode, remote URLs, the modes left out with why.

    ``missing`` names the left-out modes whose model should be on disk and is not (a
    warning: fetch it); the others are left out by design (a profile without a draft
    model), which is information, not a fault. ``single`` is the one llama-server that
    serves every mode of ``specs`` (None: per-mode only), ``fields`` each mode's body
    fields on it, and ``topology`` which runs (``why``: how that was settled). ``hosts``
    are remote llama-servers that serve every mode of ``fields`` (``remote.all``): then
    there is nothing local, and the pool checks each host at start.
    """

    specs: dict[Mode, LaunchSpec]
    left_out: dict[Mode, str]
    remote: dict[Mode, list[str]] = field(default_factory=dict[Mode, list[str]])
    missing: frozenset[Mode] = frozenset()
    single: LaunchSpec | None = None
    fields: dict[Mode, dict[str, Any]] = field(default_factory=dict[Mode, dict[str, Any]])
    topology: PlanTopology = "per-mode"
    why: str = "backend.topology = per-mode"
    stock_file: Path | None = None
    """Where ``auto`` notes a binary that does not honour the fields (None: nowhere)."""
    hosts: tuple[str, ...] = ()


def _common_args(settings: Settings, profile: Profile, target: Path) -> list[str]:
    """The argv every llama-server of the pool gets: model, context, slots, template, extras."""
    b = settings.backend
    common = ["-m", str(target), "-c", str(b.ctx_size), "-t", str(b.threads)]
    common += ["-np", str(b.parallel)]
    # A fixed HTTP thread for every connection Fronde may open to it (connections.py).
    common += ["--threads-http", str(connections_per_server(b.parallel))]
    if not b.cache_idle_slots:
        common.append(NO_CACHE_IDLE_SLOTS)
    # --alias: responses carry the public model name, never the GGUF's path.
    common += ["--alias", settings.public_model, "--metrics", "--no-webui"]
    if profile.chat_template:
        template_file = chat_template_file(profile.chat_template, settings.models_dir)
        if template_file is not None:
            # Jinja on (b11434's default), so tools and response_format reach
            # llama.cpp's chat handlers.
            common += ["--jinja", "--chat-template-file", str(template_file)]
        else:
            # A built-in template name only works with Jinja off: under Jinja the
            # name itself ("gemma") would be rendered as the template text.
            common += ["--no-jinja", "--chat-template", profile.chat_template]
    if b.n_gpu_layers is not None:
        common += ["-ngl", str(b.n_gpu_layers)]
    return [*common, *profile.server_args, *b.extra_args]


def _draft_of(settings: Settings, profile: Profile) -> tuple[Path | None, str | None, bool]:
    """The draft model's path, else why there is none and whether it should have been there."""
    if profile.draft is None:
        why = (
            "no --draft given (fronde serve --model M.gguf --draft D.gguf)"
            if profile.is_local
            else f"profile {profile.name} has no draft model sharing the target's vocabulary"
        )
        return None, why, False
    try:
        return model_path(settings.models_dir, profile.draft, profile.name), None, False
    except ModelError as exc:
        return None, exc.message, True


def _topology(settings: Settings, local: list[Mode], binary: Path) -> tuple[PlanTopology, str]:
    """Which topology the plan runs (``auto`` until the binary is checked), and why."""
    chosen = settings.backend.topology
    if chosen == "per-mode":
        return chosen, "backend.topology = per-mode"
    if chosen == "single":
        return chosen, "backend.topology = single"
    why = settings.single_conflict()
    if why is not None:
        return "per-mode", why
    if len(local) < 2:
        return "per-mode", "one mode: one llama-server either way"
    if Mode.DRAFT in local:
        # b11434 feeds every slot's tokens to the draft model on each step
        # (common_speculative_process in update_slots), whatever a request's
        # speculative.n_max: on one server a request that drafts nothing would pay for
        # the draft model (docs/llama-patches.md). Asked for by name, single still runs.
        return "per-mode", (
            "the draft mode is up: one server would decode every request on the draft "
            "model too (backend.topology = single runs it anyway)"
        )
    stock = known_stock(settings.cache_dir / STOCK_FILE, binary)
    if stock is not None:
        return "per-mode", f"{stock}; delete {settings.cache_dir / STOCK_FILE} to check again"
    return "auto", "backend.topology = auto"


def plan_pool(settings: Settings, profile: Profile, binary: Path, log_dir: Path) -> PoolPlan:
    """Turn settings and a profile into one :class:`LaunchSpec` per runnable mode.

    Args:
        settings: Fronde settings (modes, backend and speculation parameters).
        profile: the model profile (target, optional draft, extra server args).
        binary: the llama-server executable.
        log_dir: folder for the children's logs, one ``<mode>.log`` each.

    Returns:
        The plan. The draft mode is left out when the profile has no draft model
        or its file is missing. With ``backend.topology`` single or auto, the plan
        also holds the one spec that serves every local mode.

    Raises:
        ModelMissingError: the target model is not on disk (no mode could run).
    """
    b = settings.backend
    specs: dict[Mode, LaunchSpec] = {}
    left_out: dict[Mode, str] = {}
    missing: set[Mode] = set()
    proxy_only = remote_plan(settings)
    if proxy_only is not None:
        return proxy_only
    remote = {m: urls for m, urls in settings.remote_modes.items() if m in settings.modes}
    target = model_path(settings.models_dir, profile.target, profile.name)
    common = _common_args(settings, profile, target)
    draft, no_draft, draft_missing = _draft_of(settings, profile)
    for mode in settings.modes:
        if mode in remote:
            continue
        if mode is Mode.DRAFT and draft is None:
            left_out[mode] = no_draft or "no draft model"
            if draft_missing:
                missing.add(mode)
            continue
        args = [*common, *mode_args(mode, settings.speculation, draft)]
        if mode is Mode.BASELINE:
            args += b.plain_args
        specs[mode] = LaunchSpec(mode, binary, args, log_dir / f"{mode}.log")
    topology, why = _topology(settings, list(specs), binary)
    if topology == "per-mode":
        return PoolPlan(specs, left_out, remote, frozenset(missing), why=why)
    # The one server: every mode's speculators (baseline's plain_args become its
    # requests' backend_sampling: see Settings.single_conflict for the rest).
    args = [*common, *single_args(specs, settings.speculation, draft)]
    single = LaunchSpec("single", binary, args, log_dir / SINGLE_LOG)
    sampling = any(a in BACKEND_SAMPLING_FLAGS for a in b.plain_args)
    fields = {m: mode_fields(m, backend_sampling=sampling) for m in specs}
    stock_file = settings.cache_dir / STOCK_FILE
    return PoolPlan(
        specs, left_out, remote, frozenset(missing), single, fields, topology, why, stock_file
    )


def remote_plan(settings: Settings) -> PoolPlan | None:
    """The plan of a host that only proxies (no model, binary or manifest here), or None.

    Every mode remote (``remote.<mode>``): one set of replicas per mode. Hosts that serve
    every mode (``remote.all``): ``single`` over them, each mode's requests carrying its
    :func:`~fronde.backends.single.mode_fields` as on a local single server (baseline's
    ``backend_sampling`` where ``backend.plain_args`` ask for it).
    """
    if settings.remote_hosts:
        sampling = any(a in BACKEND_SAMPLING_FLAGS for a in settings.backend.plain_args)
        fields = {m: mode_fields(m, backend_sampling=sampling) for m in Mode if m in settings.modes}
        why = f"remote.all: {len(settings.remote_hosts)} host(s) serve every mode, each "
        why += "checked for per-request speculation at start"
        hosts = tuple(settings.remote_hosts)
        return PoolPlan({}, {}, fields=fields, topology="single", why=why, hosts=hosts)
    remote = settings.remote_modes
    if all(m in remote for m in settings.modes):
        return PoolPlan({}, {}, {m: remote[m] for m in settings.modes})
    return None


def run_log_dir(cache_dir: Path) -> Path:
    """A new folder for this run's llama-server logs under ``<cache>/logs``; the oldest go."""
    root = cache_dir / "logs"
    root.mkdir(parents=True, exist_ok=True)
    runs = sorted(p for p in root.iterdir() if p.is_dir())
    for old in runs[: max(0, len(runs) - LOG_RUNS_KEPT + 1)]:
        for f in old.iterdir():
            f.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            old.rmdir()
    run = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    run.mkdir(exist_ok=True)
    return run
