"""What a llama-server says of itself in ``GET /props``: read once per base URL, kept.

Fronde reads five facts there, each of a backend's binary, flags or model:

==========================  ===============================================  ==============
fact                        where in ``/props``                              read by
==========================  ===============================================  ==============
per-request speculation     ``speculative_per_request`` (Fronde's patches)   the start check
held stop text in streams   ``stream_sends_held_stop_text`` (patch 0009)     the relay's stops
a gone client's whole       ``whole_answer_stops_for_gone_client``           whole answers
answer cancelled            (patch 0010)
the server's speculators    ``default_generation_settings.params              remote hosts
                            ["speculative.types"]`` (patch 0004)
tools in the chat template  ``chat_template_caps.supports_tools``            ``tool_choice``
==========================  ===============================================  ==============

:class:`Props` holds them typed; :class:`PropsCache` keeps one per base URL, owned by the
pool (:class:`~fronde.backends.pool.BackendPool`), which knows when a URL's server may
have changed. A read that fails is not kept: the next call asks again.

When an entry goes stale: a local llama-server Fronde restarts runs the same binary,
model and flags (a restart may take another port, which is another key), and every local
server of a pool runs the same binary and model, so a local URL's facts hold for as long
as Fronde runs. A remote llama-server's owner may restart it with other flags or another
binary: :class:`~fronde.backends.remote.RemoteMode` forgets a replica's entry at each
failed health check or dropped request (a restart fails at least one: the port is closed,
then ``/health`` answers 503 while the model loads), so the next reader asks the server
that came back. The start check
(:func:`~fronde.backends.capability.check_per_request_speculation`) reads ``/props``
fresh on purpose, since it decides whether a server may serve at all, and keeps what it
read here (:meth:`PropsCache.keep`).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from fronde.backends.client import BackendClient
from fronde.errors import BackendError
from fronde.json_types import JSON

__all__ = [
    "HELD_STOP_FLAG",
    "PER_REQUEST_FLAG",
    "PROPS_TIMEOUT_S",
    "WHOLE_STOPS_FLAG",
    "Props",
    "PropsCache",
    "read_props",
]

PER_REQUEST_FLAG = "speculative_per_request"
"""Top-level key of a patched llama-server's ``GET /props`` (true when present)."""

HELD_STOP_FLAG = "stream_sends_held_stop_text"
"""Top-level key of ``GET /props`` on a llama-server with patch 0009 (true when present)."""

WHOLE_STOPS_FLAG = "whole_answer_stops_for_gone_client"
"""Top-level key of ``GET /props`` on a llama-server with patch 0010 (true when present)."""

PROPS_TIMEOUT_S = 10.0
"""The longest one ``GET /props`` of :class:`PropsCache` may take, s (it answers at once
once the model is loaded; a busy server answers between two decode steps)."""


@dataclass(frozen=True)
class Props:
    """The facts of one llama-server's ``GET /props`` that Fronde acts on.

    Attributes:
        per_request_speculation: ``speculative_per_request`` is true (Fronde's patch
            set: a body's ``speculative.*`` fields are honoured; the start check still
            asks the server to act on them).
        held_stop_text: ``stream_sends_held_stop_text`` is true (patch 0009: a stream that
            ends at its budget sends the text held back for a partial stop match).
        whole_stops: ``whole_answer_stops_for_gone_client`` is true (patch 0010: a
            non-streamed request whose client has gone is cancelled within a second
            under any load).
        spec_types: the ``--spec-type`` names the server runs (patch 0004; empty: no
            speculation); None where ``/props`` does not show them (a stock build).
        supports_tools: ``chat_template_caps.supports_tools``; None where absent.
    """

    per_request_speculation: bool = False
    held_stop_text: bool = False
    whole_stops: bool = False
    spec_types: frozenset[str] | None = None
    supports_tools: bool | None = None

    @classmethod
    def parse(cls, data: JSON) -> Props:
        """The facts of a decoded ``/props`` body; a fact it lacks reads False or None."""
        if not isinstance(data, dict):
            return cls()
        caps = data.get("chat_template_caps")
        tools = caps.get("supports_tools") if isinstance(caps, dict) else None
        settings = data.get("default_generation_settings")
        params = settings.get("params") if isinstance(settings, dict) else None
        shown = params.get("speculative.types") if isinstance(params, dict) else None
        return cls(
            per_request_speculation=data.get(PER_REQUEST_FLAG) is True,
            held_stop_text=data.get(HELD_STOP_FLAG) is True,
            whole_stops=data.get(WHOLE_STOPS_FLAG) is True,
            # b11434 writes the list comma-joined, "none" without speculation.
            spec_types=None
            if not isinstance(shown, str)
            else frozenset(t for t in shown.split(",") if t and t != "none"),
            supports_tools=tools if isinstance(tools, bool) else None,
        )


async def read_props(client: BackendClient, base_url: str) -> Props:
    """``GET base_url/props`` now, through ``client``.

    Raises:
        BackendError: the server is unreachable, times out or answers an error.
        ValueError: the body is not JSON.
    """
    return Props.parse(await client.get_json(base_url, "/props"))


class PropsCache:
    """Per base URL, the llama-server's :class:`Props`, read once and kept.

    Args:
        client: what reads ``/props``; None: a short-lived client per read, each within
            ``timeout_s`` (the pool, which owns the cache, holds no HTTP client).
        timeout_s: the timeout of those reads, s.
    """

    def __init__(self, client: BackendClient | None = None, timeout_s: float = PROPS_TIMEOUT_S):
        self.client = client
        self.timeout_s = timeout_s
        self._known: dict[str, Props] = {}

    async def get(self, base_url: str) -> Props | None:
        """The kept props of ``base_url``, read first if none are kept.

        Returns:
            None when the read failed (nothing is kept: the next call asks again).
            Never raises.
        """
        known = self._known.get(base_url)
        if known is not None:
            return known
        try:
            if self.client is not None:
                props = await read_props(self.client, base_url)
            else:
                async with httpx.AsyncClient(timeout=self.timeout_s) as http:
                    props = await read_props(BackendClient(http), base_url)
        except (BackendError, ValueError):
            return None
        self._known[base_url] = props
        return props

    def keep(self, base_url: str, props: Props) -> None:
        """Keep ``props`` for ``base_url``, replacing what was kept (a fresh read's)."""
        self._known[base_url] = props

    def forget(self, base_url: str) -> None:
        """Drop ``base_url``'s entry (its server may have been restarted otherwise)."""
        self._known.pop(base_url, None)
