"""Where a request goes under load: the ``measured`` load rule's placements.

The ``measured`` rule (:mod:`fronde.router.policy`; the default with parallel slots,
``backend.parallel > 1``) plans a request alone by the ordinary rules. While other
requests are in flight or arriving, it places it by the **load curves**: the aggregate
decode tok/s of each mode's server alone against the requests in flight, measured per
machine, model and slot count by ``fronde bench load``
(:class:`~fronde.evidence.calibration.LoadCurves`). The load a placement reads is the
requests in flight, the requests received and not yet in flight (``arriving``: clients
that start at once are each placed for the load they make together; on the H200, gemma
at c = 32, counting only those planned before sent 22 of 100 requests to ngram-mod's
server as the clients started), and this one. The functions here answer with a mode;
:func:`~fronde.router.policy.plan_route` turns it into a plan of class ``load``.

Placements (``router.load_placement``):

- ``best`` (the default: within one H200 session it served more tok/s than ``threshold``
  at every c on gemma, ``results/load-gpu-h200-cpu-gemma-270m-20261203-bs2``, and at 5 of
  6 on SmolLM2 in an earlier form): the mode whose server alone serves the load best by
  its curve, or the busiest server whose curve is within ``load_band`` of that one: one
  GPU batches one server's requests together, so the requests gather where the best
  static server for that load would have them. Where the run also measured two plain
  servers against one (``plain2``) and a second process served more at that load
  (g = ``plain2 ÷ plain`` above 1 + ``load_band``: its step spent on the CPU, as gemma's
  sampling), the less busy of two servers instead, the best and the next best whose
  curve is at least (2/g − 1) × the best's: the requests spread over two processes.
- ``threshold``: baseline once the load reaches the load from which plain decoding's
  curve is the highest, else as planned (one server, no spreading; on the H200 on
  2026-12-02 ``marginal`` lost to it at 5 of 6 loads, in the SmolLM2 session of
  2026-12-03 at 3 of 6).
- ``marginal``: the planned mode keeps the request only if its backend's **marginal
  throughput** (the aggregate tok/s its curve gains from one more request at its
  current in-flight count) is within ``load_band`` of the best backend's; else that
  best backend. Several servers may decode at once.

Every placement, where ``plain2`` measured a second process to lose (g below 1 −
``load_band``, as two llama-servers decoding at once on 2 CPU cores: 0.01–0.03 ×),
joins the server already decoding rather than start another, unless the other's curve
beats it by (2/g − 1) ×, or, where g is at least :data:`MOVE_FLOOR` and that server
decodes alone, its curve is more than ``load_band`` below the best one's and the
other's within it (the requests move to the better server: :func:`_moves`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, Protocol

from fronde.modes import Mode

__all__ = ["MOVE_FLOOR", "Load", "LoadModel", "Placement", "place"]

Placement = Literal["marginal", "threshold", "best"]
"""``router.load_placement`` (see the module docstring)."""

MOVE_FLOOR = 0.25
"""The least ``plain2 ÷ plain`` (g) at which a request leaves a worse busy server.

A move starts a second process while the one busy server's requests drain, so it
costs up to 1 − g of the throughput for about the length of a request, which a curve
more than ``load_band`` better pays back once the requests that follow have joined it.
Below this the drain itself crawls: two llama-servers on 2 CPU cores served 0.01–0.03
× one (two slots a server, ``results/load-cpu-smollm2-135m-20261203-slots2-before``).
Every g the H200's load runs measured was 0.46 or more. Not measured as a threshold:
it lies between the two, about 8× above the CPU's and 2× below the H200's.
"""


class LoadModel(Protocol):
    """What the ``measured`` load rule asks of the load curves."""

    def marginal(self, mode: Mode, n: int) -> float | None:
        """Aggregate tok/s ``mode``'s backend gains from one more request at load ``n``.

        None when ``mode`` has no curve.
        """
        ...

    def aggregate(self, mode: Mode, n: int) -> float | None:
        """Aggregate tok/s of ``mode``'s backend alone with ``n`` requests in flight."""
        ...

    def threshold(self) -> int | None:
        """The load from which plain decoding's curve is the highest, or None."""
        ...

    def spread_gain(self, n: int) -> float | None:
        """Two servers' aggregate ÷ one's at load ``n``, or None when not measured."""
        ...


