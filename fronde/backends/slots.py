"""Which llama-server slot a request runs on: one next to the busy ones.

llama-server b11434 started with an explicit ``-np N`` keeps one KV stream per slot
(``kv_unified`` is only turned on when ``-np`` is left to auto, ``tools/server/server.cpp``),
and a decode step's batch is then cut into one micro-batch per run of consecutive slot
ids (``llama_batch_allocr::split_equal`` with ``sequential``, ``src/llama-batch.cpp``:
"accept only increasing sequence ids"). Each extra micro-batch is another forward pass,
and alternating ones keep llama.cpp's CUDA graphs from being reused. The server itself
picks a slot by prompt similarity, then the least recently used (``get_available_slot``
in ``tools/server/server-context.cpp``), so the busy ids scatter over the slots as
requests come and go. Sending each generation with ``id_slot`` set by Fronde keeps
them together: a free id next to the held ones (one that joins two runs first, then one
that extends a run, a gap inside them before the edges, the lowest on a tie; 0 when none
is held: :func:`next_slot`), so that a client whose next request comes before Fronde has
let go of its last slot does not open a gap.
Measured on an H200, one server with 16 slots, SmolLM2 streamed chat: 287, 656 and 1,253
tok/s at c = 2, 4 and 8 where the server picks, 832, 1,230 and 1,503 with the busy ids
together (``results/serving-probe-gpu-h200-20261204-pins/``).

A request that finds no slot of its server held goes without ``id_slot`` (a *loose*
one, :meth:`SlotPins.begin`), streamed or not: the server places it as it would alone,
by prompt similarity, then least recent use, so one client at a time gets the answers
of the server alone. Pinned to slot 0 every time instead, a request reused another cached
prefix than the server would have given it, and near-ties flipped: 18 of 66 SmolLM2
answers at c = 1 on the H200 differed from the plain server's
(``results/load-gpu-h200-cpu-smollm2-135m-20261204-pin32b``; 0 of 66 before pinning),
and ``tests/integration/test_slots_real.py`` finds one of eight here. When a request
needs a pin while a loose one is in flight, Fronde first reads which slots the server
shows busy (``GET /slots``) and holds those until the loose one ends
(:meth:`SlotPins.settle`). For a stream it reads them once the loose request's headers
came (b11434 sends them when it has given the request a slot); a whole answer's headers
come with its end, so for one Fronde reads ``/slots`` every :data:`WATCH_S` until a slot
it does not hold shows busy (the loose request placed) or the loose request ends.

A generation that finds every slot held waits in Fronde for one let go
(:meth:`SlotPins.wait_free`, at most :data:`FREE_WAIT_S`) and takes it, rather than going
without ``id_slot`` to the server's queue, where it could take the slot that a pinned
request just sent was on its way to.

A probed answer's segments on one server run on one slot (:meth:`SlotPins.keep`): the
probe's, whose KV cache holds the prompt and the tokens so far, so a continuation there
prefills only what is new (``cache_prompt``); the slot stays held between the segments.

Only for llama-servers Fronde started itself (``backend.pin_slots``): a remote replica's
slots are shared with clients Fronde does not see. A slot is let go when Fronde's request
ends; after a client that left, llama-server frees it 0.05–1.5 s later, and b11434 holds
a request sent to that slot meanwhile until it is free (it does not fail it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from fronde.json_types import JSON, JSONObject, json_int

__all__ = [
    "FREE_WAIT_S",
    "GENERATION_PATHS",
    "LOOKUP_S",
    "SETTLE_WAIT_S",
    "WATCH_S",
    "Pin",
    "SlotPins",
    "next_slot",
]

log = structlog.get_logger(__name__)

SETTLE_WAIT_S = 2.0
"""How long :meth:`SlotPins.settle` waits for a loose request to have a slot, s: its
headers (b11434 sends a stream's once the request has a slot, before its prefill), or,
for a whole answer, a busy slot in ``GET /slots``. Only reached when the server is stuck;
the lookup then goes ahead with what it shows (a stream), or holds nothing (a whole
answer)."""

WATCH_S = 0.005
"""Seconds between two ``GET /slots`` while :meth:`SlotPins.settle` waits for a loose
whole answer to show on a slot: b11434 gives a queued request a slot at its main loop's
next turn, so the first or second read shows it."""

FREE_WAIT_S = 30.0
"""Longest a generation waits for a slot to be let go while Fronde holds every slot of its
server, s (:meth:`SlotPins.wait_free`); then it goes without ``id_slot`` and the server
queues it. Sent without ``id_slot`` at once, such a request raced the pinned ones Fronde
had just sent: on the 2-core CPU (SmolLM2, 8 slots, 16 requests at once) one took the slot
a pinned request was on its way to, and that request waited a whole answer more."""

LOOKUP_S = 0.5
"""The longest :meth:`SlotPins.settle` waits for ``GET /slots``, s: b11434 posts it to
its main loop as a high-priority task, answered between two decode steps."""

GENERATION_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/chat/completions",
        "/v1/completions",
        "/completions",
        "/completion",
        "/v1/messages",
        "/v1/responses",
        "/infill",
    }
)
"""The llama-server paths whose requests take a slot (``/tokenize`` and the like do not)."""


def _unpinned(_url: str) -> int:
    return 0


def _free(held: frozenset[int], n: int) -> list[int]:
    """The ids of a server's ``n`` slots that ``held`` leaves free."""
    return [i for i in range(n) if i not in held]


def _processing(slots: JSON) -> set[int]:
    """The ids of the slots ``GET /slots`` shows processing (a list of ``{"id", "is_processing"}``).

    Raises:
        KeyError, TypeError, ValueError: not that shape; :meth:`SlotPins.settle` takes it as a
            failed lookup, as it did any error reading the answer.
    """
    if not isinstance(slots, list):
        raise ValueError("GET /slots did not answer a list")
    ids: set[int] = set()
    for slot in slots:
        if not isinstance(slot, dict):
            raise ValueError("GET /slots listed a slot that is not an object")
        if slot.get("is_processing"):
            ids.add(json_int(slot["id"]))
    return ids


def next_slot(held: frozenset[int], n: int) -> int | None:
    """The free slot id of ``n`` to take beside the ``held`` ones; None when all are held.

    Fewest runs of consecutive held ids after taking it first (it joins two, extends
    one, or stands alone); on a tie a gap inside the held ids' span before an edge (a
    later request can close the gap; a run extended outward leaves it open), then the
    lowest; 0 when none is held. Extending outward, the lowest first, the busy ids of
    gemma at 8 agents walked down one slot at a time from where the server had put the
    first request (slot 26 of 32, H100) and were split 18–46 % of the first 6 s against
    1–2 % after (``results/load-gpu-h100-cpu-gemma-270m-20261207-agent-fresh-done/``).
    """
    free = _free(held, n)
    if not free:
        return None
    lo, hi = (min(held), max(held)) if held else (0, 0)
    return max(free, key=lambda i: ((i - 1 in held) + (i + 1 in held), lo < i < hi, -i))


@dataclass(eq=False)
class Pin:
    """One generation's claim on its backend's slots (:meth:`SlotPins.begin`).

    Attributes:
        slot: the ``id_slot`` sent, or None: a *loose* one (:attr:`loose`).
        found: for a loose one, the slot ids the server showed busy and Fronde did not
            hold when another request needed a pin (:meth:`SlotPins.settle`); held
            until it ends.
        settled: for a loose one, whether that lookup has run.
        early: for a loose one, whether its response headers come once the server has
            given it a slot (a stream; else a whole answer, whose headers come with
            its end).
        sent: set once the request's response headers came (it has a slot) or it ended.
        lookup: for a loose one, its lookup under way (requests waiting share it).
    """

    slot: int | None
    found: frozenset[int] = frozenset()
    settled: bool = False
    early: bool = True
    sent: asyncio.Event = field(default_factory=asyncio.Event)
    lookup: asyncio.Task[None] | None = None

    @property
    def loose(self) -> bool:
        """Sent without ``id_slot`` (no slot of the server was held): the server places it."""
        return self.slot is None


class SlotPins:
    """The slot ids Fronde's requests hold on each backend, and the next one to use.

    Not thread-safe: used from the proxy's one event loop, with no await between
    :meth:`take` and the request that carries the id.
    """

    def __init__(self) -> None:
        self._count: Callable[[str], int] = _unpinned
        self._taken: dict[str, set[int]] = {}
        self._kept: dict[str, Counter[int]] = {}  # slots kept between a splice's segments
        self._loose: dict[str, Pin] = {}  # the loose generation in flight, per backend
        self._blind: set[str] = set()  # backends whose GET /slots failed: never loose
        self._freed: dict[str, asyncio.Event] = {}  # set when a slot is let go

    def count_with(self, count: Callable[[str], int]) -> None:
        """Pin on the backends for which ``count(base_url)`` (their ``-np``) is above 1."""
        self._count = count

    def take(self, base_url: str, path: str, body: JSONObject) -> int | None:
        """A free slot id of ``base_url`` for a request to ``path``, now held.

        The id keeps the held ids in as few runs of consecutive ids as it can (module
        docstring): the lowest free one while the held ones are 0…k−1.

        None (the server picks) for a path that takes no slot, a backend with one
        slot or none pinned, a body that names its own ``id_slot``, or every slot
        held (the server queues the request until one frees; the client first waits for one
        let go, :meth:`wait_free`, up to :data:`FREE_WAIT_S`).
        """
        n = self._pinnable(base_url, path, body)
        return self._take(base_url, n) if n else None

    def _take(self, base_url: str, n: int) -> int | None:
        """:meth:`take` on a backend of ``n`` slots, the request known to be pinnable."""
        slot = next_slot(self.held(base_url), n)
        if slot is not None:
            self._taken.setdefault(base_url, set()).add(slot)
        return slot

    def _pinnable(self, base_url: str, path: str, body: JSONObject) -> int:
        """``base_url``'s slot count when a request to ``path`` is pinned there, else 0."""
        n = self._count(base_url)
        if n <= 1 or path not in GENERATION_PATHS or "id_slot" in body:
            return 0
        return n

    def begin(self, base_url: str, path: str, body: JSONObject, early: bool = True) -> Pin | None:
        """The claim of a request to ``path`` on ``base_url``; None where nothing is pinned.

        Loose (no ``id_slot``, the server places it) when no slot of that server is held
        and no loose one is in flight, unless its ``GET /slots`` failed before; else
        :meth:`take`'s slot. ``early``: the request's response headers come once it has
        a slot (a stream), not with its end (a whole answer): :meth:`settle` waits for
        them, else it watches ``GET /slots``. Before it, call :meth:`settle` as long as
        :meth:`unsettled` says so (the loose request may end, and another begin, during
        a lookup); call :meth:`end` after the request.
        """
        n = self._pinnable(base_url, path, body)
        if not n:
            return None
        idle = not self.held(base_url) and base_url not in self._loose
        if idle and base_url not in self._blind:
            pin = Pin(None, early=early)
            self._loose[base_url] = pin
            return pin
        slot = self._take(base_url, n)
        return Pin(slot) if slot is not None else None

    def unsettled(self, base_url: str, path: str, body: JSONObject) -> bool:
        """Whether a request to ``path`` would be pinned beside a loose one of unknown slot."""
        pin = self._loose.get(base_url)
        return pin is not None and not pin.settled and bool(self._pinnable(base_url, path, body))

    async def settle(self, base_url: str, lookup: Callable[[], Awaitable[JSON]]) -> None:
        """Learn the slots of ``base_url``'s loose request in flight, and hold them.

        For a stream, waits for its response headers (at most :data:`SETTLE_WAIT_S`),
        then calls ``lookup`` (the server's ``GET /slots``: a list of ``{"id",
        "is_processing"}``, at most :data:`LOOKUP_S` each call); for a whole answer,
        calls it every :data:`WATCH_S` until a slot Fronde does not hold shows busy, the
        answer ends, or :data:`SETTLE_WAIT_S` has passed. The slots shown busy that
        Fronde does not hold are the loose request's (and any a client that left still
        holds): held until it ends. Requests waiting at once share the loose request's
        one lookup. A lookup that fails (a server started with ``--no-slots``) is logged
        once and the backend is pinned as before pinning left idle servers alone (every
        request pinned); one that times out holds nothing, so a later pin may land on
        the loose request's slot (the server then holds that request until it frees).
        """
        pin = self._loose.get(base_url)
        if pin is None or pin.settled:
            return
        if pin.lookup is None:
            pin.lookup = asyncio.ensure_future(self._learn(base_url, pin, lookup))
        await asyncio.shield(pin.lookup)

    async def _learn(self, base_url: str, pin: Pin, lookup: Callable[[], Awaitable[JSON]]) -> None:
        """:meth:`settle`'s lookup, run once per loose request."""
        busy: set[int] = set()
        try:
            if pin.early:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(pin.sent.wait(), SETTLE_WAIT_S)
                if self._loose.get(base_url) is pin:  # else it ended: nothing to hold
                    busy = await self._busy(base_url, lookup)
            else:
                busy = await self._watch(base_url, pin, lookup)
        except TimeoutError:
            log.warning("slots.lookup_slow", backend=base_url, after_s=LOOKUP_S)
        except Exception as exc:  # any other failure: this backend is pinned as before
            self._blind.add(base_url)
            log.warning("slots.lookup_failed", backend=base_url, error=repr(exc))
        finally:
            pin.settled = True
        if self._loose.get(base_url) is pin:  # no await since the lookup: busy is not held
            pin.found = frozenset(busy)
            self._taken.setdefault(base_url, set()).update(busy)

    async def _busy(self, base_url: str, lookup: Callable[[], Awaitable[JSON]]) -> set[int]:
        """The slot ids ``lookup`` shows processing that Fronde does not hold.

        Raises:
            TimeoutError: no answer within :data:`LOOKUP_S`.
        """
        return _processing(await asyncio.wait_for(lookup(), LOOKUP_S)) - self.held(base_url)

    async def _watch(
        self, base_url: str, pin: Pin, lookup: Callable[[], Awaitable[JSON]]
    ) -> set[int]:
        """A loose whole answer's slots: ``lookup`` until they show, it ends, or time is up.

        Raises:
            TimeoutError: one lookup took longer than :data:`LOOKUP_S`.
        """
        deadline = time.monotonic() + SETTLE_WAIT_S
        while self._loose.get(base_url) is pin:
            busy = await self._busy(base_url, lookup)
            if busy:
                return busy
            if time.monotonic() >= deadline:
                log.warning("slots.loose_unseen", backend=base_url, after_s=SETTLE_WAIT_S)
                break
            with contextlib.suppress(TimeoutError):  # ended meanwhile: the loop sees it
                await asyncio.wait_for(pin.sent.wait(), WATCH_S)
        return set()

    def full(self, base_url: str, path: str, body: JSONObject) -> bool:
        """Whether a request to ``path`` would be pinned on ``base_url`` and every slot is held."""
        n = self._pinnable(base_url, path, body)
        return bool(n) and not _free(self.held(base_url), n)

    async def wait_free(self, base_url: str, most_s: float = FREE_WAIT_S) -> bool:
        """Wait until a slot of ``base_url`` is let go; False after ``most_s`` seconds without.

        Every waiter wakes at each slot let go and checks :meth:`full` again (the first
        to run takes it, with no await before its :meth:`begin`).
        """
        freed = self._freed.setdefault(base_url, asyncio.Event())
        try:
            await asyncio.wait_for(freed.wait(), most_s)
        except TimeoutError:
            return False
        return True

    def _let_go(self, base_url: str) -> None:
        """Wake the requests waiting for a slot of ``base_url`` (:meth:`wait_free`)."""
        freed = self._freed.pop(base_url, None)
        if freed is not None:
            freed.set()

    def end(self, base_url: str, pin: Pin | None) -> None:
        """The request of ``pin`` (from :meth:`begin`; None is a no-op) has ended."""
        if pin is None:
            return
        pin.sent.set()
        if not pin.loose:
            self.give(base_url, pin.slot)
            return
        if self._loose.get(base_url) is pin:
            del self._loose[base_url]
        self._taken.get(base_url, set()).difference_update(pin.found)
        self._let_go(base_url)

    def give(self, base_url: str, slot: int | None) -> None:
        """Release ``slot`` (from :meth:`take`; None is a no-op)."""
        if slot is not None:
            self._taken.get(base_url, set()).discard(slot)
            self._let_go(base_url)

    def keep(self, base_url: str, slot: int) -> None:
        """Hold ``slot`` of ``base_url`` for requests that name it themselves (``id_slot``).

        A probed answer keeps its probe's slot until it ends, so that its next segment
        there finds the slot free and its cache whole; each :meth:`keep` needs one
        :meth:`unkeep`.
        """
        self._kept.setdefault(base_url, Counter())[slot] += 1

    def unkeep(self, base_url: str, slot: int) -> None:
        """Let go of one :meth:`keep` of ``slot``."""
        kept = self._kept.get(base_url)
        if kept is not None and kept[slot] > 0:
            kept[slot] -= 1
            if not kept[slot]:
                del kept[slot]
                self._let_go(base_url)

    def held(self, base_url: str) -> frozenset[int]:
        """The slot ids held on ``base_url`` now: taken by a request, or kept."""
        return frozenset(self._taken.get(base_url, ())) | frozenset(self._kept.get(base_url, ()))
