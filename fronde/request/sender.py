"""How an admitted request's answer is made on a backend: passed through, or probed.

The :class:`~fronde.request.dispatcher.Dispatcher` admits a request, waits for its
mode and a slot, and hands it to its :class:`Sender`, which sends it to ``mode``'s
OpenAI endpoint (:meth:`Sender.send`), passes another API's request as sent
(:meth:`Sender.pass_api`) or probes and continues (:meth:`Sender.probe`,
:mod:`fronde.request.splice`). Each answer feeds the router its timings and ends the
request's :class:`Admission` with its last byte.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import cast

import anyio

from fronde.backends.client import BackendClient, UpstreamStream
from fronde.backends.held_stop import HeldStopText
from fronde.backends.pool import BackendPool
from fronde.backends.single import N_MAX_FIELD, with_fields
from fronde.client_request import ClientRequest
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.json_types import JSONObject
from fronde.modes import Mode
from fronde.request.admission import Admission
from fronde.request.agent_apis import Api
from fronde.request.choices import take_stops
from fronde.request.collect import answer_whole
from fronde.request.event_relay import EventRelay
from fronde.request.hindsight import Hindsight, text_of
from fronde.request.native import Kind, chunk, finish_reason, full_response, new_id, usage
from fronde.request.predicted_outputs import FEEDS_POOL, feed_pool, prediction_text, with_counts
from fronde.request.push import DONE_BYTES, PushRelay, count_piece
from fronde.request.relay import relay_sse, sse_error_event
from fronde.request.reply import Answer, Streamed, Whole
from fronde.request.splice import Splice
from fronde.router.engine import Decision, Router, Status
from fronde.timings import Timings

__all__ = ["PATHS", "Sender", "include_usage"]

PATHS: dict[Kind, str] = {"chat": "/v1/chat/completions", "text": "/v1/completions"}
"""The OpenAI endpoint of each kind, on Fronde and on llama-server alike."""


def include_usage(body: JSONObject) -> bool:
    """The client's ``stream_options.include_usage``."""
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def _sse(obj: JSONObject) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _settled(upstream: UpstreamStream, headers: dict[str, str]) -> None:
    """Set ``x-fronde-settle-ms`` and ``x-fronde-slot`` where they say something.

    ``settle-ms``: the wait, before the upstream call, to learn where the server put a
    request it placed itself (:meth:`~fronde.backends.slots.SlotPins.settle`); no header
    when nothing was waited for. Not part of ``x-fronde-overhead-ms``, which ends before
    it. ``slot``: the ``id_slot`` Fronde sent (slot placement), none where the server
    placed the request itself.
    """
    if upstream.settle_ms >= 0.001:
        headers["x-fronde-settle-ms"] = f"{upstream.settle_ms:.3f}"
    if upstream.slot is not None:
        headers["x-fronde-slot"] = str(upstream.slot)