def _free_rates(
    usable: Collection[Mode],
    in_flight: Mapping[Mode, int],
    slots: int,
    rate: Callable[[Mode], float | None],
) -> dict[Mode, float]:
    """``rate`` of every usable mode whose backend has a free slot and a curve, tok/s."""
    return {
        m: r
        for m in Mode
        if m in usable and in_flight.get(m, 0) < slots and (r := rate(m)) is not None
    }


@dataclass(frozen=True)
class Load:
    """What a placement reads: the load and the measured curves.

    Attributes:
        in_flight: requests decoding per mode's backend.
        usable: modes ready and not quarantined.
        curves: the load curves.
        slots: slots per backend (``-np``).
        band: ``router.load_band``.
        arriving: other requests received and not yet in flight (they join the load).
    """

    in_flight: Mapping[Mode, int]
    usable: Collection[Mode]
    curves: LoadModel
    slots: int
    band: float
    arriving: int = 0

    @property
    def n(self) -> int:
        """The load once this request joins: in flight, arriving, plus this one."""
        return sum(self.in_flight.values()) + self.arriving + 1

    @cached_property
    def rates(self) -> dict[Mode, float]:
        """Each free backend's curve at :attr:`n` (aggregate tok/s, its server alone)."""
        n = self.n
        return _free_rates(
            self.usable, self.in_flight, self.slots, lambda m: self.curves.aggregate(m, n)
        )


def place(planned: Mode, load: Load, placement: Placement) -> Mode | None:
    """The mode a request planned for ``planned`` goes to under ``load``.

    ``placement`` picks the rule (see the module docstring); then the one-process
    guard. None: keep the plan as it is (``marginal`` with no backend that has a free
    slot and a curve).
    """
    if placement == "threshold":
        chosen = _threshold(planned, load)
    elif placement == "best":
        chosen = _best(planned, load)
    else:
        chosen = _marginal(planned, load)
    mode = _one_process(planned if chosen is None else chosen, load)
    return None if chosen is None and mode is planned else mode


def _marginal(planned: Mode, load: Load) -> Mode | None:
    """``marginal``: the backend whose curve gains most from one more; None if none can."""
    in_flight, curves = load.in_flight, load.curves
    gains = _free_rates(
        load.usable, in_flight, load.slots, lambda m: curves.marginal(m, in_flight.get(m, 0))
    )
    if not gains:
        return None
    best = max(gains.values())
    kept = gains.get(planned)
    if kept is not None and kept >= (1 - load.band) * best:
        return planned
    # Ties go to the least speculative mode (Mode's order): the cheapest to verify.
    return next(m for m in Mode if gains.get(m) == best)


def _one_process(chosen: Mode, load: Load) -> Mode:
    """Every placement: no second process decoding where one was measured to lose.

    Where two plain servers served g < 1 − ``band`` × one at this load
    (:meth:`LoadModel.spread_gain`; 0.01–0.03 × on 2 CPU cores with two slots a
    server, ``results/load-cpu-smollm2-135m-20261203-slots2-before``), a request the
    placement sends to an idle server (``chosen``) joins the server already decoding
    most instead, unless the idle one's curve B beats that one's A by the bound of
    :func:`_best` (a pair serves about g × (A + B) / 2, more than A alone only while
    B > (2/g − 1) × A), or it is a move (:func:`_moves`). Without the measurement, or
    with no server decoding that has a free slot, ``chosen`` stands.
    """
    gain = load.curves.spread_gain(load.n)
    if gain is None or gain >= 1 - load.band or load.in_flight.get(chosen, 0) > 0:
        return chosen
    rates = load.rates
    busy = _busiest(rates, load.in_flight)
    if busy is None:
        return chosen
    rate = rates.get(chosen)
    if rate is not None and (
        rate > (2 / gain - 1) * rates[busy] or _moves(chosen, busy, gain, load)
    ):
        return chosen
    return busy


