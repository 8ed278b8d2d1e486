"""Probe-and-continue: the probe's tokens are part of the answer.

For a novel request the router generates the first ``probe_tokens`` on the
aggressive candidate and measures its decode tok/s. The first time a class is
seen the floor has no EMA yet, so the floor generates the *next* ``probe_tokens``
(also part of the answer: nothing is thrown away). The faster side, with the
candidate needing ``margin`` × the floor, then continues to the end.

Every hand-over sends token ids (the prompt's ids plus every id generated so
far), never text, so nothing is re-tokenized differently: the chat template is
rendered with ``/apply-template``, tokenized once with ``/tokenize``, and each
segment asks ``/completion`` for ``return_tokens``. With ``cache_prompt`` on, a
backend continuing its own segment does not prefill the prompt again.

Known limits: a stop string that starts in one segment and ends in the next is
not detected (one inside a segment is, by llama-server); a multi-byte character
whose bytes straddle two segments may be rendered as U+FFFD.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from fronde.backends.client import TRANSPORT_ERRORS, BackendClient
from fronde.backends.pool import BackendPool
from fronde.errors import BackendConnectionError, InvalidRequestError
from fronde.modes import Mode
from fronde.router.engine import Decision, Router
from fronde.router.measure import measurement_from_timings
from fronde.router.native import Kind, max_new_tokens, sampling_params
from fronde.router.policy import Route, hand_over_pays

__all__ = ["Segment", "Splice", "prompt_ids", "segment_stream"]


@dataclass
class Segment:
    """One backend's share of a generation.

    Attributes:
        mode: the mode that generated it.
        tokens: generated token ids.
        text: generated text.
        stop_type: llama-server's ``stop_type`` (``eos``, ``word``, ``limit``), or None
            while running.
        timings: llama-server's ``timings`` of this segment.
    """

    mode: Mode
    tokens: list[int] = field(default_factory=list[int])
    text: str = ""
    stop_type: str | None = None
    timings: dict[str, Any] = field(default_factory=dict[str, Any])

    @property
    def decode_tok_s(self) -> float:
        """llama-server's decode tok/s for this segment (0.0 if unknown)."""
        return float(self.timings.get("predicted_per_second") or 0.0)


async def prompt_ids(
    client: BackendClient, url: str, kind: Kind, body: dict[str, Any]
) -> list[int]:
    """Render (chat) and tokenize the request's prompt on a backend, with BOS.

    Raises:
        InvalidRequestError: a completion prompt that is not a string.
        BackendError: from the backend calls.
    """
    if kind == "chat":
        rendered = await client.post_json(url, "/apply-template", {"messages": body["messages"]})
        text = rendered.get("prompt")
    else:
        text = body.get("prompt")
    if not isinstance(text, str):
        raise InvalidRequestError("the prompt must be a string", param="prompt")
    out = await client.post_json(
        url, "/tokenize", {"content": text, "add_special": True, "parse_special": True}
    )
    ids = out.get("tokens")
    if not isinstance(ids, list):
        raise BackendConnectionError(f"{url}/tokenize returned no tokens")
    return [int(t) for t in ids]  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]


async def segment_stream(
    client: BackendClient,
    url: str,
    seg: Segment,
    prompt: list[int],
    params: dict[str, Any],
    n_predict: int,
) -> AsyncIterator[str]:
    """Stream one native ``/completion`` segment, filling ``seg``; yield text pieces."""
    body = {
        **params,
        "prompt": prompt,
        "n_predict": n_predict,
        "stream": True,
        "return_tokens": True,
        "cache_prompt": True,
    }
    async with client.stream(url, "/completion", body) as resp:
        lines = resp.aiter_lines()
        while True:
            try:
                line = await anext(lines)
                event = json.loads(line[6:]) if line.startswith("data: ") else None
            except StopAsyncIteration:
                break
            except TRANSPORT_ERRORS as exc:
                # A backend that died mid-body: a backend error (502 or an in-band
                # error event), never an internal one.
                raise BackendConnectionError(
                    f"{seg.mode} failed mid-stream: {type(exc).__name__}"
                ) from exc
            except ValueError as exc:
                raise BackendConnectionError(f"{seg.mode} sent an event that is not JSON") from exc
            if event is None:
                continue
            if "error" in event:
                raise BackendConnectionError(f"{seg.mode} failed: {event['error']}")
            seg.tokens.extend(event.get("tokens") or ())
            piece = event.get("content") or ""
            if piece:
                seg.text += piece
                yield piece
            if event.get("stop"):
                seg.stop_type = event.get("stop_type")
                seg.timings = event.get("timings") or {}
                return
    raise BackendConnectionError(f"{seg.mode} closed the stream before its last event")