class Sender:
    """Makes an admitted request's answer on a backend (see the module docstring).

    Args:
        settings: the settings tree (keep-alive, the public model name, prediction feed).
        pool: the backends.
        client: the HTTP client to them.
        router: routing state: each answer's timings are recorded there.
        hindsight: fetches an answer's token ids after it, for the router.
    """

    def __init__(
        self,
        settings: Settings,
        pool: BackendPool,
        client: BackendClient,
        router: Router,
        hindsight: Hindsight,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.client = client
        self.router = router
        self.hindsight = hindsight
        self.held_stop = HeldStopText(pool.props)

    @staticmethod
    def _overhead(decision: Decision, headers: dict[str, str]) -> None:
        """Fronde's own time before the upstream call: since arrival, waits excluded, ms.

        Set on the decision and in the ``x-fronde-overhead-ms`` response header.
        """
        spent_ms = (time.monotonic() - decision.started) * 1000
        decision.overhead_ms = round(spent_ms - (decision.queued_ms or 0.0), 3)
        headers["x-fronde-overhead-ms"] = f"{decision.overhead_ms:.3f}"

    def _draft_length(
        self, decision: Decision, mode: Mode, url: str, body: JSONObject, headers: dict[str, str]
    ) -> dict[str, int]:
        """The ``speculative.n_max`` the draft length by load sets under the client's fields.

        Only where one server serves every mode (the mode has fields: a server of its
        own cannot take the field unless patched) and the client sent no
        ``speculative.n_max`` of its own. The load is the requests Fronde has open to
        ``url`` plus this one (the schedule's c counts it). The value goes on the
        decision and in ``x-fronde-draft-n-max``; ``{}`` when none is set.
        """
        fields = self.pool.fields(mode)
        if not fields or N_MAX_FIELD in fields or N_MAX_FIELD in body:
            return {}
        n_max = self.router.draft_lengths.n_max(mode, self.client.in_flight[url] + 1)
        if n_max is None:
            return {}
        decision.draft_n_max = n_max
        headers["x-fronde-draft-n-max"] = str(n_max)
        return {N_MAX_FIELD: n_max}

    async def _tracked(
        self, adm: Admission, source: AsyncIterator[bytes], events: EventRelay | None = None
    ) -> AsyncIterator[bytes]:
        """Relay an SSE byte stream, counting its events and ending the request with it.

        The outcome is ``done`` when ``[DONE]`` goes out, and the request ends before
        the piece with it is passed on (another API's stream: when its
        ``events`` relay saw the final event; it counts the progress itself), ``error``
        when the stream ended without it (an in-band error event), ``cancelled`` when
        the client left.
        """
        outcome: Status = "error"
        try:
            async for piece in source:
                if events is None:
                    if count_piece(adm, piece):
                        outcome = "done"
                elif events.ended:
                    outcome = "done"
                if outcome == "done":
                    # The backend has finished: out of the load before the client
                    # reads the end and comes back (Admission.release).
                    adm.close(outcome)
                yield piece
            if events is not None and events.ended:
                outcome = "done"
        except BaseException:
            outcome = "cancelled"
            raise
        finally:
            adm.close(outcome, None if outcome != "error" else "error in the stream")

    async def send(
        self, adm: Admission, kind: Kind, req: ClientRequest, mode: Mode, headers: dict[str, str]
    ) -> Answer:
        """Pass the request through to ``mode``'s OpenAI endpoint, recording its timings.

        A ``prediction`` (Predicted Outputs) is fed first into the pool of a mode that
        keeps one (:mod:`fronde.request.predicted_outputs`); a whole answer then gets
        OpenAI's accepted and rejected prediction token counts.
        """
        decision = cast("Decision", adm.decision)
        url = adm.affinity.url(self.pool.get(mode))
        fields = self.pool.fields(mode)  # the mode, where one server serves every mode
        body = req.wire()
        sent = with_fields(body, fields, self._draft_length(decision, mode, url, body, headers))
        self._overhead(decision, headers)
        prediction = await self._fed(body, mode, url, headers)

        def on_timings(timings: JSONObject) -> None:
            self.router.record(decision, mode, Timings.parse(timings))
            self.router.settle_whole_probe(decision, mode)

        if not req.stream:
            # Cancellable either way (whole or streamed upstream: fronde.request.collect).
            with adm.generating(mode):
                data = await answer_whole(
                    self.client, url, PATHS[kind], sent, str(mode), on_timings, held=self.held_stop
                )
            answer = text_of(kind, data)
            self.hindsight.after(decision, mode, url, kind, body, text=answer)
            if prediction is not None:
                await with_counts(self.client, url, data, prediction, answer or "")
            return Whole(data, headers)
        stack = AsyncExitStack()
        stack.callback(adm.count(mode))
        upstream_body, stops = await take_stops(
            sent, chat=kind == "chat", url=url, held=self.held_stop
        )
        # Open the upstream before answering: a failure before the first byte is
        # still an ordinary HTTP error (raised here), not a broken 200 stream.
        try:
            upstream = await stack.enter_async_context(
                self.client.stream(url, PATHS[kind], upstream_body)
            )
        except BaseException:
            await stack.aclose()
            raise
        _settled(upstream, headers)
        relayed = relay_sse(
            upstream, str(mode), on_timings, include_usage=include_usage(body), stops=stops
        )
        pieces: list[bytes] | None = [] if self.hindsight.enabled else None

        def after() -> None:
            if decision.status == "done":
                self.hindsight.after(decision, mode, url, kind, body, pieces=pieces or [])

        async def events() -> AsyncIterator[bytes]:
            try:
                async for piece in self._tracked(adm, relayed):
                    if pieces is not None:
                        pieces.append(piece)  # read after the stream, off its path
                    yield piece
                after()
            finally:
                # Also runs when the client disconnects (we are cancelled): the upstream
                # connection closes and llama-server frees the slot. Shielded, since
                # any await in a cancelled scope would be cancelled at once.
                with anyio.CancelScope(shield=True):
                    await stack.aclose()

        async def close() -> None:
            adm.close("cancelled")  # a no-op once the stream ended
            await stack.aclose()

        push = None
        if stops is None and upstream.tappable and self.settings.server.push:
            usage = include_usage(body)
            push = PushRelay(adm, upstream, str(mode), on_timings, include_usage=usage,
                             capture=pieces, after=after, cleanup=stack.aclose)  # fmt: skip
        return Streamed(events(), headers, close, self.settings.server.sse_keepalive_s, push)

    async def _fed(
        self, body: JSONObject, mode: Mode, url: str, headers: dict[str, str]
    ) -> str | None:
        """The request's Predicted Output, fed first into the pool of a mode that keeps one.

        None without a ``prediction`` (or with the feed off). The feed's time and outcome go
        in ``x-fronde-prediction-feed-ms`` and ``x-fronde-prediction-fed``.
        """
        prediction = prediction_text(body) if self.settings.router.feed_prediction else None
        if prediction is not None and mode in FEEDS_POOL:
            t0 = time.monotonic()
            fed = await feed_pool(self.client, url, prediction, self.pool.fields(mode))
            headers["x-fronde-prediction-feed-ms"] = f"{(time.monotonic() - t0) * 1000:.1f}"
            headers["x-fronde-prediction-fed"] = "true" if fed else "false"
        return prediction

    async def pass_api(
        self, adm: Admission, api: Api, req: ClientRequest, mode: Mode, headers: dict[str, str]
    ) -> Answer:
        """Pass another API's request as sent to ``mode``'s endpoint for it.

        Its timings, where the API carries them (:mod:`fronde.request.agent_apis`),
        feed the router as a chat request's do. A stream is relayed line by line and
        ends with the API's own error event if the backend breaks; a client that
        leaves closes the upstream connection, which frees the slot.
        """
        decision = cast("Decision", adm.decision)
        url = adm.affinity.url(self.pool.get(mode))
        self._overhead(decision, headers)
        body = req.wire()
        under = self._draft_length(decision, mode, url, body, headers)
        sent = with_fields(body, self.pool.fields(mode), under)

        def on_timings(timings: JSONObject) -> None:
            self.router.record(decision, mode, Timings.parse(timings))

        if not req.stream:
            with adm.generating(mode):
                data = await self.client.post_json(url, api.path, sent)
            data = data if api.whole is None else api.whole(body)(data)
            timings = data.get("timings")
            if isinstance(timings, dict):
                on_timings(timings)
            return Whole(data, headers)
        stack = AsyncExitStack()
        stack.callback(adm.count(mode))
        try:
            upstream = await stack.enter_async_context(self.client.stream(url, api.path, sent))
        except BaseException:
            await stack.aclose()
            raise
        _settled(upstream, headers)
        relay = EventRelay(api, str(mode), on_timings, adm.progress, body)

        async def events() -> AsyncIterator[bytes]:
            try:
                async for piece in self._tracked(adm, relay.relay(upstream), relay):
                    yield piece
            finally:
                with anyio.CancelScope(shield=True):  # see send
                    await stack.aclose()

        async def close() -> None:
            adm.close("cancelled")  # a no-op once the stream ended
            await stack.aclose()

        return Streamed(events(), headers, close, self.settings.server.sse_keepalive_s)

    async def probe(
        self, adm: Admission, kind: Kind, req: ClientRequest, headers: dict[str, str]
    ) -> Answer:
        """Probe-and-continue (:mod:`fronde.request.splice`), in OpenAI's shape.

        The probe segment runs before the answer starts, so a refusal (a prompt over
        the context: 400 ``context_length_exceeded``) or a failed backend is still a
        plain HTTP error, streamed or not.
        """
        decision = cast("Decision", adm.decision)
        stream, body = req.stream, req.wire()
        splice = Splice(self.client, self.pool, adm, kind, body, stream=stream)
        await splice.prepare()  # render + tokenize: errors here are still plain HTTP errors
        self._overhead(decision, headers)  # the probe's render + tokenize round trips count
        await splice.start()
        model = req.model or self.settings.public_model
        if stream:
            return self._probe_stream(adm, splice, kind, model, include_usage(body), headers)
        text = "".join([piece async for piece in splice.run()])
        extra: JSONObject = {"timings": splice.final_timings(), "fronde": splice.fronde_info()}
        data = full_response(
            kind,
            model,
            text,
            finish_reason(splice.finish_stop_type),
            len(splice.prompt),
            splice.completion_tokens,
            extra,
        )
        headers = headers | {"x-fronde-mode": str(decision.winner or decision.plan.mode)}
        if decision.probe_tok_s is not None:
            headers["x-fronde-probe-tok-s"] = f"{decision.probe_tok_s:.2f}"
        return Whole(data, headers)

    def _probe_stream(
        self,
        adm: Admission,
        splice: Splice,
        kind: Kind,
        model: str,
        include_usage: bool,
        headers: dict[str, str],
    ) -> Streamed:
        """The rest of a probed answer as OpenAI chunks, after the probe's own text."""
        rid, created = new_id(kind), int(time.time())

        async def events() -> AsyncIterator[bytes]:
            first = True
            try:
                async for piece in splice.run():
                    yield _sse(chunk(kind, rid, model, created, text=piece, role=first))
                    first = False
            except FrondeError as exc:
                yield b"\n" + sse_error_event(exc.message)
                return
            finally:
                adm.release()
            last = chunk(
                kind,
                rid,
                model,
                created,
                text="" if kind == "text" else None,
                role=first,
                finish=finish_reason(splice.finish_stop_type),
            )
            last["timings"] = splice.final_timings()
            last["fronde"] = splice.fronde_info()
            yield _sse(last)
            if include_usage:
                usage_chunk = chunk(kind, rid, model, created)
                usage_chunk["choices"] = []
                usage_chunk["usage"] = {**usage(len(splice.prompt), splice.completion_tokens)}
                yield _sse(usage_chunk)
            yield DONE_BYTES + b"\n\n"

        async def close() -> None:
            adm.close("cancelled")  # a no-op once the stream ended

        keepalive_s = self.settings.server.sse_keepalive_s
        return Streamed(self._tracked(adm, events()), headers, close, keepalive_s)
