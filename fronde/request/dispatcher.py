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
from collections.abc import Awaitable, Callable
from typing import cast

from fronde.backends.client import BackendClient
from fronde.backends.pool import BackendPool
from fronde.backends.swap import SwapScheduler
from fronde.client_request import ClientRequest
from fronde.config import Settings
from fronde.errors import (
    BackendError,
    BackendUnavailableError,
    ContextLengthError,
    FrondeError,
)
from fronde.evidence.bucket import self_overlap
from fronde.json_types import JSONObject
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.request.admission import Admission, Arrival
from fronde.request.agent_apis import Api
from fronde.request.hindsight import Hindsight
from fronde.request.native import Kind, max_new_tokens, splice_safe
from fronde.request.native_calls import NativeCalls
from fronde.request.reply import Answer, Whole
from fronde.request.retry import lost, retry_mode, unavailable
from fronde.request.sender import Sender
from fronde.request.tools import ToolTemplate, honour_tool_choice
from fronde.router.cache import cache_key
from fronde.router.choice import forced_mode
from fronde.router.classify import (
    RequestClass,
    classify,
    constrained,
    request_text,
    unsafe_fields,
)
from fronde.router.engine import Decision, Router
from fronde.router.plan import Route
from fronde.stamps import stamp

__all__ = ["Dispatcher"]

log = get_logger(__name__)


def _probe_eligible(kind: Kind, body: JSONObject) -> bool:
    """Whether a probed request may be handed over; else it runs whole.

    A hand-over is a :class:`~fronde.request.splice.Splice`. The probe path renders and
    tokenizes the prompt, so it needs a string prompt, and a grammar, a schema or tools
    cannot cross a hand-over (:data:`~fronde.request.native.HANDOVER_BLOCKERS`).
    """
    return (kind == "chat" or isinstance(body.get("prompt"), str)) and splice_safe(body)


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
        self.tools = ToolTemplate(pool.props, self._template_url)
        gated = settings.effective_max_parallel_decodes() == 1
        self.hindsight = Hindsight(client, router, wait_idle=gated, on=settings.router.hindsight)
        self.sender = Sender(settings, pool, client, router, self.hindsight)
        self.native = NativeCalls(pool, client, router)
        """llama-server's own endpoints, passed through (not routed)."""

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
        self, kind: Kind, req: ClientRequest, mode_header: str | None, api: Api | None = None
    ) -> Answer:
        """Answer one checked request, streamed or not.

        Args:
            kind: ``chat`` or ``text`` (for ``api``, the kind of its view).
            req: the request (checked by the API's schema, typed at its edge).
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
                await honour_tool_choice(req, self.tools.supports_tools, api)
            # The router reads the body's JSON (the class, the cache key, the bucket).
            view = req.wire() if api is None else api.view(req.wire())
            forced = forced_mode(mode_header, req.model)
            gathered = forced is None and self.router.places_by_load
            if gathered:
                # The requests that came with this one are counted (Arrival) before
                # any of them is placed (only a placement by the curves reads them).
                r = self.settings.router
                await arrival.gathered(r.gather_ms / 1000, r.gather_max_ms / 1000)
            adm, headers = await self._admit(kind, view, forced, arrival)
            stamp("planned")
            if gathered:
                # The part of x-fronde-overhead-ms spent waiting for the burst to end.
                headers["x-fronde-gather-ms"] = f"{arrival.waited_s * 1000:.3f}"
        except BaseException:
            arrival.close()  # after the plan, the admission closes it
            raise
        try:
            answer = await self._serve(adm, kind, req, headers, api)
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
        body: JSONObject,
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
        self, kind: Kind, body: JSONObject, forced: Mode | None, arrival: Arrival
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
            constrained=constrained(body),
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
        req: ClientRequest,
        headers: dict[str, str],
        api: Api | None = None,
    ) -> Answer:
        """Wait for residency and a slot, then send or probe; retry once elsewhere.

        A request of another ``api`` is never probed (the probe speaks chat): it goes
        whole to the plan's mode. One that failed before any byte was sent goes once
        more: to another up host of its mode where remote hosts serve it
        (:class:`~fronde.backends.affinity.Affinity`), else to another ready mode.
        """
        decision = cast("Decision", adm.decision)
        plan = decision.plan
        mode = await self._resident(adm, headers)
        await adm.take_slot()
        stamp("slot")

        async def send(to: Mode) -> Answer:
            if api is not None:
                return await self.sender.pass_api(adm, api, req, to, headers)
            return await self.sender.send(adm, kind, req, to, headers)

        async def attempt() -> Answer:
            # A probe hands over between two backends; with swap residency only the
            # leased one is sure to stay up, so the probed mode answers in full.
            probe = plan.route is Route.PROBE and api is None and _probe_eligible(kind, req.wire())
            if probe and self.swap is None:
                return await self.sender.probe(adm, kind, req, headers)
            return await send(mode)

        try:
            return await attempt()
        except BackendError as exc:
            # Nothing reached the client yet (a stream's later failure is in-band).
            if not adm.affinity.elsewhere(self.pool.backends.get(mode), exc):
                return await self._retried(adm, exc, mode, headers, send)
            failed = adm.affinity.last
            log.warning("route.host_retried", mode=str(mode), failed=failed, error=exc.message)
        try:
            return await attempt()
        except BackendError as exc:
            # Counted in its host's health; no third try: the other hosts failed or are down.
            adm.affinity.elsewhere(self.pool.backends.get(mode), exc)
            if not lost(self.pool, mode, exc, adm.affinity):
                raise
            raise unavailable(self.pool, mode, exc) from exc

    async def _retried(
        self,
        adm: Admission,
        exc: BackendError,
        mode: Mode,
        headers: dict[str, str],
        send: Callable[[Mode], Awaitable[Answer]],
    ) -> Answer:
        """After ``exc`` on ``mode`` before any byte was sent: ``send`` to another mode.

        Raises:
            BackendError: ``exc`` itself where it was the server's answer, or no other
                mode may take the request (:func:`~fronde.request.retry.retry_mode`); in
                single a 503 with ``Retry-After``.
        """
        decision = cast("Decision", adm.decision)
        plan = decision.plan
        if not lost(self.pool, mode, exc, adm.affinity):
            raise exc
        alt = retry_mode(self.pool, decision, swap=self.swap is not None)
        if alt is None and self.pool.topology == "single":
            raise unavailable(self.pool, mode, exc) from exc
        if alt is None:
            raise exc
        log.warning("route.retried", failed=str(plan.mode), mode=str(alt), error=exc.message)
        headers |= {"x-fronde-mode": str(alt), "x-fronde-retried-from": str(plan.mode)}
        decision.winner = alt
        return await send(alt)

    async def _resident(self, adm: Admission, headers: dict[str, str]) -> Mode:
        """With swap residency, wait for the plan's mode to be resident; return the mode to use.

        The lease goes back when ``adm`` is released. Past ``swap.max_wait_s`` the
        scheduler grants another resident mode (``x-fronde-swap-fallback`` names the
        one asked for) or raises :class:`~fronde.backends.swap_ports.SwapWaitError` (503).
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
