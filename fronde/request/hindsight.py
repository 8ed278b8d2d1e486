"""After an answer: its token ids, for the counterfactual book.

The router's counterfactual replay (:meth:`~fronde.router.engine.Router.observe`)
needs the prompt's and the answer's token ids, which an OpenAI answer does not carry
(llama-server b11434 returns ``tokens`` only on its native endpoint, and only in the
partial chunks of a stream). So once an answer has ended, the prompt is rendered and
tokenized on the backend that served it (as the probe does,
:func:`~fronde.request.segment.prompt_ids`) and the answer's text tokenized
without special tokens; a re-tokenized answer can differ from the sampled ids at a
few boundaries, which the book's calibration absorbs.

The work runs as a background task once the client has its last byte
(:data:`DELAY_S`) and, on a machine where this router is decoding something else,
once that has ended (up to :data:`IDLE_WAIT_S`): on 2 CPU cores, deferring it cut a
routed request's time outside llama-server from 26.0 to 22.0 ms (median, CPU gemma
verdicts), and a replay that runs during a decode takes cores from it. It never
touches an answer, and any failure is logged at debug level and dropped. The tasks
are kept in a :class:`Hindsight` so that shutdown can cancel them.

With parallel slots (a GPU, no decode gate) nothing waits for idleness, which many
clients at once would never give, and at most :data:`MAX_PENDING` replays are pending:
past that an answer is not replayed (the book learns from a sample), so that a burst of
short answers cannot pile up tasks in the proxy's one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from fronde.backends.client import BackendClient
from fronde.errors import FrondeError
from fronde.json_types import JSONObject, json_int
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.request.collect import collect
from fronde.request.native import Kind, max_new_tokens
from fronde.request.segment import prompt_ids
from fronde.router.engine import Decision, Router

__all__ = ["DELAY_S", "IDLE_WAIT_S", "MAX_PENDING", "Hindsight", "answer_text", "text_of"]

log = get_logger(__name__)

DELAY_S = 0.05
"""Seconds between an answer's end and its replay: the response finishes first."""

IDLE_WAIT_S = 5.0
"""Longest wait, seconds, for this router's generations to end before a replay runs."""

MAX_PENDING = 32
"""Most replays pending at once; an answer past that is not replayed."""

_IDLE_POLL_S = 0.02


async def _lines(pieces: Sequence[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


async def answer_text(kind: Kind, pieces: Sequence[bytes]) -> str | None:
    """The text of a relayed SSE answer (its content pieces joined), or None if it broke."""
    try:
        data = await collect(_lines(pieces), kind)
    except FrondeError:
        return None
    return text_of(kind, data)


def text_of(kind: Kind, data: JSONObject) -> str | None:
    """The generated text of a non-streamed OpenAI answer, or None if it has none."""
    choices = data.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(first, dict):
        return None
    if kind == "text":
        text = first.get("text")
    else:
        message = first.get("message")
        text = message.get("content") if isinstance(message, dict) else None
    return text if isinstance(text, str) else None


@dataclass(frozen=True)
class _Answered:
    """An answered request: its decision, the mode and backend that served it, its body."""

    decision: Decision
    mode: Mode
    url: str
    kind: Kind
    body: JSONObject


class Hindsight:
    """The background tasks that feed answered requests to the counterfactual book.

    Args:
        client: the HTTP client to the backends.
        router: the router whose book is fed.
        wait_idle: wait for this router's generations to end before a replay (a
            machine whose decodes share the CPU with it; see the module docstring).
        on: ``router.hindsight``; False feeds nothing (the load benchmark's
            ``single-nh`` arm measures what the feeding costs under load).
    """

    def __init__(
        self, client: BackendClient, router: Router, *, wait_idle: bool = True, on: bool = True
    ) -> None:
        self.client = client
        self.router = router
        self.wait_idle = wait_idle
        self.on = on
        self.dropped = 0
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def enabled(self) -> bool:
        """Whether answers feed a counterfactual book that compares modes.

        Not with ``router.hindsight`` off, nor with one replayable mode (``fronde serve
        --mode baseline``): then no answer is captured nor its prompt's self-overlap
        computed, since the book learns nothing
        (:meth:`~fronde.router.engine.Router.learns_from`).
        """
        book = self.router.counterfactual
        return self.on and book is not None and book.compares

    def after(
        self,
        decision: Decision,
        mode: Mode,
        url: str,
        kind: Kind,
        body: JSONObject,
        text: str | None = None,
        pieces: Sequence[bytes] = (),
    ) -> None:
        """Schedule the replay of an answered request.

        Its ``text``, or the relayed SSE ``pieces`` it is read from. No-op without a
        book, for a token-array prompt, and where the book would learn nothing from it
        (:meth:`~fronde.router.engine.Router.learns_from`: a forced request to baseline,
        say): its three calls to the backend would come during the client's next request.
        """
        if not self.enabled or (not text and not pieces):
            return
        if not self.router.learns_from(decision, mode):
            return
        if kind == "text" and not isinstance(body.get("prompt"), str):
            return  # a token-array or batched prompt: nothing to render
        if len(self._tasks) >= MAX_PENDING:
            self.dropped += 1
            return
        answered = _Answered(decision, mode, url, kind, body)
        task = asyncio.create_task(self._run(answered, text, pieces))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, a: _Answered, text: str | None, pieces: Sequence[bytes]) -> None:
        await asyncio.sleep(DELAY_S)
        deadline = time.monotonic() + (IDLE_WAIT_S if self.wait_idle else 0.0)
        # Polled: the in-flight counts are plain counters the admissions own, and a
        # replay may wait; an event would have to be wired through every admission.
        while sum(self.router.in_flight.values()) > 0 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(_IDLE_POLL_S)
        if text is None:
            text = await answer_text(a.kind, pieces)
        if not text:
            return
        try:
            prompt = await prompt_ids(self.client, a.url, a.kind, a.body)
            out = await self.client.post_json(
                a.url, "/tokenize", {"content": text, "add_special": False, "parse_special": False}
            )
        except FrondeError as exc:
            log.debug("counterfactual.skipped", id=a.decision.rid, error=exc.message)
            return
        ids = out.get("tokens")
        if not isinstance(ids, list):
            return
        generated = [json_int(t) for t in ids]
        self.router.observe(a.decision, a.mode, prompt, generated, max_new_tokens(a.body))

    async def drain(self) -> None:
        """Wait for the scheduled replays (tests; a shutdown cancels them instead)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel the replays still scheduled."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
