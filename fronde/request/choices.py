"""The choices of one relayed stream, each with its own stop strings, timings and usage.

A text completion that lists several prompts (:mod:`fronde.request.prompts`)
is one llama-server b11434 request answered as one stream of several choices
(``handle_completions_impl`` in ``tools/server/server-context.cpp``): every chunk
carries one choice, whose ``index`` is its prompt's position; each prompt's last chunk
carries its ``finish_reason``, its own ``usage`` and ``timings``; one ``[DONE]`` ends
the stream. With one slot the prompts run one after the other; with several their
chunks interleave. Each task but the first also sends a "begin" result, which only
the first may turn into the response's headers: the others reach the stream as
``data: null`` (``server_task_result_cmpl_partial::to_json`` returns null,
``format_oai_sse`` writes it), an event no OpenAI client can read (the ``openai`` SDK
raises ``AttributeError``). The relay drops those.

So whatever is kept per answer is kept per choice here: the stop strings Fronde
applies (:class:`OwnedStops`, one :class:`~fronde.request.stops.StopMatcher` per
choice, so a stop string never spans two prompts' texts) and the timings and usage
(:class:`ChoiceBook`), whose sum is the one usage chunk a client that asked for
``stream_options.include_usage`` gets.
"""

from __future__ import annotations

from collections.abc import Iterable

from fronde.backends.held_stop import HeldStopText
from fronde.json_types import JSON, JSONObject
from fronde.request.prompts import prompt_count
from fronde.request.stops import StopMatcher
from fronde.timings import Timings, TimingsTrail

__all__ = ["ChoiceBook", "OwnedStops", "choice_index", "summed_usage", "take_stops"]


def choice_index(choice: JSONObject) -> int:
    """A chunk's choice's ``index`` (0 when it has none, as a one-choice answer)."""
    index = choice.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


def summed_usage(parts: Iterable[JSONObject]) -> JSONObject:
    """OpenAI ``usage`` objects added up: integers summed, nested objects alike.

    ``prompt_tokens_details.cached_tokens`` of several prompts sums as their token
    counts do; a field some parts lack counts 0 for them.
    """
    out: JSONObject = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                before = out.get(key)
                seen: JSONObject = before if isinstance(before, dict) else {}
                out[key] = summed_usage([seen, value])
            elif isinstance(value, int) and not isinstance(value, bool):
                before = out.get(key)
                out[key] = (before if isinstance(before, int) else 0) + value
    return out


class ChoiceBook:
    """Per choice: its ``timings`` trail and the ``usage`` llama-server reported for it.

    A choice's usage is what its last chunk reported, else (a choice Fronde cut on a
    stop string, or a build that reports none) what its latest timings count.
    """

    def __init__(self) -> None:
        self.trails: dict[int, TimingsTrail] = {}
        self.reported: dict[int, JSONObject] = {}
        self.last_index = 0

    def add_timings(self, index: int | None, obj: object) -> JSONObject | None:
        """Fold one ``timings`` object into choice ``index``'s trail; return it folded or None.

        ``index`` None (a chunk with no choice, such as a usage chunk): the choice seen
        last.
        """
        if index is None:
            index = self.last_index
        self.last_index = index
        return self.trails.setdefault(index, TimingsTrail()).add(obj)

    def timings(self, index: int) -> JSONObject | None:
        """Choice ``index``'s latest timings (see :class:`~fronde.timings.TimingsTrail`)."""
        trail = self.trails.get(index)
        return None if trail is None else trail.latest

    def add_usage(self, index: int, usage: JSON) -> None:
        """Keep the ``usage`` a chunk of choice ``index`` carried."""
        if isinstance(usage, dict):
            self.reported[index] = usage

    def usage(self) -> JSONObject | None:
        """The usage of every choice, summed; None when no choice has any."""
        parts: list[JSONObject] = []
        for index in sorted(self.trails.keys() | self.reported.keys()):
            if index in self.reported:
                parts.append(self.reported[index])
            elif (parsed := Timings.parse(self.timings(index))) is not None:
                parts.append({**parsed.usage()})
        return summed_usage(parts) if parts else None


