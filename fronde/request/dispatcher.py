"""The dispatcher: one owner for a request's life, from admission to its last byte.

For each OpenAI request the API layer has parsed and checked, :meth:`Dispatcher.answer`
classifies it, plans it with the router, waits for its mode to be resident (swap
residency) and for a decode slot, then either passes it to one mode's backend or
probes and continues (:mod:`fronde.request.splice`); a backend that fails before any
byte was sent is retried on another mode. The request's :class:`Admission` is the one
writer of its status, and is released when the answer ends: the end of the JSON, the
stream's last byte, an error, or the client leaving (the API cancels the work).

Every answer carries the decision in ``x-fronde-mode`` and ``x-fronde-class``;
errors carry them too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any, cast

import anyio

from fronde.backends.client import BackendClient, UpstreamStream
from fronde.backends.pool import BackendPool
from fronde.backends.swap import SwapScheduler
from fronde.config import Settings
from fronde.errors import (
    BackendConnectionError,
    BackendStreamError,
    BackendUnavailableError,
    ContextLengthError,
    FrondeError,
)
from fronde.evidence.counterfactual import self_overlap
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.request.admission import Admission, Arrival
from fronde.request.agent_apis import Api
from fronde.request.collect import answer_whole
from fronde.request.hindsight import Hindsight, text_of
from fronde.request.native import (
    Kind,
    chunk,
    finish_reason,
    full_response,
    max_new_tokens,
    new_id,
    splice_safe,
    usage,
)
from fronde.request.predicted_outputs import FEEDS_POOL, feed_pool, prediction_text, with_counts
from fronde.request.relay import (
    DONE_LINE,
    EventRelay,
    OwnedStops,
    relay_sse,
    sse_error_event,
    with_keepalive,
)
from fronde.request.reply import Answer, Streamed, Whole
from fronde.request.splice import Splice
from fronde.request.tools import ToolTemplate, honour_tool_choice
from fronde.router.cache import cache_key
from fronde.router.choice import forced_mode, parse_mode
from fronde.router.classify import RequestClass, classify, request_text, unsafe_fields
from fronde.router.engine import Decision, Router, Status
from fronde.router.policy import Route
from fronde.timings import Timings

__all__ = ["PATHS", "Dispatcher"]

log = get_logger(__name__)

PATHS: dict[Kind, str] = {"chat": "/v1/chat/completions", "text": "/v1/completions"}
"""The OpenAI endpoint of each kind, on Fronde and on llama-server alike."""

DONE_BYTES = DONE_LINE.encode()
DONE_INSIDE = b"\n" + DONE_BYTES
ERROR_PREFIX = b'\ndata: {"error"'


def _include_usage(body: dict[str, Any]) -> bool:
    """The client's ``stream_options.include_usage``."""
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(cast("dict[str, Any]", options).get("include_usage"))


def _probe_eligible(kind: Kind, body: dict[str, Any]) -> bool:
    """Whether a probed request may be handed over (:class:`Splice`); else it runs whole.

    The probe path renders and tokenizes the prompt, so it needs a string prompt, and a
    grammar, a schema or tools cannot cross a hand-over
    (:data:`~fronde.request.native.HANDOVER_BLOCKERS`).
    """
    return (kind == "chat" or isinstance(body.get("prompt"), str)) and splice_safe(body)


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _settled(upstream: UpstreamStream, headers: dict[str, str]) -> None:
    """Set ``x-fronde-settle-ms`` where the request waited to learn a server's slot.

    The wait, before the upstream call, to learn where the server put a request it
    placed itself (:meth:`~fronde.backends.slots.SlotPins.settle`); no header when
    nothing was waited for. Not part of ``x-fronde-overhead-ms``, which ends before it.
    """
    if upstream.settle_ms >= 0.001:
        headers["x-fronde-settle-ms"] = f"{upstream.settle_ms:.3f}"


