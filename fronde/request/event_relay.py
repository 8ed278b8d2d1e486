"""Relay the event stream of another API (Responses, Messages) from llama-server, line by line.

:class:`EventRelay` passes each line on as it comes, mended where the API needs it, and
parses only the lines that can matter: the timings, the API's final event. A stream that
breaks or closes before its final event ends with the API's own in-band error event.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable

from fronde.backends.client import UpstreamStream
from fronde.errors import BackendStreamError
from fronde.json_types import JSON, JSONObject
from fronde.logging import get_logger
from fronde.request.agent_apis import Api

__all__ = ["EventRelay"]

log = get_logger(__name__)


class EventRelay:
    """Relay the event stream of another API (:mod:`fronde.request.agent_apis`).

    Lines go to the client as they arrive, unchanged but for what the API's mender
    adds (Responses: the indices llama-server leaves out; Messages: the stop reason).
    Only the lines that can matter are parsed: one holding ``"timings"`` (reported once
    the answer has them), one that may be the API's final event, and those the mender
    may change. A stream that breaks, or closes before its final event, ends with the
    API's own in-band error event.

    Args:
        api: the API the stream speaks.
        mode: the backend's mode, for the log and the error message.
        on_timings: called with llama-server's ``timings`` when an event carries them.
        on_progress: called for each event that carries generated text.
        body: the request, from which the API's mender is made.

    Attributes:
        ended: whether the API's final event went through.
    """

    def __init__(
        self,
        api: Api,
        mode: str,
        on_timings: Callable[[JSONObject], None] | None = None,
        on_progress: Callable[[], None] | None = None,
        body: JSONObject | None = None,
    ) -> None:
        self.api = api
        self.body = body or {}
        self.mode = mode
        self.on_timings = on_timings
        self.on_progress = on_progress
        self.ended = False
        # The event's type name as a substring finds the candidates, a parse confirms
        # them (a native stream's every event holds "stop": all are parsed).
        self._final = '"stop"' if api.final is None else api.final
        self._deltas = api.delta

    def _data(self, line: str) -> None:
        if self.on_progress is not None and (
            not self._deltas or any(d in line for d in self._deltas)
        ):
            self.on_progress()
        if '"timings"' not in line and self._final not in line:
            return
        try:
            event: JSON = json.loads(line[6:])
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        timings = event.get("timings")
        if isinstance(timings, dict) and self.on_timings is not None:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self.on_timings(timings)
        if self.api.ends(event):
            self.ended = True

    def _mended(self, line: str, mend: Callable[[JSONObject], JSONObject]) -> str:
        try:
            data: JSON = json.loads(line[6:])
        except ValueError:
            return line
        if not isinstance(data, dict):
            return line
        return "data: " + json.dumps(mend(data), ensure_ascii=False)

    async def relay(self, upstream: UpstreamStream) -> AsyncIterator[bytes]:
        """Yield ``upstream``'s lines, each with its newline; an error event if it broke.

        The lines of one upstream read come joined, as one piece.

        Data events go through the API's mender, when it has one.
        """
        mend = self.api.mender(self.body) if self.api.mender is not None else None
        mends = self.api.mends
        try:
            async for batch in upstream.line_batches():
                out: list[bytes] = []
                for raw in batch:
                    if raw.startswith(b"data: {"):
                        line = raw.decode("utf-8", "replace")
                        self._data(line)
                        if mend is not None and (mends is None or mends in raw):
                            raw = self._mended(line, mend).encode()
                    out.append(raw + b"\n")
                if self.ended:  # the API's final event: llama-server has freed the slot
                    upstream.release_slot()
                yield b"".join(out)
        except BackendStreamError as exc:
            log.error("stream.broken", mode=self.mode, api=self.api.name, error=exc.message)
            yield b"\n" + self.api.error_event(
                f"backend {self.mode} failed mid-stream: {exc.cause}"
            )
            return
        if not self.ended:
            log.error("stream.truncated", mode=self.mode, api=self.api.name)
            yield b"\n" + self.api.error_event(
                f"backend {self.mode} closed the stream before its end"
            )
