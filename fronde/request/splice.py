"""Probe-and-continue: the probe's tokens are part of the answer.

For a novel request the router generates the first ``probe_tokens`` on the
aggressive candidate and measures its decode tok/s. The first time a class is
seen the floor has no EMA yet, so the floor generates the *next* ``probe_tokens``
(also part of the answer: nothing is thrown away). The faster side, with the
candidate needing ``margin`` × the floor, then continues to the end.

**The splice invariant.** The answer is the text one backend would have written
over the same token ids; a hand-over neither loses nor invents text:

- Every hand-over sends token ids (the prompt's ids plus every id generated so
  far), never text, so nothing is re-tokenized differently: the chat template is
  rendered with ``/apply-template``, tokenized once with ``/tokenize``, and each
  segment asks ``/completion`` for ``return_tokens``.
- **A segment continues on its own slot.** A segment sent to a llama-server that ran
  an earlier segment of the answer names that segment's slot (``id_slot``, learned from
  its events) with ``cache_prompt`` on, and the slot is kept from other requests
  (:meth:`~fronde.backends.slots.SlotPins.keep`) until the answer ends: the server
  prefills only the tokens that are new, not the prompt again. In the single topology
  (one llama-server serves every mode, :mod:`fronde.backends.single`) that is every
  hand-over: the floor continues from the candidate's KV cache. Over several remote
  hosts (``remote.all``, or a mode's replicas) a segment goes back to a host that ran an
  earlier one while it is up (:class:`~fronde.backends.affinity.Affinity`); if that
  host went down, another takes the segment and prefills the whole prompt. Per mode, a
  hand-over to another server still prefills the whole prompt there.
- Each segment carries its mode's request fields on a server of every mode
  (:meth:`~fronde.backends.pool.BackendPool.fields`).
- Every segment **streams** from its backend, also for a client that wants one JSON
  answer: llama-server b11434 stops a streamed task as soon as its connection closes
  and runs a non-streamed one to the end, so a client that leaves must find a stream
  to close. The probe's text reaches the client when the probe ends (48 tokens:
  about 1 s on 2 CPU cores, 0.1 s on an H200); the last segment streams on.
- In a stream, a token that ends inside a multi-byte character gets no event, so
  its id never arrives. A segment that lost ids (``predicted_n`` above the ids seen)
  is continued from its text tokenized again: the text stays whole, though its ids
  may be split differently from the model's own.
- ``stop`` strings are matched by Fronde alone, over the whole answer
  (:class:`~fronde.request.stops.StopMatcher`, llama-server's own rule): a string that
  begins in one segment and ends in the next is found, and text held back as a
  partial match when a segment hits its ``n_predict`` is kept. Segments are sent
  without ``stop`` (llama-server would match within one segment only, and drop the
  text it held back at a stream's budget); when a string matches, Fronde closes the
  segment's stream, which stops its generation. ``timings_per_token`` keeps the
  timings of a segment cut so.
- A final ``assistant`` message is a prefill: llama-server continues it, and its
  chat endpoint returns the prefill followed by the continuation. The splice does
  the same (:attr:`Splice.prefix`).

Known limits: a character whose bytes are split between two segments reads U+FFFD
(a stream never sends the bytes of an unfinished character at its end); two stop strings
completed by the two tokens of one such event are told apart by where they start, not by
which completed first (:mod:`fronde.request.stops`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from fronde.backends.client import BackendClient
from fronde.backends.pool import BackendPool
from fronde.backends.single import with_fields
from fronde.json_types import JSONObject, json_int
from fronde.modes import Mode
from fronde.request.admission import Admission
from fronde.request.native import Kind, max_new_tokens, segment_params
from fronde.request.segment import Segment, assistant_prefill, prompt_ids, segment_stream
from fronde.request.stops import StopMatcher
from fronde.router.engine import Decision, Router
from fronde.router.plan import Route
from fronde.router.policy import hand_over_pays
from fronde.timings import Timings

__all__ = ["Splice"]


class Splice:
    """One probe-and-continue generation.

    Call :meth:`start` before answering (it runs the probe, so a refusal such as a
    prompt over the context is still a plain HTTP error), then iterate :meth:`run`
    for the rest of the text.

    Args:
        client: the backend client.
        pool: backends by mode.
        admission: the request's admission (its router and PROBE decision; it
            counts each segment in flight).
        kind: chat or text completion.
        body: the OpenAI request body.
        stream: stream the last segment (the client streams).
        on_switch: called with the winner once decided (for logs and headers).

    Raises:
        ValueError: ``decision`` is not a PROBE with a floor.
    """

    def __init__(
        self,
        client: BackendClient,
        pool: BackendPool,
        admission: Admission,
        kind: Kind,
        body: JSONObject,
        *,
        stream: bool = False,
        on_switch: Callable[[Mode], None] | None = None,
    ) -> None:
        decision = admission.decision
        if (
            decision is None
            or decision.plan.route is not Route.PROBE
            or decision.plan.floor is None
        ):
            raise ValueError("Splice needs a PROBE decision with a floor")
        self.client, self.pool, self.admission = client, pool, admission
        self.router: Router = admission.router
        self.decision: Decision = decision
        self.body = body
        self.kind: Kind = kind
        self.stream = stream
        self.on_switch = on_switch
        self.params = segment_params(body)
        self.budget = max_new_tokens(body)
        stops = self.params.get("stop", [])  # a list of strings (segment_params)
        self.matcher = StopMatcher(
            [s for s in stops if isinstance(s, str)] if isinstance(stops, list) else []
        )
        self.prefix = assistant_prefill(kind, body)
        """Text the answer starts with: a final assistant message that is continued."""
        self.segments: list[Segment] = []
        self.slots: dict[str, int] = {}
        """The slot of each backend (base URL) that ran a segment, kept until the end."""
        self.prompt: list[int] = []
        self._ready: list[str] = []  # released text not yet handed to the caller

    @property
    def tokens(self) -> list[int]:
        """Every token id generated so far, in order."""
        return [t for s in self.segments for t in s.tokens]

    @property
    def completion_tokens(self) -> int:
        """Tokens generated over all segments, each counted once."""
        return sum(s.generated for s in self.segments)

    @property
    def text(self) -> str:
        """The answer so far: the prefill, then the text released by the stop matcher."""
        return self.prefix + self.matcher.released

    @property
    def finish_stop_type(self) -> str | None:
        """``word`` when a stop string ended the answer, else the last segment's ``stop_type``."""
        if self.matcher.stopped:
            return "word"
        return self.segments[-1].stop_type if self.segments else None

    def _remaining(self) -> int | None:
        return None if self.budget is None else self.budget - self.completion_tokens

    def _finished(self) -> bool:
        if self.matcher.stopped:
            return True
        last = self.segments[-1]
        remaining = self._remaining()
        # A full context ends the answer as it ends one backend's run ("length"): a
        # hand-over would send llama-server a prompt it refuses.
        if last.truncated:
            return True
        return last.stop_type != "limit" or (remaining is not None and remaining <= 0)

    def _release(self, piece: str) -> None:
        out = self.matcher.feed(piece)
        if out:
            self._ready.append(out)

    def _end_segment(self, seg: Segment) -> None:
        """After a segment: at the end of the answer, release what was held back."""
        if self.matcher.stopped:
            return
        remaining = self._remaining()
        if seg.stop_type != "limit" or (remaining is not None and remaining <= 0):
            out = self.matcher.flush()
            if out:
                self._ready.append(out)

    async def prepare(self) -> None:
        """Render and tokenize the prompt on the candidate backend (before any byte is sent).

        Raises:
            BackendError, InvalidRequestError: as :func:`prompt_ids`.
        """
        url = self.admission.affinity.url(self.pool.get(self.decision.plan.mode))
        self.prompt = await prompt_ids(self.client, url, self.kind, self.body)

    def _n_next(self) -> int:
        probe_n = self.router.policy.probe_tokens
        remaining = self._remaining()
        return probe_n if remaining is None else min(probe_n, remaining)

    async def _context(self) -> list[int]:
        """The ids a next segment continues from: the prompt's, then every generated one.

        When a stream lost ids (a token that ended inside a multi-byte character gets
        no event), the text generated so far is tokenized again instead: the answer's
        text stays whole, though its ids may be split differently from the model's.
        """
        if all(s.generated == len(s.tokens) for s in self.segments):
            return self.prompt + self.tokens
        text = "".join(s.text for s in self.segments)
        url = self.admission.affinity.url(self.pool.get(self.decision.plan.mode), self.slots)
        out = await self.client.post_json(
            url, "/tokenize", {"content": text, "add_special": False, "parse_special": False}
        )
        ids = out.get("tokens") or []
        if not isinstance(ids, list):
            raise TypeError(f"{url}/tokenize answered tokens that are not a list")
        return self.prompt + [json_int(t) for t in ids]

    async def _segment(self, mode: Mode, n_predict: int) -> AsyncIterator[None]:
        """Run one segment, streamed, releasing its text into ``_ready`` as it comes.

        Yields after each piece, so a streaming caller can pass the text on. Every
        segment streams: llama-server b11434 stops a streamed task when its connection
        closes and runs a non-streamed one to the end, so a client that leaves must
        find a stream to close.
        """
        seg = Segment(mode)
        context = await self._context()
        # Remote hosts: back to a host whose slot holds the answer so far, while it is up.
        url = self.admission.affinity.url(self.pool.get(mode), self.slots)
        self.segments.append(seg)
        params = with_fields(self.params, self.pool.fields(mode))
        if url in self.slots:  # its cache holds the prompt and the tokens so far
            params = {**params, "id_slot": self.slots[url]}
        pieces = segment_stream(self.client, url, seg, context, params, n_predict)
        with self.admission.generating(mode):
            async with contextlib.aclosing(pieces):
                async for piece in pieces:
                    self._release(piece)
                    yield
                    if self.matcher.stopped:
                        break  # closing the stream (aclosing) stops the generation
        # No await since the stream let its slot go: kept before another request takes it.
        self._keep(url, seg.slot)
        if self.matcher.stopped:
            seg.stop_type = "word"
        self.router.record(self.decision, mode, Timings.parse(seg.timings))
        self._end_segment(seg)
        yield

    def _keep(self, url: str, slot: int | None) -> None:
        """Keep ``url``'s slot ``slot`` for the next segments there, until the answer ends."""
        if slot is None or url in self.slots:
            return
        self.slots[url] = slot
        pins = self.client.pins
        pins.keep(url, slot)
        self.admission.on_release(lambda: pins.unkeep(url, slot))

    async def _whole(self, mode: Mode, n_predict: int) -> Segment:
        """Run a segment to its end (a probe), its text kept for the caller."""
        async for _ in self._segment(mode, n_predict):
            pass
        return self.segments[-1]

    async def start(self) -> None:
        """Prepare the prompt and run the probe segment, before any byte is answered.

        Raises:
            BackendError, InvalidRequestError: the backend refused the request (a
                prompt over the context is :class:`~fronde.errors.ContextLengthError`)
                or failed.
        """
        if not self.prompt:
            await self.prepare()
        if self.prefix:
            self._ready.append(self.prefix)
        probe = await self._whole(self.decision.plan.mode, self._n_next())
        self.decision.probe_tok_s = probe.decode_tok_s

    async def run(self) -> AsyncIterator[str]:
        """Yield the answer's text: the probe's, the floor probe's if needed, the rest.

        Calls :meth:`start` first if it has not run.

        Raises:
            BackendError: a backend failed; pieces already yielded stand.
        """
        try:
            if not self.segments:
                await self.start()
            async for piece in self._run():
                yield piece
        finally:
            # Each segment was recorded for its own mode; the decision row shows the
            # whole answer (router.record left the last segment's figures there).
            t, d = self.total_timings(), self.decision
            d.decode_tok_s, d.tokens = t.predicted_per_second, t.predicted_n
            d.alpha, d.tau = t.alpha, t.tau

    def _drain(self) -> list[str]:
        out, self._ready = self._ready, []
        return out

    async def _run(self) -> AsyncIterator[str]:
        plan = self.decision.plan
        cand, floor = plan.mode, plan.floor
        assert floor is not None  # noqa: S101 - checked in __init__
        probe = self.segments[0]
        for piece in self._drain():
            yield piece
        if self._finished():  # EOS, a stop string or the budget inside the probe
            self._settle(cand)
            return
        floor_tok_s = plan.floor_tok_s
        if floor_tok_s is None:  # first time for this class: the floor probes the next tokens
            floor_tok_s = (await self._whole(floor, self._n_next())).decode_tok_s
            for piece in self._drain():
                yield piece
        self.decision.floor_tok_s = floor_tok_s
        winner = cand if probe.decode_tok_s >= self.router.policy.margin * floor_tok_s else floor
        if winner is floor and self.segments[-1].mode is cand:
            # Handing over costs the floor a prefill of everything so far.
            prompt_n = json_int(probe.timings.get("prompt_n") or 0)
            prefill = probe.timings.get("prompt_per_second") if prompt_n >= 16 else None
            if not hand_over_pays(
                self._remaining(),
                len(self.prompt) + len(self.tokens),
                probe.decode_tok_s,
                floor_tok_s,
                float(prefill) if isinstance(prefill, int | float) and prefill else None,
            ):
                winner = cand
        self._settle(winner)
        if self._finished():
            return
        remaining = self._remaining()
        async for _ in self._segment(winner, -1 if remaining is None else remaining):
            if self.stream:
                for piece in self._drain():
                    yield piece
        for piece in self._drain():
            yield piece

    def _settle(self, winner: Mode) -> None:
        """Record the winner and cache it for this request's key."""
        self.decision.winner = winner
        self.router.remember(self.decision.key, winner, self.decision.started)
        if self.on_switch is not None:
            self.on_switch(winner)

    def total_timings(self) -> Timings:
        """Timings summed over the segments (decode tok/s over the whole answer)."""
        parts = [Timings.parse(s.timings) for s in self.segments]
        return Timings.total(p for p in parts if p is not None)

    def final_timings(self) -> JSONObject:
        """:meth:`total_timings` as the response's ``timings`` JSON object."""
        return self.total_timings().as_json()

    def fronde_info(self) -> JSONObject:
        """What the router did, for the ``fronde`` field of the response."""
        return {
            "class": str(Route.PROBE),
            "probed": str(self.decision.plan.mode),
            "mode": str(self.decision.winner) if self.decision.winner else None,
            "probe_tok_s": self.decision.probe_tok_s,
            "floor": str(self.decision.plan.floor),
            "floor_tok_s": self.decision.floor_tok_s,
            "segments": [
                {"mode": str(s.mode), "tokens": s.generated, "decode_tok_s": s.decode_tok_s}
                for s in self.segments
            ],
        }