class OwnedStops:
    """Stop strings Fronde applies to a relayed stream (see :mod:`~fronde.request.relay`).

    One :class:`~fronde.request.stops.StopMatcher` per choice.

    Args:
        stops: the request's stop strings.
        chat: True for chat chunks (``delta.content``), False for text completions.
        choices: how many choices the answer has (one per prompt).

    Attributes:
        cut: the choices a stop string ended; their later chunks are not the client's.
        ended: the choices that have ended, on a stop string or their own
            ``finish_reason``.
    """

    def __init__(self, stops: list[str], *, chat: bool, choices: int = 1) -> None:
        self.stops = stops
        self.chat = chat
        self.choices = choices
        self.matchers: dict[int, StopMatcher] = {}
        self.cut: set[int] = set()
        self.ended: set[int] = set()

    @staticmethod
    def take(
        body: JSONObject, *, chat: bool, held_text_sent: bool = False
    ) -> tuple[JSONObject, OwnedStops | None]:
        """Take ``body``'s stop strings for Fronde to apply: (upstream body, stops or None).

        The upstream body has no ``stop`` and asks for ``timings_per_token``. Requests
        with tools keep their stops upstream (None): llama-server applies them to the
        raw text it parses tool calls from, which a relay cannot see. So do all
        requests to a server whose streams send the text held back for a partial match
        (``held_text_sent``, patch 0009: :mod:`fronde.backends.held_stop`): there
        llama-server's own matching gives the text Fronde's would.
        """
        stop = body.get("stop")
        if isinstance(stop, str):
            stop = [stop]
        upstream_applies = held_text_sent or body.get("tools") or body.get("functions")
        if upstream_applies or not isinstance(stop, list):
            return body, None
        owned = [s for s in stop if isinstance(s, str) and s]
        if not owned:
            return body, None
        upstream: JSONObject = {k: v for k, v in body.items() if k != "stop"}
        upstream["timings_per_token"] = True
        choices = 1 if chat else prompt_count(body.get("prompt"))
        return upstream, OwnedStops(owned, chat=chat, choices=choices)

    def _text(self, choice: JSONObject) -> str:
        if self.chat:
            delta = choice.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else None
        else:
            piece = choice.get("text")
        return piece if isinstance(piece, str) else ""

    def _set_text(self, choice: JSONObject, text: str) -> None:
        if self.chat:
            delta = choice.setdefault("delta", {})
            if not isinstance(delta, dict):
                raise TypeError("a chat chunk's delta is not an object")  # as before: no item
            if text or "content" in delta:
                delta["content"] = text
        else:
            choice["text"] = text

    def rewrite(self, event: JSONObject) -> bool:
        """Apply the stops to one chunk in place; True when the answer is over.

        On a match the chunk keeps its choice's text before it and gets
        ``finish_reason: "stop"``; a chunk with a ``finish_reason`` of its own also gets
        the text its choice held back. The answer is over when a stop string ended
        the last choice still open (a choice that ended on its own leaves the rest of
        the stream, its usage among it, to the backend).

        Raises:
            RuntimeError: a chunk of a choice in :attr:`cut` (the caller drops those).
        """
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices:
            return False
        choice = choices[0]
        if not isinstance(choice, dict):
            raise TypeError("a chunk's choice is not an object")  # as before: no .get
        index = choice_index(choice)
        matcher = self.matchers.setdefault(index, StopMatcher(self.stops))
        piece = self._text(choice)
        out = matcher.feed(piece) if piece else ""
        if matcher.stopped:
            self._set_text(choice, out)
            choice["finish_reason"] = "stop"
            self.cut.add(index)
            self.ended.add(index)
            return len(self.ended) >= self.choices
        if choice.get("finish_reason") is not None:
            out += matcher.flush()
            self.ended.add(index)
        if piece or out:
            self._set_text(choice, out)
        return False


async def take_stops(
    body: JSONObject, *, chat: bool, url: str, held: HeldStopText
) -> tuple[JSONObject, OwnedStops | None]:
    """The stop strings of a request Fronde streams from the server at ``url``.

    The one rule for every such request, a relayed stream and a whole answer alike
    (:func:`~fronde.request.collect.answer_whole` asks for a stream too):
    :meth:`OwnedStops.take`, given whether that server's streams send the text held back
    for a partial match (``held``, its ``/props`` read once). A body without ``stop``
    costs no ``/props`` read. The probe's segments are not sent here: a stop string may
    span two segments, so :mod:`fronde.request.splice` always matches them itself.

    Returns:
        (the upstream body, the stops Fronde applies or None). Never raises.
    """
    if "stop" not in body:
        return body, None
    return OwnedStops.take(body, chat=chat, held_text_sent=await held.sent(url))
