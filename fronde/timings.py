"""llama-server's ``timings`` object, parsed once, and the figures derived from it.

Every generation llama-server b11434 answers carries ``timings`` (its last stream
event does; ``tools/server/server-task.cpp``): ``prompt_n``/``prompt_ms`` (prefill),
``cache_n`` (prompt tokens reused from the slot's cache), ``predicted_n``/
``predicted_ms``/``predicted_per_second`` (decode, the first token excluded) and,
under speculation, ``draft_n``/``draft_n_accepted``.

The two speculation figures are defined here and nowhere else:

- **α** (acceptance rate) = ``draft_n_accepted`` ÷ ``draft_n``;
- **τ** (mean tokens per target pass): each pass yields one token of its own plus the
  drafts it accepted, so passes = ``predicted_n − draft_n_accepted`` and
  τ = ``predicted_n`` ÷ passes; 1.0 means no gain (Leviathan et al. 2023, §3).

**Per-token timings cut mid-pass.** With ``timings_per_token`` every streamed token
carries the counts so far, but llama-server adds a verify pass's accepted drafts to
``draft_n_accepted`` *before* it sends that pass's tokens one by one
(``server-context.cpp``: ``n_draft_accepted += n_accepted``, then ``n_gen += 1`` per
token sent). When Fronde ends a stream on a stop string inside such a pass, the last
timings count drafts that were never sent: on a copy-heavy edit ``draft_n_accepted``
reached ``predicted_n``, so passes came to ≤ 0 and τ to None while α showed.
:class:`TimingsTrail` follows the per-token timings and counts, of the current pass,
only the accepted drafts already sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fronde.json_types import JSONObject, json_object

__all__ = ["Timings", "TimingsTrail"]


def _int(obj: Mapping[str, object], key: str) -> int:
    value = obj.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _float(obj: Mapping[str, object], key: str) -> float:
    value = obj.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


@dataclass(frozen=True)
class Timings:
    """One generation's ``timings`` (counts in tokens, times in ms, speeds in tok/s)."""

    predicted_n: int
    predicted_per_second: float
    predicted_ms: float = 0.0
    prompt_n: int = 0
    prompt_ms: float = 0.0
    cache_n: int = 0
    draft_n: int = 0
    draft_n_accepted: int = 0

    @classmethod
    def parse(cls, obj: object) -> Timings | None:
        """Read a ``timings`` JSON object.

        Returns:
            None unless it has ``predicted_n`` and ``predicted_per_second`` as numbers;
            missing optional fields count 0.
        """
        t = json_object(obj)
        if t is None:
            return None
        n, tps = t.get("predicted_n"), t.get("predicted_per_second")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (n, tps)):
            return None
        return cls(
            predicted_n=_int(t, "predicted_n"),
            predicted_per_second=_float(t, "predicted_per_second"),
            predicted_ms=_float(t, "predicted_ms"),
            prompt_n=_int(t, "prompt_n"),
            prompt_ms=_float(t, "prompt_ms"),
            cache_n=_int(t, "cache_n"),
            draft_n=_int(t, "draft_n"),
            draft_n_accepted=_int(t, "draft_n_accepted"),
        )

    @classmethod
    def total(cls, parts: Iterable[Timings]) -> Timings:
        """The timings of one answer made of ``parts`` (probe-and-continue segments).

        Counts and times are summed; decode tok/s is over the summed decode time.
        """
        ps = list(parts)
        n = sum(p.predicted_n for p in ps)
        ms = sum(p.predicted_ms for p in ps)
        return cls(
            predicted_n=n,
            predicted_per_second=n / ms * 1000 if ms > 0 else 0.0,
            predicted_ms=ms,
            prompt_n=sum(p.prompt_n for p in ps),
            prompt_ms=sum(p.prompt_ms for p in ps),
            cache_n=sum(p.cache_n for p in ps),
            draft_n=sum(p.draft_n for p in ps),
            draft_n_accepted=sum(p.draft_n_accepted for p in ps),
        )

    @property
    def alpha(self) -> float | None:
        """α = accepted ÷ drafted; None when nothing was drafted."""
        return self.draft_n_accepted / self.draft_n if self.draft_n else None

    @property
    def tau(self) -> float | None:
        """τ = tokens per target pass; None when nothing was drafted."""
        passes = self.predicted_n - self.draft_n_accepted
        return self.predicted_n / passes if self.draft_n and passes > 0 else None

    def usage(self) -> dict[str, int]:
        """OpenAI ``usage``: prompt = evaluated + reused from the cache."""
        prompt = self.prompt_n + self.cache_n
        return {
            "prompt_tokens": prompt,
            "completion_tokens": self.predicted_n,
            "total_tokens": prompt + self.predicted_n,
        }

    def as_json(self) -> JSONObject:
        """The ``timings`` object as llama-server writes it (drafts only when drafted)."""
        out: JSONObject = {
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            "predicted_per_second": self.predicted_per_second,
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
        }
        if self.draft_n:
            out["draft_n"], out["draft_n_accepted"] = self.draft_n, self.draft_n_accepted
        return out


class TimingsTrail:
    """A stream's per-token ``timings``, folded so that a cut mid-pass stays consistent.

    Feed every ``timings`` object of one stream, in order (:meth:`add`); :attr:`latest`
    is the last one with ``draft_n_accepted`` counting only the accepted drafts sent so
    far (see the module docstring). A verify pass that accepted ``a`` drafts sends
    ``a + 1`` tokens, the drafts first, each with ``draft_n_accepted`` already
    including all ``a``; after ``j`` of them, ``min(j, a)`` were drafts, and the
    ``a − j`` drafts not sent yet are taken out of both ``draft_n_accepted`` and
    ``draft_n`` (as if the pass had drafted only what was sent, and what it rejected). The
    correction needs the pass's first token to have been seen right after the one
    before (``predicted_n`` one apart); otherwise, as with timings sent only at the
    end, the object is kept as llama-server wrote it.
    """

    def __init__(self) -> None:
        self.latest: JSONObject | None = None
        self._n = 0  # predicted_n of the last object seen
        self._accepted = 0  # draft_n_accepted as llama-server reported it last
        self._before = 0  # draft_n_accepted before the current pass
        self._first = 0  # predicted_n of the current pass's first token; 0: unknown

    def add(self, obj: object) -> JSONObject | None:
        """Fold in one ``timings`` object; return it folded, or None (ignored) unless it parses."""
        raw = json_object(obj)
        if raw is None or Timings.parse(raw) is None:
            return None
        n, accepted = _int(raw, "predicted_n"), _int(raw, "draft_n_accepted")
        if accepted != self._accepted:  # a new verify pass: its first token is this one
            self._before, self._accepted = self._accepted, accepted
            self._first = n if n == self._n + 1 and accepted > self._before else 0
        self._n = n
        unsent = accepted - self._before - (n - self._first + 1)
        if self._first and unsent > 0:
            drafted = _int(raw, "draft_n") - unsent
            self.latest = {**raw, "draft_n": drafted, "draft_n_accepted": accepted - unsent}
        else:
            self.latest = raw
        return self.latest