class Dispatcher:
    """Runs requests through the router and the backends (see the module docstring).

    Args:
        settings: the settings tree.
        pool: the backends.
        client: the HTTP client to them.
        router: routing state and policy.
        swap: the swap scheduler with swap residency, else None (every mode resident).
    """

    def __init__(
        self,
        settings: Settings,
        pool: BackendPool,
        client: BackendClient,
        router: Router,
        swap: SwapScheduler | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.client = client
        self.router = router
        self.swap = swap
        self.tools = ToolTemplate(client, self._template_url)
        gated = settings.effective_max_parallel_decodes() == 1
        self.hindsight = Hindsight(client, router, wait_idle=gated)

    def _template_url(self) -> str:
        """A backend whose ``/props`` tells the chat template: baseline, else any ready one.

        Every mode serves the same model with the same template.

        Raises:
            BackendUnavailableError: no backend is ready.
        """
        if Mode.BASELINE in self.pool.backends:
            return self.pool.get(Mode.BASELINE).url
        ready = self.pool.ready_modes()
        if not ready:
            raise BackendUnavailableError("no backend is ready yet")
        return self.pool.get(ready[0]).url

    def routable(self) -> list[Mode]:
        """Modes a request may be routed to now.

        The ready ones; with swap residency, every swappable mode (a request for a
        non-resident one waits for its epoch).
        """
        return self.swap.available() if self.swap is not None else self.pool.ready_modes()

    # --- one request -------------------------------------------------------------------

    async def answer(
        self, kind: Kind, body: dict[str, Any], mode_header: str | None, api: Api | None = None
    ) -> Answer:
        """Answer one checked request, streamed or not.

        Args:
            kind: ``chat`` or ``text`` (for ``api``, the kind of its view).
            body: the request body (checked by the API's schema).
            mode_header: the client's ``x-fronde-mode`` header, if any.
            api: None for OpenAI chat and text completions; else the other API the body
                speaks (:mod:`fronde.request.agent_apis`): routed on its chat view,
                passed through as sent.

        Raises:
            FrondeError: an error before any byte of the answer; its ``headers`` name
                the decision.
        """
        arrival = Arrival(self.router)
        try:
            if kind == "chat":  # chat, and the APIs routed as chat (Responses, Messages)
                await honour_tool_choice(body, self.tools.supports_tools, api)
            view = body if api is None else api.view(body)
            forced = forced_mode(mode_header, view.get("model"))
            gathered = forced is None and self.router.places_by_load
            if gathered:
                # The requests that came with this one are counted (Arrival) before
                # any of them is placed (only a placement by the curves reads them).
                r = self.settings.router
                await arrival.gathered(r.gather_ms / 1000, r.gather_max_ms / 1000)
            adm, headers = await self._admit(kind, view, forced, arrival)
            if gathered:
                # The part of x-fronde-overhead-ms spent waiting for the burst to end.
                headers["x-fronde-gather-ms"] = f"{arrival.waited_s * 1000:.3f}"
        except BaseException:
            arrival.close()  # after the plan, the admission closes it
            raise
        try:
            answer = await self._serve(adm, kind, body, headers, api)
        except FrondeError as exc:
            adm.close("error", exc.message)
            exc.headers.update(headers)  # an error still says which mode was chosen
            if isinstance(exc, ContextLengthError):
                exc.param = "messages" if kind == "chat" else "prompt"
            raise
        except asyncio.CancelledError:
            adm.close("cancelled")  # the client left (or the server stops)
            raise
        except Exception as exc:
            adm.close("error", f"internal error: {type(exc).__name__}")
            raise
        if isinstance(answer, Whole):
            adm.close("done")  # a stream closes when it ends
        return answer

    def classified(
        self,
        body: dict[str, Any],
        forced: Mode | None,
        ready: list[Mode],
        tools_ignored: bool = False,
        text: str | None = None,
    ) -> RequestClass:
        """The static class of a request something can serve (single or batched).

        ``tools_ignored``: the chat template takes no tools, so a request with tools is
        plain chat (:func:`~fronde.router.classify.unsafe_fields`). ``text``: the
        request's text, when the caller has it already.

        Raises:
            BackendUnavailableError: no backend is ready and no mode is forced (503).
        """
        if not ready and forced is None:
            raise BackendUnavailableError("no backend is ready yet")
        r = self.settings.router
        unsafe = unsafe_fields(structured=r.speculate_structured, tools_ignored=tools_ignored)
        return classify(body, edit_block_chars=r.edit_block_chars, unsafe=unsafe, text=text)

    async def _admit(
        self, kind: Kind, body: dict[str, Any], forced: Mode | None, arrival: Arrival
    ) -> tuple[Admission, dict[str, str]]:
        """Classify and plan the request: its admission and the decision's headers.

        ``forced``: the mode the client named (:func:`~fronde.router.choice.forced_mode`),
        if any.

        ``arrival`` (this request, counted in the router's ``arriving``) goes to the
        admission, which closes it when the request's generation is counted in flight
        or the request ends: a request waiting for residency or a slot stays counted.

        Raises:
            BackendUnavailableError: nothing can serve it (HTTP 503).
        """
        ready = self.routable()
        has_tools = bool(body.get("tools") or body.get("functions"))
        ignored = has_tools and await self.tools.supports_tools() is False
        text = request_text(body)  # read once: the class and the bucket both need it
        cls = self.classified(body, forced, ready, tools_ignored=ignored, text=text)
        if (
            cls is RequestClass.UNSAFE
            and forced is None
            and Mode.BASELINE not in self.pool.backends
        ):
            raise BackendUnavailableError(
                "requests with logprobs (or tools the chat template takes) run on the baseline "
                "mode only (speculation breaks logprobs; tool calls under it are untested), and "
                "this server runs no baseline: start it with --mode baseline"
            )
        key = cache_key(body)
        if forced is None:
            await self.router.recall(key)  # another replica may have routed it
        # Only what the bucket needs: a word scan of the request's text (≈ 0.1 ms a 10 kB).
        overlap = self_overlap(text) if self.hindsight.enabled else 0.0
        decision = self.router.plan(
            cls,
            key,
            ready,
            forced,
            now=arrival.t0,  # from its arrival: a burst's wait is Fronde's own time
            budget=max_new_tokens(body),
            overlap=overlap,
            arriving_self=True,
        )
        headers = {
            "x-fronde-mode": str(decision.plan.mode),
            "x-fronde-class": str(decision.plan.route),
            "x-fronde-request-id": decision.rid,  # its row in /fronde/v1/router's "recent"
        }
        if decision.predicted_tok_s is not None:  # the counterfactual book's forecast
            headers["x-fronde-predicted-tok-s"] = f"{decision.predicted_tok_s:.2f}"
        return Admission(self.router, decision, arrival), headers

    async def _serve(
        self,
        adm: Admission,
        kind: Kind,
        body: dict[str, Any],
        headers: dict[str, str],
        api: Api | None = None,
    ) -> Answer:
        """Wait for residency and a slot, then send or probe; retry once elsewhere.

        A request of another ``api`` is never probed (the probe speaks chat): it goes
        whole to the plan's mode.
        """
        decision = cast("Decision", adm.decision)
        plan = decision.plan
        mode = await self._resident(adm, headers)
        await adm.take_slot()

        async def send(to: Mode) -> Answer:
            if api is not None:
                return await self._pass(adm, api, body, to, headers)
            return await self._send(adm, kind, body, to, headers)

        try:
            # A probe hands over between two backends; with swap residency only the
            # leased one is sure to stay up, so the probed mode answers in full.
            probe = plan.route is Route.PROBE and api is None and _probe_eligible(kind, body)
            if probe and self.swap is None:
                return await self._probe(adm, kind, body, headers)
            return await send(mode)
        except (BackendConnectionError, BackendUnavailableError) as exc:
            # Nothing reached the client yet: serve from another ready mode.
            alt = self._retry_mode(decision)
            if alt is None:
                raise
            log.warning("route.retried", failed=str(plan.mode), mode=str(alt), error=exc.message)
            headers |= {"x-fronde-mode": str(alt), "x-fronde-retried-from": str(plan.mode)}
            decision.winner = alt
            return await send(alt)

    async def _resident(self, adm: Admission, headers: dict[str, str]) -> Mode:
        """With swap residency, wait for the plan's mode to be resident; return the mode to use.

        The lease goes back when ``adm`` is released. Past ``swap.max_wait_s`` the
        scheduler grants another resident mode (``x-fronde-swap-fallback`` names the
        one asked for) or raises :class:`~fronde.backends.swap.SwapWaitError` (503).
        """
        decision = cast("Decision", adm.decision)
        plan = decision.plan
        if self.swap is None:
            return plan.mode
        swap = self.swap
        # Only baseline may serve unsafe-for-spec requests: past the wait bound, a 503.
        lease = await swap.acquire(plan.mode, fallback=plan.route is not Route.UNSAFE)
        adm.on_release(lambda: swap.release(lease))
        headers["x-fronde-swap-wait-ms"] = f"{lease.waited_s * 1000:.0f}"
        if lease.fallback:
            headers |= {"x-fronde-mode": str(lease.mode), "x-fronde-swap-fallback": str(plan.mode)}
            decision.winner = lease.mode
        return lease.mode

    def _retry_mode(self, decision: Decision) -> Mode | None:
        """Where a request goes when its mode failed before any byte was sent, or None.

        Forced requests are not moved (the client asked for that mode), nor are
        unsafe-for-spec ones (only baseline may serve them), nor requests under swap
        residency (only the leased mode is sure to stay up). Otherwise the plan's floor,
        then baseline, then any other ready mode.
        """
        plan = decision.plan
        if plan.route in (Route.FORCED, Route.UNSAFE) or self.swap is not None:
            return None
        ready = [m for m in self.pool.ready_modes() if m is not plan.mode]
        for m in (plan.floor, Mode.BASELINE, *ready):
            if m is not None and m in ready:
                return m
        return None

    @staticmethod
    def _overhead(decision: Decision, headers: dict[str, str]) -> None:
        """Fronde's own time before the upstream call: since arrival, waits excluded, ms.

        Set on the decision and in the ``x-fronde-overhead-ms`` response header.
        """
        spent_ms = (time.monotonic() - decision.started) * 1000
        decision.overhead_ms = round(spent_ms - (decision.queued_ms or 0.0), 3)
        headers["x-fronde-overhead-ms"] = f"{decision.overhead_ms:.3f}"

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
                    # A piece may hold several events (one upstream read); a relay's own
                    # error event comes alone and is not progress.
                    n = piece.count(b"\ndata: {") + piece.startswith(b"data: {")
                    if n and not piece.startswith(ERROR_PREFIX):
                        adm.progress(n)
                    if piece.startswith(DONE_BYTES) or DONE_INSIDE in piece:
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

    async def _send(
        self, adm: Admission, kind: Kind, body: dict[str, Any], mode: Mode, headers: dict[str, str]
    ) -> Answer:
        """Pass the request through to ``mode``'s OpenAI endpoint, recording its timings.

        A ``prediction`` (Predicted Outputs) is fed first into the pool of a mode that
        keeps one (:mod:`fronde.request.predicted_outputs`); a whole answer then gets
        OpenAI's accepted and rejected prediction token counts.
        """
        decision = cast("Decision", adm.decision)
        url = self.pool.get(mode).url
        self._overhead(decision, headers)
        prediction = prediction_text(body) if self.settings.router.feed_prediction else None
        if prediction is not None and mode in FEEDS_POOL:
            t0 = time.monotonic()
            fed = await feed_pool(self.client, url, prediction)
            headers["x-fronde-prediction-feed-ms"] = f"{(time.monotonic() - t0) * 1000:.1f}"
            headers["x-fronde-prediction-fed"] = "true" if fed else "false"

        def on_timings(timings: dict[str, Any]) -> None:
            self.router.record(decision, mode, Timings.parse(timings))
            self.router.settle_whole_probe(decision, mode)

        if not body.get("stream", False):
            # Streamed upstream all the same (fronde.request.collect): cancellable.
            with adm.generating(mode):
                data = await answer_whole(
                    self.client, url, PATHS[kind], body, str(mode), on_timings
                )
            answer = text_of(kind, data)
            self.hindsight.after(decision, mode, url, kind, body, text=answer)
            if prediction is not None:
                await with_counts(self.client, url, data, prediction, answer or "")
            return Whole(data, headers)
        stack = AsyncExitStack()
        stack.callback(adm.count(mode))
        # Stop strings in a stream are Fronde's (see fronde.request.relay): llama-server
        # would drop the text it held back for a partial match at the budget.
        upstream_body, stops = OwnedStops.take(body, chat=kind == "chat")
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
            upstream, str(mode), on_timings, include_usage=_include_usage(body), stops=stops
        )
        keepalive_s = self.settings.server.sse_keepalive_s
        capture = self.hindsight.enabled

        async def events() -> AsyncIterator[bytes]:
            pieces: list[bytes] = []
            try:
                async for piece in with_keepalive(self._tracked(adm, relayed), keepalive_s):
                    if capture:
                        pieces.append(piece)  # read after the stream, off its path
                    yield piece
                if decision.status == "done":
                    self.hindsight.after(decision, mode, url, kind, body, pieces=pieces)
            finally:
                # Also runs when the client disconnects (we are cancelled): the upstream
                # connection closes and llama-server frees the slot. Shielded, since
                # any await in a cancelled scope would be cancelled at once.
                with anyio.CancelScope(shield=True):
                    await stack.aclose()

        async def close() -> None:
            adm.close("cancelled")  # a no-op once the stream ended
            await stack.aclose()

        return Streamed(events(), headers, close)

    async def _pass(
        self, adm: Admission, api: Api, body: dict[str, Any], mode: Mode, headers: dict[str, str]
    ) -> Answer:
        """Pass another API's request as sent to ``mode``'s endpoint for it.

        Its timings, where the API carries them (:mod:`fronde.request.agent_apis`),
        feed the router as a chat request's do. A stream is relayed line by line and
        ends with the API's own error event if the backend breaks; a client that
        leaves closes the upstream connection, which frees the slot.
        """
        decision = cast("Decision", adm.decision)
        url = self.pool.get(mode).url
        self._overhead(decision, headers)

        def on_timings(timings: dict[str, Any]) -> None:
            self.router.record(decision, mode, Timings.parse(timings))

        if not body.get("stream", False):
            with adm.generating(mode):
                data = await self.client.post_json(url, api.path, body)
            data = data if api.whole is None else api.whole(body)(data)
            timings = data.get("timings")
            if isinstance(timings, dict):
                on_timings(cast("dict[str, Any]", timings))
            return Whole(data, headers)
        stack = AsyncExitStack()
        stack.callback(adm.count(mode))
        try:
            upstream = await stack.enter_async_context(self.client.stream(url, api.path, body))
        except BaseException:
            await stack.aclose()
            raise
        _settled(upstream, headers)
        relay = EventRelay(api, str(mode), on_timings, adm.progress, body)
        keepalive_s = self.settings.server.sse_keepalive_s

        async def events() -> AsyncIterator[bytes]:
            try:
                tracked = self._tracked(adm, relay.relay(upstream), relay)
                async for piece in with_keepalive(tracked, keepalive_s):
                    yield piece
            finally:
                with anyio.CancelScope(shield=True):  # see _send
                    await stack.aclose()

        async def close() -> None:
            adm.close("cancelled")  # a no-op once the stream ended
            await stack.aclose()

        return Streamed(events(), headers, close)

    async def _probe(
        self, adm: Admission, kind: Kind, body: dict[str, Any], headers: dict[str, str]
    ) -> Answer:
        """Probe-and-continue (:mod:`fronde.request.splice`), in OpenAI's shape.

        The probe segment runs before the answer starts, so a refusal (a prompt over
        the context: 400 ``context_length_exceeded``) or a failed backend is still a
        plain HTTP error, streamed or not.
        """
        decision = cast("Decision", adm.decision)
        stream = bool(body.get("stream", False))
        splice = Splice(self.client, self.pool, adm, kind, body, stream=stream)
        await splice.prepare()  # render + tokenize: errors here are still plain HTTP errors
        self._overhead(decision, headers)  # the probe's render + tokenize round trips count
        await splice.start()
        model = str(body.get("model") or self.settings.public_model)
        if stream:
            return self._probe_stream(adm, splice, kind, model, _include_usage(body), headers)
        text = "".join([piece async for piece in splice.run()])
        extra = {"timings": splice.final_timings(), "fronde": splice.fronde_info()}
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
                usage_chunk["usage"] = usage(len(splice.prompt), splice.completion_tokens)
                yield _sse(usage_chunk)
            yield DONE_BYTES + b"\n\n"

        async def close() -> None:
            adm.close("cancelled")  # a no-op once the stream ended

        keepalive_s = self.settings.server.sse_keepalive_s
        return Streamed(with_keepalive(self._tracked(adm, events()), keepalive_s), headers, close)

    # --- llama-server's own endpoints, passed through ------------------------------------

    def _native_target(self, name: str | None) -> tuple[Mode, str]:
        """The backend a native call goes to: (mode, base URL).

        Raises:
            UnknownModeError, ModeUnavailableError: the named mode does not exist or
                is not run here.
            BackendUnavailableError: no backend is ready.
        """
        if name:
            mode = parse_mode(name, param="mode")
        else:
            ready = self.pool.ready_modes()
            if not ready:
                raise BackendUnavailableError("no backend is ready yet")
            mode = Mode.BASELINE if Mode.BASELINE in ready else ready[0]
        return mode, self.pool.get(mode).url

    async def native_get(self, path: str, mode_name: str | None) -> Whole:
        """``GET path`` on the named mode's backend (baseline, or the first ready, if None)."""
        mode, url = self._native_target(mode_name)
        data = await self.client.get_json(url, path)
        return Whole(data, {"x-fronde-mode": str(mode)})

    async def native_post(self, path: str, body: dict[str, Any], mode_name: str | None) -> Answer:
        """``POST path`` on the named mode's backend, body as sent.

        ``/completion`` takes a decode slot; streamed, it is relayed byte for byte and
        ends with an in-band error event if the backend breaks.
        """
        mode, url = self._native_target(mode_name)
        headers = {"x-fronde-mode": str(mode)}
        if path != "/completion":
            return Whole(await self.client.post_json(url, path, body), headers)
        adm = Admission(self.router)
        await adm.take_slot()
        if not body.get("stream"):
            try:
                return Whole(await self.client.post_json(url, path, body), headers)
            finally:
                adm.release()
        stack = AsyncExitStack()
        stack.callback(adm.release)
        try:
            upstream = await stack.enter_async_context(self.client.stream(url, path, body))
        except BaseException:
            await stack.aclose()
            raise

        async def events() -> AsyncIterator[bytes]:
            try:
                async for part in upstream.raw():
                    yield part
            except BackendStreamError as exc:
                yield b"\n" + sse_error_event(f"backend {mode} failed mid-stream: {exc.cause}")
            finally:
                with anyio.CancelScope(shield=True):  # see _send
                    await stack.aclose()

        return Streamed(events(), headers, stack.aclose)