def _moves(chosen: Mode, busy: Mode, gain: float, load: Load) -> bool:
    """Whether a request leaves the one busy server for ``chosen`` (:func:`_one_process`).

    Only where ``busy`` is the one server decoding, g (``gain``, ``plain2 ÷ plain`` at
    this load) ≥ :data:`MOVE_FLOOR`, ``busy``'s curve is more than ``band`` below the
    best free server's and ``chosen``'s is within ``band`` of it: among the servers
    :func:`_best` counts as equal to the best, and the only second process the move
    starts. Without it the first server a closed loop used kept every request: on the
    H200 (gemma, c = 2, ``results/load-gpu-h200-cpu-gemma-270m-20261204-lowb``) the
    first two requests went to cascade, the third, planned alone as they ended, to
    ngram-mod (288 tok/s at c = 2), and all 47 after it stayed there, with g = 0.83
    asking 1.41 × of cascade's 351. A request planned alone (load 1) still follows the
    ordinary rules, so each burst after an idle spell can move once more.
    """
    decoding = [m for m, k in load.in_flight.items() if k > 0]
    if gain < MOVE_FLOOR or decoding != [busy]:
        return False
    rates = load.rates
    top = max(rates.values())
    return rates[busy] < (1 - load.band) * top and rates[chosen] >= (1 - load.band) * top


def _best(planned: Mode, load: Load) -> Mode:
    """``best``: the server that serves the load in flight best.

    Among the servers whose curve at the load in flight is within ``band`` of the best,
    the busiest (one batch). Where two servers were measured to serve more than one at
    that load (:meth:`LoadModel.spread_gain` g above 1 + band), the less busy of two
    servers instead (two at most, what was measured): those already decoding, else the
    best by curve and the next best among those whose curve is at least (2/g − 1) × the
    best's. The bound: two plain servers serve g × one, so a pair of servers A and B,
    each taking its share in proportion to its own curve, serves about g × (A + B) / 2,
    more than A alone while B > (2/g − 1) × A (g = 1.8: any B above 0.11 A; g = 1.12:
    above 0.79 A). A band of ``band`` around the best alone never spread on the H200's
    in-session curves (SmolLM2 at c = 2: cascade 263, the next 248, g = 1.82), where
    the two plain servers of ``plain2`` served 1.8× one. Where g is below 1 − band, no
    second process starts unless the bound says so (:func:`_one_process`, every
    placement).
    """
    in_flight, band = load.in_flight, load.band
    rates = load.rates
    if not rates:
        return planned
    top = max(rates.values())
    order = list(Mode)
    gain = load.curves.spread_gain(load.n)
    if gain is not None and gain > 1 + band:
        # A second process adds throughput at this load (measured, plain2 ÷ plain): the
        # pair of servers (the bound in the docstring), then the less busy of the two.
        pair = [m for m in rates if rates[m] >= (2 / gain - 1) * top]
        pair.sort(key=lambda m: (-rates[m], m is not planned, order.index(m)))
        busy = [m for m in pair if in_flight.get(m, 0) > 0]
        pool = (busy + [m for m in pair if m not in busy])[:2]
        return min(pool, key=lambda m: (in_flight.get(m, 0), m is not planned, order.index(m)))
    # Join the server already decoding most (one batch on the GPU), then the planned
    # mode, then the least speculative (Mode's order: the cheapest to verify).
    near = [m for m in rates if rates[m] >= (1 - band) * top]
    return max(near, key=lambda m: (in_flight.get(m, 0), m is planned, -order.index(m)))


def _busiest(rates: Mapping[Mode, float], in_flight: Mapping[Mode, int]) -> Mode | None:
    """The server with a free slot (in ``rates``) that decodes the most requests; None if idle."""
    busy = [m for m in rates if in_flight.get(m, 0) > 0]
    return max(busy, key=lambda m: (in_flight[m], rates[m])) if busy else None


def _threshold(planned: Mode, load: Load) -> Mode:
    """``threshold``: baseline from the measured load on, else as planned."""
    threshold = load.curves.threshold()
    loaded = threshold is not None and load.n >= threshold
    free = Mode.BASELINE in load.usable and load.in_flight.get(Mode.BASELINE, 0) < load.slots
    return Mode.BASELINE if loaded and free else planned
