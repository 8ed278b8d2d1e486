"""Which remote replica each upstream call of one request goes to, and its one retry.

A mode served by remote replicas (the hosts of every mode, ``remote.all``, or a mode's
own, ``remote.<mode>``: :class:`~fronde.backends.remote.RemoteMode`) sends each call to
the up replica with the fewest requests in flight. One request's calls go through one
:class:`Affinity`, which bends that rule twice:

- **A continuation stays on its host.** A call that names the hosts holding the request
  so far in their KV cache (``prefer``: the probe's slot, :mod:`fronde.request.splice`)
  goes to the first of them that is up, so it prefills only the new tokens; where none
  is up it goes to the least loaded host and prefills everything.
- **A dropped request goes once to another host.** A call that failed on a host before
  its answer began (:func:`dropped`: the connection refused or reset, or llama-server's
  503 while it loads its model) counts as one failed health check of that host
  (:meth:`RemoteMode.failed`: the hysteresis takes it down after
  :data:`~fronde.backends.remote.DOWN_AFTER` in a row), and :meth:`Affinity.elsewhere`
  says whether another host is up to send the request to once more. A timeout is not
  retried: the host may still be generating it.

A backend without remote replicas (a llama-server this Fronde started) has one URL, and
nothing here changes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fronde.backends.process import LlamaServerProcess
from fronde.backends.remote import RemoteMode
from fronde.backends.single import SharedMode
from fronde.errors import BackendConnectionError, BackendError, BackendHTTPError

__all__ = ["Affinity", "Backend", "dropped", "remote_of"]

Backend = LlamaServerProcess | RemoteMode | SharedMode
"""A mode's backend: a local llama-server child, remote replicas, or its view of the
llama-server that serves every mode."""

UNAVAILABLE_STATUS = 503
"""llama-server's status for every request while it loads its model (``unavailable_error``,
``middleware_server_state`` in ``tools/server/server-http.cpp``, b11434)."""


def remote_of(backend: Backend) -> RemoteMode | None:
    """The remote replicas behind ``backend`` (its own, or the hosts of every mode), if any."""
    inner = backend.server.process if isinstance(backend, SharedMode) else backend
    return inner if isinstance(inner, RemoteMode) else None


def dropped(exc: BackendError) -> bool:
    """Whether ``exc`` is a host dropping a request, which another host may take instead.

    A refused or reset connection, a body that broke off
    (:class:`~fronde.errors.BackendConnectionError` and its
    :class:`~fronde.errors.BackendStreamError`), or llama-server's HTTP 503. Not a
    timeout, nor any other answer of the host (a 400 would be the same elsewhere).
    """
    if isinstance(exc, BackendConnectionError):
        return True
    return isinstance(exc, BackendHTTPError) and exc.status_code == UNAVAILABLE_STATUS


@dataclass
class Affinity:
    """Where one request's upstream calls go (see the module docstring).

    Attributes:
        avoid: base URLs of the hosts the request failed on (not chosen again).
        last: the base URL of the request's latest call, or None before the first.
    """

    avoid: set[str] = field(default_factory=set[str])
    last: str | None = None

    def url(self, backend: Backend, prefer: Iterable[str] = ()) -> str:
        """The base URL of the request's next call to ``backend``, remembered as :attr:`last`.

        Args:
            backend: the mode's backend.
            prefer: base URLs whose KV cache holds the request so far (the first up wins).

        Raises:
            BackendUnavailableError: no remote replica outside :attr:`avoid` is up.
        """
        remote = remote_of(backend)
        url = backend.url if remote is None else remote.url_for(self.avoid, prefer)
        self.last = url
        return url

    def elsewhere(self, backend: Backend | None, exc: BackendError) -> bool:
        """After the request failed with ``exc`` before its answer began: send it again?

        When ``exc`` is a remote host dropping the request (:func:`dropped`), the host of
        :attr:`last` takes one failed health check and joins :attr:`avoid`. True when
        this was the request's first such failure and another host is up: the caller
        sends it once more (to one of those, as :meth:`url` picks).
        """
        remote = None if backend is None else remote_of(backend)
        if remote is None or self.last is None or not dropped(exc):
            return False
        remote.failed(self.last, exc.message)
        first = not self.avoid
        self.avoid.add(self.last)
        return first and any(r.up and r.url not in self.avoid for r in remote.replicas)

    def on_host(self, backend: Backend | None, exc: BackendError) -> bool:
        """Whether ``exc`` is a remote host of ``backend`` dropping the request."""
        if backend is None or self.last is None:
            return False
        return remote_of(backend) is not None and dropped(exc)
