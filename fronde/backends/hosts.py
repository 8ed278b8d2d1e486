"""Remote hosts that serve every mode: ``remote = {"all" = ["http://gpu1:8080", ...]}``.

Each host runs one llama-server built with Fronde's patch set, which honours the
per-request fields (``/work/notes/spec-contract.md``); Fronde runs the single topology
over them (:mod:`fronde.backends.single`): every mode is a :class:`SharedMode` view of one
:class:`~fronde.backends.remote.RemoteMode` whose replicas are the hosts, so a request
goes to the up host with the fewest requests in flight, carrying its mode's fields, and
the health hysteresis of :mod:`fronde.backends.remote` applies.

Fronde starts nothing there, so it cannot fall back to one llama-server per mode: a
host must pass :class:`HostCheck` (the same two checks as a local single server,
:func:`~fronde.backends.single.per_request_support`) before it takes requests. At start
(:func:`start_hosts`) a host that fails is a start error naming it; a host that comes up
later and fails is kept out (``backend.replica_refused``) while the others serve.

Which modes are up: those of ``modes``, less the ones no host can draft for. A patched
llama-server's ``/props`` shows its own speculators (patch 0004:
``default_generation_settings.params["speculative.types"]``, the ``--spec-type`` list
comma-joined, ``none`` without speculation); a mode that needs one the hosts checked at
start lack is left out with the reason, and a host that comes up later must serve every
mode that is up. Where ``/props`` does not say, every mode stays, and a request of a
mode the host was not started for gets llama-server's own 400.

A host's ``/props`` is the pool's :class:`~fronde.backends.props.PropsCache` entry: the
check reads it fresh each time the host would come up, and a failed health check drops it
(its owner may restart it with other flags), so no reader acts on the host that was.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from fronde.backends.process import BackendState
from fronde.backends.props import PropsCache
from fronde.backends.remote import RemoteMode
from fronde.backends.single import SPEC_TYPES, SharedServer, per_request_support
from fronde.errors import BackendStartError
from fronde.logging import get_logger
from fronde.modes import Mode

__all__ = ["HOSTS_LABEL", "HostCheck", "start_hosts"]

log = get_logger(__name__)

HOSTS_LABEL = "remote.all"
"""How logs and errors name the hosts that serve every mode (the setting)."""

STOCK_HINT = (
    "Fronde cannot start one llama-server per mode on a remote host: run Fronde's patched "
    "llama-server there (`fronde install` builds it), or list stock llama-servers under "
    "remote.<mode>, each started with its mode's --spec-type"
)
"""What to do about a host that does not honour the per-request fields."""


@dataclass
class HostCheck:
    """The check a host passes before it takes requests (a :attr:`RemoteMode.check`).

    Attributes:
        modes: the modes the hosts serve; narrowed while :attr:`settled` is False.
        props: the pool's ``/props`` cache: the check reads a host's fresh and keeps it.
        left_out: each mode a host checked at start cannot draft for, and why.
        settled: the start is over: a host must then serve every mode of :attr:`modes`.
    """

    modes: list[Mode]
    props: PropsCache
    left_out: dict[Mode, str] = field(default_factory=dict[Mode, str])
    settled: bool = False

    async def __call__(self, url: str) -> str | None:
        """Why the host at ``url`` may not serve (None: it may). Never raises."""
        # The check reads /props fresh (the host may have come back as another binary)
        # and keeps it, so the speculators below are this host's as it runs now.
        why = await per_request_support(url, props=self.props)
        if why is not None:
            return f"does not honour per-request speculation: {why}. {STOCK_HINT}"
        shown = await self.props.get(url)
        types = None if shown is None else shown.spec_types
        if types is None:  # a build without patch 0004: every mode stays
            return None
        lacking = [m for m in self.modes if not set(SPEC_TYPES[m]) <= types]
        if not lacking:
            return None
        runs = ",".join(sorted(types)) or "none"
        needs = sorted({t for m in lacking for t in SPEC_TYPES[m]} - types)
        names = ", ".join(str(m) for m in lacking)
        if self.settled:
            return (
                f"runs --spec-type {runs}, so it cannot draft for {names} (up on the other "
                f"hosts): start it with {','.join(needs)} too"
            )
        for mode in lacking:
            self.modes.remove(mode)
            self.left_out[mode] = (
                f"{url} runs --spec-type {runs}: {mode} needs {','.join(SPEC_TYPES[mode])} "
                f"(start the hosts with it, or leave {mode} out of `modes`)"
            )
        return None


async def start_hosts(
    shared: SharedServer, hosts: RemoteMode, check: HostCheck, why: str
) -> str | None:
    """Watch the hosts until each is up, refused or unreachable; why they cannot serve.

    A host that is unreachable at start is checked when it comes up. One that a check
    refused fails the start (a list that holds a stock host is a configuration to
    fix, not a replica to route around), and so does no host up within the hosts'
    ``start_timeout_s``. Logs ``topology.chosen`` (``why``) or ``topology.failed``, and
    the modes :attr:`HostCheck.left_out` (the pool takes them out of its backends).

    Args:
        shared: the server of every mode.
        hosts: its process, the remote hosts.
        check: the hosts' check (its :attr:`~HostCheck.left_out` is read after).
        why: the plan's reason for the topology, logged with it.

    Returns:
        None when the hosts serve (``shared.checked`` set), else the reason: one line
        naming the hosts (the hosts then FAILED with it as their error).
    """
    hosts.check = check
    try:
        await hosts.start()
    except BackendStartError as exc:
        return _failed(exc.message)
    deadline = asyncio.get_running_loop().time() + hosts.start_timeout_s
    while not all(r.settled for r in hosts.replicas):
        if asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)
    check.settled = True
    for mode, reason in check.left_out.items():
        log.warning("backend.left_out", mode=str(mode), reason=reason)
    refused = [f"{r.url} {r.last_error}" for r in hosts.replicas if r.refused]
    if refused:
        failure = f"{HOSTS_LABEL}: " + "; ".join(refused)
        await hosts.stop()
        hosts.state, hosts.failure = BackendState.FAILED, failure
        return _failed(failure)
    shared.checked = True  # its modes read ready from now on
    log.info("topology.chosen", topology="single", why=why)
    return None


def _failed(why: str) -> str:
    log.error("topology.failed", topology="single", why=why)
    return why
