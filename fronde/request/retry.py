"""Where a request goes when its backend failed before any byte of its answer was sent.

Nothing has reached the client yet, so the request may be sent once more (a stream
that breaks later ends with its API's in-band error instead, and is never sent again):

1. to another up host of its mode, where remote replicas serve it: the host it failed
   on counts one failed health check (:class:`~fronde.backends.affinity.Affinity`);
2. else, per mode, to another ready mode (:func:`retry_mode`);
3. else the client gets a 503 with ``Retry-After`` (:func:`unavailable`).

Only a request lost to a failed server moves (:func:`lost`); an answer of the
server's own (a 400, a timeout) would be the same elsewhere and reaches the client.
"""

from __future__ import annotations

from fronde.backends.affinity import Affinity, remote_of
from fronde.backends.pool import BackendPool
from fronde.errors import BackendConnectionError, BackendError, BackendUnavailableError
from fronde.modes import Mode
from fronde.router.engine import Decision
from fronde.router.plan import Route

__all__ = ["lost", "retry_mode", "unavailable"]


def lost(pool: BackendPool, mode: Mode, exc: BackendError, affinity: Affinity) -> bool:
    """Whether ``exc`` lost the request on ``mode``'s server, which another may take.

    A refused or dropped connection, no ready server, or a remote host's 503 (its
    llama-server loading: :func:`~fronde.backends.affinity.dropped`).
    """
    if isinstance(exc, BackendConnectionError | BackendUnavailableError):
        return True
    return affinity.on_host(pool.backends.get(mode), exc)


def unavailable(pool: BackendPool, mode: Mode, exc: BackendError) -> BackendUnavailableError:
    """The 503 (with ``Retry-After``) for a request that no server of ``mode`` could take."""
    backend = pool.backends.get(mode)
    remote = None if backend is None else remote_of(backend)
    if remote is not None:  # not ours to restart: its health checks see it come back
        return BackendUnavailableError(
            f"no replica of {remote.mode} could take the request ({exc.message}): retry"
        )
    # Every mode's server failed: the supervisor restarts it, come back then.
    return BackendUnavailableError(
        f"the llama-server of every mode failed ({exc.message}); it is being restarted: retry"
    )


def retry_mode(pool: BackendPool, decision: Decision, *, swap: bool) -> Mode | None:
    """Where a request goes when its mode failed before any byte was sent, or None.

    Forced requests are not moved (the client asked for that mode), nor are
    unsafe-for-spec ones (only baseline may serve them), nor requests under swap
    residency (``swap``: only the leased mode is sure to stay up), nor any in single
    (every mode is the one llama-server, or the hosts, that failed). Otherwise the
    plan's floor, then baseline, then any other ready mode.
    """
    plan = decision.plan
    if plan.route in (Route.FORCED, Route.UNSAFE) or swap:
        return None
    if pool.topology == "single":
        return None  # every mode is the same llama-server: no other to go to
    ready = [m for m in pool.ready_modes() if m is not plan.mode]
    for m in (plan.floor, Mode.BASELINE, *ready):
        if m is not None and m in ready:
            return m
    return None
