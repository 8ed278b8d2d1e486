"""Time saved: routed requests' decode time against one plain server's, from measured speeds.

"Is Fronde making me faster?" For each static class the router keeps running totals
of the requests it routed, per mode that decoded them (:class:`Served`: tokens and
decode seconds from llama-server's ``timings``, a probe's segments each under its own
mode). Against a **reference** mode ``R`` measured at ``v`` decode tok/s in that class,
the time saved is

    saved = Σ over the other modes m of (tokens_m ÷ v − decode seconds_m)

(positive: Fronde was faster than sending them all to ``R``), summed over the
classes. Tokens ``R`` decoded itself add nothing: what ``R`` would have taken for them
is what it took, so a class served by its floor alone saved 0 s against the floor,
whatever the noise between its requests. Two references are shown: the class's
**floor** (what Fronde serves when it has nothing to probe) and **baseline** (one
plain llama-server). ``v`` is the router's trusted speed of ``R`` in the class, the
median of its fresh samples
(:meth:`~fronde.evidence.measure.Measurements.trusted_speed`), at the time of asking;
a class that needs ``v`` and has none is left out and named, never estimated.

What is counted: decode time only (prefill excluded; so is a probe's hand-over
re-prefill), and neither forced requests (the client chose the mode) nor
unsafe-for-spec ones (baseline by rule, whatever is faster). Pure bookkeeping, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

__all__ = ["Reference", "Saving", "SavingView", "Served", "ServedView", "time_saved"]


class ServedView(TypedDict):
    """:meth:`Served.as_dict`: requests, per-mode counts, tokens, decode seconds."""

    requests: int
    modes: dict[str, int]
    tokens: int
    decode_s: float


class SavingView(TypedDict):
    """:meth:`Saving.as_dict`: seconds rounded to ms, ``speedup`` the ratio or None."""

    saved_s: float | None
    requests: int
    tokens: int
    decode_s: float
    reference_s: float
    speedup: float | None
    by_class: dict[str, float | None]
    missing: dict[str, str]


@dataclass
class Served:
    """Running totals of the routed requests of one class.

    Attributes:
        requests: answered requests.
        modes: answered requests per mode that served them (a probe's winner).
        tokens: generated tokens (``predicted_n``) per mode that decoded them.
        decode_s: decode seconds (``predicted_ms`` ÷ 1000) per mode that spent them.
    """

    requests: int = 0
    modes: Counter[str] = field(default_factory=Counter[str])
    tokens: Counter[str] = field(default_factory=Counter[str])
    decode_s: dict[str, float] = field(default_factory=dict[str, float])

    def add(self, mode: str, tokens: int, decode_s: float) -> None:
        """Count one generation (a request's, or one segment of a probe's) on ``mode``.

        Raises:
            ValueError: ``tokens`` or ``decode_s`` is negative.
        """
        if tokens < 0 or decode_s < 0:
            raise ValueError(f"tokens {tokens} and decode_s {decode_s} must be ≥ 0")
        self.tokens[mode] += tokens
        self.decode_s[mode] = self.decode_s.get(mode, 0.0) + decode_s

    def answered(self, mode: str) -> None:
        """Count one answered request, served by ``mode`` (a probe's winner)."""
        self.requests += 1
        self.modes[mode] += 1

    def as_dict(self) -> ServedView:
        """JSON-ready view."""
        return {
            "requests": self.requests,
            "modes": dict(self.modes),
            "tokens": sum(self.tokens.values()),
            "decode_s": round(sum(self.decode_s.values()), 3),
        }


@dataclass(frozen=True)
class Reference:
    """A class's reference mode and its measured decode speed.

    Attributes:
        mode: the reference mode (the class's floor, or baseline).
        tok_s: its trusted decode tok/s in the class, or None when not measured enough.
        why: when ``tok_s`` is None, why (e.g. ``baseline: 1 of 3 fresh samples``).
    """

    mode: str
    tok_s: float | None
    why: str = ""


@dataclass(frozen=True)
class Saving:
    """Time saved against one reference, over every class.

    Attributes:
        saved_s: Σ over the counted classes of (tokens ÷ reference tok/s − decode s),
            seconds; None when no class with requests could be counted.
        requests: requests counted.
        tokens: their tokens.
        decode_s: their actual decode seconds.
        reference_s: the decode seconds the references would have taken for them.
        by_class: class → its own saved seconds, or None when not counted.
        missing: class → why it was not counted (its reference has no trusted speed).
    """

    saved_s: float | None
    requests: int
    tokens: int
    decode_s: float
    reference_s: float
    by_class: dict[str, float | None]
    missing: dict[str, str]

    @property
    def ratio(self) -> float | None:
        """Reference seconds ÷ actual seconds (above 1: faster), or None."""
        if self.saved_s is None or self.decode_s <= 0:
            return None
        return self.reference_s / self.decode_s

    def as_dict(self) -> SavingView:
        """JSON-ready view (seconds rounded to ms)."""
        ratio = self.ratio
        return {
            "saved_s": None if self.saved_s is None else round(self.saved_s, 3),
            "requests": self.requests,
            "tokens": self.tokens,
            "decode_s": round(self.decode_s, 3),
            "reference_s": round(self.reference_s, 3),
            "speedup": None if ratio is None else round(ratio, 3),
            "by_class": {c: None if v is None else round(v, 3) for c, v in self.by_class.items()},
            "missing": self.missing,
        }


def time_saved(served: Mapping[str, Served], references: Mapping[str, Reference]) -> Saving:
    """Time saved by the routed requests against one reference per class.

    Args:
        served: class → running totals of its routed requests.
        references: class → its reference mode and measured speed; a class missing
            here counts as unmeasured.

    Returns:
        The saving; classes with no request are left out, classes that need their
        reference's speed (another mode decoded some of their tokens) and have none
        are named in ``missing`` and add nothing.

    Example: against a reference measured at 40 tok/s, 300 tokens another mode decoded
    in 5 s would have taken 7.5 s: 2.5 s saved; 100 tokens the reference decoded
    itself add 0 s, however long they took.
    """
    by_class: dict[str, float | None] = {}
    missing: dict[str, str] = {}
    requests = tokens = 0
    decode_s = reference_s = 0.0
    for cls, s in served.items():
        if not s.tokens:
            continue
        ref = references.get(cls)
        own = ref.mode if ref is not None else None
        others = {m: n for m, n in s.tokens.items() if m != own and n > 0}
        speed = ref.tok_s if ref is not None and ref.tok_s is not None and ref.tok_s > 0 else None
        if others and speed is None:
            by_class[cls] = None
            missing[cls] = ref.why if ref is not None and ref.why else "no measured speed"
            continue
        spent = sum(s.decode_s.values())
        # The reference's own tokens cost what they cost; the others at its speed.
        would = sum(s.decode_s.get(m, 0.0) for m in s.tokens if m not in others)
        would += sum(n / speed for n in others.values()) if speed is not None else 0.0
        by_class[cls] = would - spent
        requests += s.requests
        tokens += sum(s.tokens.values())
        decode_s += spent
        reference_s += would
    counted = any(v is not None for v in by_class.values())
    return Saving(
        saved_s=reference_s - decode_s if counted else None,
        requests=requests,
        tokens=tokens,
        decode_s=decode_s,
        reference_s=reference_s,
        by_class=by_class,
        missing=missing,
    )