class Splice:
    """One probe-and-continue generation; iterate :meth:`run` for the text.

    Args:
        client: the backend client.
        pool: backends by mode.
        router: routing state (measurements, cache, policy).
        decision: the PROBE decision for this request.
        kind: chat or text completion.
        body: the OpenAI request body.
        on_switch: called with the winner once decided (for logs and headers).
    """

    def __init__(
        self,
        client: BackendClient,
        pool: BackendPool,
        router: Router,
        decision: Decision,
        kind: Kind,
        body: dict[str, Any],
        on_switch: Callable[[Mode], None] | None = None,
    ) -> None:
        if decision.plan.route is not Route.PROBE or decision.plan.floor is None:
            raise ValueError("Splice needs a PROBE decision with a floor")
        self.client, self.pool, self.router = client, pool, router
        self.decision, self.body = decision, body
        self.kind: Kind = kind
        self.on_switch = on_switch
        self.params = sampling_params(body)
        self.budget = max_new_tokens(body)
        self.segments: list[Segment] = []
        self.prompt: list[int] = []

    @property
    def tokens(self) -> list[int]:
        """Every token id generated so far, in order."""
        return [t for s in self.segments for t in s.tokens]

    @property
    def finish_stop_type(self) -> str | None:
        """The last segment's ``stop_type``."""
        return self.segments[-1].stop_type if self.segments else None

    def _remaining(self) -> int | None:
        return None if self.budget is None else self.budget - len(self.tokens)

    def _finished(self) -> bool:
        last = self.segments[-1]
        remaining = self._remaining()
        return last.stop_type != "limit" or (remaining is not None and remaining <= 0)

    async def _run_segment(self, mode: Mode, n_predict: int) -> AsyncIterator[str]:
        backend = self.pool.get(mode)
        seg = Segment(mode)
        self.segments.append(seg)
        self.router.in_flight[mode] += 1
        try:
            async for piece in segment_stream(
                self.client, backend.url, seg, self.prompt + self.tokens, self.params, n_predict
            ):
                yield piece
        finally:
            self.router.in_flight[mode] -= 1
        self.router.record(self.decision, mode, seg.timings)

    async def prepare(self) -> None:
        """Render and tokenize the prompt on the candidate backend (before any byte is sent).

        Raises:
            BackendError, InvalidRequestError: as :func:`prompt_ids`.
        """
        url = self.pool.get(self.decision.plan.mode).url
        self.prompt = await prompt_ids(self.client, url, self.kind, self.body)

    async def run(self) -> AsyncIterator[str]:
        """Run probe, floor probe if needed, and continuation; yield text as it arrives.

        Raises:
            BackendError: a backend failed; pieces already yielded stand.
        """
        try:
            async for piece in self._run():
                yield piece
        finally:
            # Each segment was recorded for its own mode; the decision row shows the
            # whole answer (router.record left the last segment's figures there).
            m = measurement_from_timings(self.final_timings())
            if m is not None:
                d = self.decision
                d.decode_tok_s, d.alpha, d.tau, d.tokens = m.decode_tok_s, m.alpha, m.tau, m.tokens

    async def _run(self) -> AsyncIterator[str]:
        plan = self.decision.plan
        cand, floor = plan.mode, plan.floor
        assert floor is not None  # noqa: S101 - checked in __init__
        probe_n = self.router.policy.probe_tokens
        if not self.prompt:
            await self.prepare()

        def n_next() -> int:
            remaining = self._remaining()
            return probe_n if remaining is None else min(probe_n, remaining)

        async for piece in self._run_segment(cand, n_next()):
            yield piece
        probe = self.segments[-1]
        self.decision.probe_tok_s = probe.decode_tok_s
        if self._finished():  # EOS, a stop string or the budget inside the probe
            self._settle(cand)
            return
        floor_tok_s = plan.floor_tok_s
        if floor_tok_s is None:  # first time for this class: the floor probes the next tokens
            async for piece in self._run_segment(floor, n_next()):
                yield piece
            floor_tok_s = self.segments[-1].decode_tok_s
        self.decision.floor_tok_s = floor_tok_s
        winner = cand if probe.decode_tok_s >= self.router.policy.margin * floor_tok_s else floor
        if winner is floor and self.segments[-1].mode is cand:
            # Handing over costs the floor a prefill of everything so far.
            prompt_n = int(probe.timings.get("prompt_n") or 0)
            prefill = probe.timings.get("prompt_per_second") if prompt_n >= 16 else None
            if not hand_over_pays(
                self._remaining(),
                len(self.prompt) + len(self.tokens),
                probe.decode_tok_s,
                floor_tok_s,
                float(prefill) if prefill else None,
            ):
                winner = cand
        self._settle(winner)
        if self._finished():
            return
        remaining = self._remaining()
        async for piece in self._run_segment(winner, -1 if remaining is None else remaining):
            yield piece

    def _settle(self, winner: Mode) -> None:
        """Record the winner and cache it for this request's key."""
        self.decision.winner = winner
        self.router.remember(self.decision.key, winner, self.decision.started)
        if self.on_switch is not None:
            self.on_switch(winner)

    def final_timings(self) -> dict[str, Any]:
        """Timings summed over the segments (decode tok/s over the whole answer)."""
        n = sum(int(s.timings.get("predicted_n") or 0) for s in self.segments)
        ms = sum(float(s.timings.get("predicted_ms") or 0.0) for s in self.segments)
        drafted = sum(int(s.timings.get("draft_n") or 0) for s in self.segments)
        accepted = sum(int(s.timings.get("draft_n_accepted") or 0) for s in self.segments)
        out: dict[str, Any] = {
            "predicted_n": n,
            "predicted_ms": ms,
            "predicted_per_second": n / ms * 1000 if ms > 0 else 0.0,
            "prompt_n": sum(int(s.timings.get("prompt_n") or 0) for s in self.segments),
            "prompt_ms": sum(float(s.timings.get("prompt_ms") or 0.0) for s in self.segments),
        }
        if drafted:
            out["draft_n"], out["draft_n_accepted"] = drafted, accepted
        return out

    def fronde_info(self) -> dict[str, Any]:
        """What the router did, for the ``fronde`` field of the response."""
        return {
            "class": str(Route.PROBE),
            "probed": str(self.decision.plan.mode),
            "mode": str(self.decision.winner) if self.decision.winner else None,
            "probe_tok_s": self.decision.probe_tok_s,
            "floor": str(self.decision.plan.floor),
            "floor_tok_s": self.decision.floor_tok_s,
            "segments": [
                {"mode": str(s.mode), "tokens": len(s.tokens), "decode_tok_s": s.decode_tok_s}
                for s in self.segments
            ],
        }
