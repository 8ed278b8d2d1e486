# pyright: reportUnknownMemberType=false
"""The load benchmark: many agents at once, Fronde against one static llama-server.

A user who runs several agents, or a team sharing one GPU, asks: with c requests in
flight, does Fronde serve more tokens per second than the one llama-server I would run
instead, without a worse tail? Speculation's worth changes with the batch (llama.cpp
reports a net loss at two or more parallel requests), so each c is measured apart.

**Arms** (every one with the same slots, ``-np N``, and context): static llama-servers
``plain`` (no speculation), ``default`` (``--spec-default``) and ``cascade``
(``--spec-type ngram-simple,ngram-mod``); a static server with Fronde's argv for each
Fronde mode no static arm already runs (``s-simple``, …: the **calibration** of that
mode's backend); ``plain2``, two plain servers behind a least-busy choice
(:data:`SPREAD`: does spreading pay at this c?); ``fr-plain``, `fronde serve` with
baseline alone, every request forced to it (:data:`PROXY`: what the proxy itself
changes); and the router arms, `fronde serve` with every mode and the ``measured``
load rule. A mode's backend is the same as a
static arm when both start the same speculation (``--spec-default`` is ngram-mod with
n_match 24, n_min 48, n_max 64, also its defaults; ``common/arg.cpp``), so that arm's
curve is the mode's.

**Order.** Every static block first, each (arm, c) on fresh servers; then the load
curves (aggregate tok/s against c, per mode) are saved where ``fronde serve`` reads
them (:mod:`fronde.evidence.calibration`, ``load.json``); then the router at every c,
on fresh servers, reading them. The curves are measured on the same prompts the router
is then judged on (in-sample for one number per mode and c; said on the page).

**Workload.** The agent mix: workload A's first-encounter prompts (the run's token
budget) and workload B's agent steps (their own budgets: whole-file answers), in one
seeded shuffle, each sent once per block: a prompt repeated within a block would be
drafted from ngram-mod's memory. c clients run a closed loop over it.

**Figures** per (arm, c), medians over repetitions: ``tok_s``, aggregate decode tok/s
in the block's **steady window**, from the first request sent to the last one sent
(:func:`steady_window`: all c clients busy; each request's tokens spread evenly from
its first token to its end, the part inside the window counted); ``p50_s``,
``p99_s``, end-to-end latency of one request; ``ttft_s``, its median time to first
token; ``in_flight``, mean requests in flight in that window. An item whose answer
looped (repetition score above :data:`~fronde.bench.verdict.LOOP_SCORE`) in any arm
is left out of the tokens and the latencies of every arm, and listed; its time still
counts in the window (``--skip-from`` leaves such items out of a later run).

**Verdict** per router arm and c: its tok/s ≥ the best static arm's (calibration
servers included: a user could run any of them), and its p99 ≤ that arm's. Three router
arms by default, one per placement of the measured rule: ``router`` (``marginal``:
the backend whose curve gains most, so several servers may decode at once),
``router-b`` (``best``, the setting's default: the mode whose server alone serves the
load in flight best, gathering the requests in one batch, or spreading them over two
where a second process was measured to pay) and ``router-t`` (``threshold``: plain
decoding from the measured load on). The verdict lines, the page and
the plot: :mod:`fronde.bench.load_page` (with the held-out ratio).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

import numpy as np

from fronde.bench.arms import ARMS, Arm, static_argv
from fronde.bench.protocol import Level, Plan
from fronde.bench.verdict import LOOP_SCORE
from fronde.bench.workloads import Form, Workload, load_workload
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.modes import Mode
from fronde.timings import Timings

__all__ = [
    "CLIENTS",
    "PROXY",
    "SPREAD",
    "LoadRow",
    "LoadSetup",
    "agent_mix",
    "arm_about",
    "level_c",
    "load_rows",
    "load_setup",
    "looping_items",
    "spec_of",
    "steady_window",
]

CLIENTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
"""Concurrent clients measured by default (the issue's c = 1 … 32)."""

STATIC = ("plain", "default", "cascade")
"""The static arms a user would run instead of Fronde."""

SPREAD = Arm(
    "plain2",
    "static",
    servers=2,
    about="two plain llama-servers, each request to the less busy: does spreading pay?",
)
"""Two servers of the plain arm's argv: the aggregate of two processes on one machine
against one (``plain``) at each c. On the H200 two processes took turns on the GPU
where it was the limit and gained where the step was spent on the CPU
(``results/serving-probe-gpu-h200-20261203``): this arm measures it on the benchmark's
own requests. Not a single server: left out of the verdict's best static arm."""

PROXY = Arm(
    "fr-plain",
    "fronde",
    Mode.BASELINE,
    about="Fronde in front of the plain server alone (`fronde serve --mode baseline`, "
    "every request forced there): the proxy without routing",
)
"""Fronde's proxy in front of baseline's server, nothing routed: the same server as
``plain`` (``backend.plain_args`` included) reached through Fronde. ``fr-plain ÷
plain`` is what the hop itself changes; a router arm ÷ ``fr-plain`` is what routing
adds, with the router's other servers up beside it (``fr-plain`` starts one). On the
H200 (2026-12-04, gemma, c = 32) ``router-b`` sent every request to baseline and read
1.13–1.20× ``plain``, ``fr-plain`` 1.17×, while the hop measured alone
(``scripts/gpu/hop_probe.py``, 10 paired blocks) read 0.99× [0.94, 1.03]: a tie read
through the spread of blocks. Not a single server: left out of the verdict's best
static arm."""

ROUTERS = {"marginal": "router", "threshold": "router-t", "best": "router-b"}
"""The router arm of each placement of the measured load rule."""

SHORT = {
    Mode.BASELINE: "base",
    Mode.NGRAM_SIMPLE: "simple",
    Mode.NGRAM_MOD: "mod",
    Mode.CASCADE: "casc",
    Mode.DRAFT: "draft",
}

NGRAM_MOD_DEFAULTS = ("24", "48", "64")
"""ngram-mod's n_match, n_min, n_max when no flag names them (``common/common.h``)."""


def _probe_about(mode: Mode) -> str:
    return f"llama-server as {mode}"


def _router_about(placement: str) -> str:
    return f"Fronde routing, measured load rule, {placement} placement"


def arm_about(name: str) -> str:
    """What a load run's arm ``name`` is, in words, as the page's legend says it.

    The static arms' own descriptions, :data:`SPREAD`'s, a calibration server's
    (``s-simple`` → ``llama-server as ngram-simple``) and a router arm's placement;
    the name itself for an arm this code does not know (a run of older code).
    """
    known = {a.name: a.about for a in (*ARMS, SPREAD, PROXY)}
    known |= {r: _router_about(p) for p, r in ROUTERS.items()}
    known |= {f"s-{short}": _probe_about(m) for m, short in SHORT.items()}
    return known.get(name, name)


def bracketed(reps: int) -> list[tuple[str, int]]:
    """The order of a load run's parts: ``("static" | "router", repetition)``.

    Repetition 0 runs the static arms first (the router arms read their curves), then
    the two plans alternate which goes first, A B B A: ``static 0, router 0, router 1,
    static 1, static 2, router 2, …``. Run one after the other, every router block came
    after every static block, so a drift over a lease fell on the router arms alone
    (H200, gemma, 2026-12-04 10:24: the static arms' second blocks, run later, decoded
    0.87× and 0.85× as fast a request as their first at c = 2 and 4, the geometric mean
    over five arms, loops left out); bracketed, the two plans' mean places in the run
    are the same for an even number of repetitions. The router arms of repetition 1
    read the curves of repetition 0 alone: curves measured before them, as a user's
    would be.

    Args:
        reps: repetitions of every block, at least 1.

    Returns:
        2 × ``reps`` parts in run order.
    """
    out: list[tuple[str, int]] = []
    for rep in range(reps):
        pair = [("static", rep), ("router", rep)]
        out += pair[::-1] if rep % 2 else pair
    return out


def agent_mix(items: int | None = None, seed: int = 23, skip: Sequence[str] = ()) -> Workload:
    """Workload A's prompts and workload B's agent steps, shuffled with ``seed``.

    ``skip`` leaves those item ids out (the items an earlier run found looping: a
    looping answer's time fills the span while its tokens count nowhere); ``items``
    then keeps the first that many of the shuffled mix (all when None).
    """
    mix = [*load_workload("first-encounter").items, *load_workload("agent-sessions").items]
    random.Random(seed).shuffle(mix)  # noqa: S311 - a reproducible order, not a secret
    left = set(skip)
    return Workload("agent-mix", tuple([i for i in mix if i.id not in left][:items]))


def spec_of(args: Sequence[str]) -> tuple[str, ...]:
    """The speculation an argv starts: spec types and ngram-mod's (n_match, n_min, n_max).

    ``()`` for plain decoding. ``--spec-default`` is ngram-mod at its defaults
    (b11434 ``common/arg.cpp``). Other flags are not looked at: the arms compared
    share them.
    """
    a = list(args)
    if "--spec-default" in a:
        return ("ngram-mod", *NGRAM_MOD_DEFAULTS)
    if "--spec-type" not in a:
        return ()
    types = a[a.index("--spec-type") + 1]

    def flag(name: str, default: str) -> str:
        return a[a.index(name) + 1] if name in a else default

    n = [
        flag(f"--spec-ngram-mod-{k}", d)
        for k, d in zip(("n-match", "n-min", "n-max"), NGRAM_MOD_DEFAULTS, strict=True)
    ]
    return (types, *n) if "ngram-mod" in types else (types,)


@dataclass(frozen=True)
class LoadSetup:
    """What one load run starts.

    Attributes:
        static: the static plan (user's servers and calibration servers, every c).
        router: the router plan (``fronde serve``, every c).
        calibration: Fronde mode → the static arm whose curve is that mode's backend's.
        settings: the settings every static arm starts with (slots and context set).
    """

    static: Plan
    router: Plan
    calibration: dict[Mode, str]
    settings: Settings


def load_setup(
    settings: Settings,
    form: Form,
    max_tokens: int,
    reps: int,
    clients: Sequence[int],
    slots: int,
    items: int | None = None,
    placements: Sequence[str] = ("marginal", "best"),
    skip: Sequence[str] = (),
    proxy: bool = True,
) -> LoadSetup:
    """The arms and plans of a load run (see the module docstring).

    Args:
        settings: the user's settings (profile, modes, GPU offload, speculation).
        form: the profile's prompt form.
        max_tokens: the budget of workload A's prompts.
        reps: repetitions of every block.
        clients: the concurrencies measured.
        slots: llama-server slots per backend (``-np``); at least max(clients) so that
            no request waits in a queue the arms do not share.
        items: how many items of the agent mix to send (all when None).
        placements: the measured rule's placements, one router arm each (``router``
            for marginal, ``router-t`` for threshold, ``router-b`` for best).
        skip: item ids to leave out (see :func:`agent_mix`).
        proxy: with router arms, run :data:`PROXY` among them (what the proxy
            itself changes, on the router's settings).

    Raises:
        FrondeError: llama-server or the model is missing.
    """
    ctx = max(settings.backend.ctx_size, slots * 2048)
    backend = settings.backend.model_copy(update={"parallel": slots, "ctx_size": ctx})
    run = settings.model_copy(update={"backend": backend})
    known = {a.name: a for a in ARMS}
    static = [known[n] for n in STATIC] + [SPREAD]
    # One server per calibration: plain2's argv is plain's, never a mode's curve.
    specs = {a.name: spec_of(static_argv(a, run)[1]) for a in static if a.servers == 1}
    calibration: dict[Mode, str] = {}
    for mode in run.modes:
        probe = Arm(f"s-{SHORT[mode]}", "static", force=mode, about=_probe_about(mode))
        try:
            spec = spec_of(static_argv(probe, run)[1])
        except FrondeError:  # a mode with no backend (no draft model) is left out
            continue
        same = next((name for name, s in specs.items() if s == spec), None)
        if same is None:
            static.append(probe)
            specs[probe.name] = spec
            same = probe.name
        calibration[mode] = same
    env = (
        ("FRONDE_BACKEND__PARALLEL", str(slots)),
        ("FRONDE_BACKEND__CTX_SIZE", str(ctx)),
        ("FRONDE_ROUTER__LOAD_RULE", "measured"),
    )
    routers = [
        Arm(
            ROUTERS[p],
            "fronde",
            env=(*env, ("FRONDE_ROUTER__LOAD_PLACEMENT", p)),
            about=_router_about(p),
        )
        for p in placements
    ]
    if proxy and routers:
        routers.insert(0, replace(PROXY, env=env))
    levels = tuple(Level(c) for c in clients)
    mix = agent_mix(items, skip=skip)
    return LoadSetup(
        Plan.single(mix, static, reps, form, max_tokens, levels),
        Plan.single(mix, routers, reps, form, max_tokens, levels),
        calibration,
        run,
    )


@dataclass(frozen=True)
class LoadRow:
    """One (arm, c) cell, medians over repetitions (units in the field names).

    Attributes:
        arm: the arm.
        c: concurrent clients.
        tok_s: aggregate decode tok/s in the steady window (median over repetitions).
        tok_s_lo: the lowest repetition's.
        tok_s_hi: the highest repetition's.
        p50_s: median end-to-end latency of a request, s.
        p99_s: 99th percentile, s.
        ttft_s: median time to first token, s.
        in_flight: mean requests in flight in the steady window.
        n: requests counted (all repetitions).
        failed: requests that failed.
        reps: repetitions measured.
        routes: router arm: ``route→mode`` counts.
        tok_s_reps: repetition → its tok/s (the repetitions that measured one).
        server_tok_s: the median request's decode tok/s by its llama-server's own
            ``timings`` (``predicted_per_second``; requests of :data:`SERVER_MIN_TOKENS`
            tokens or more, loops left out), all repetitions; None without timings. It
            tells a server decoding faster from the hop or the clients changing the
            aggregate.
        window_s: the steady window's length (:func:`steady_window`), median over
            repetitions, s; None when every request of a block left at once (one
            request, or no more items than clients). Tok/s rests on the tokens
            decoded in it: on the H200 gemma's c = 32 blocks (51 items) had 1.7 s, and
            one arm's repetitions spread ±15 % there.
    """

    arm: str
    c: int
    tok_s: float
    tok_s_lo: float
    tok_s_hi: float
    p50_s: float
    p99_s: float
    ttft_s: float | None
    in_flight: float
    n: int
    failed: int
    reps: int
    routes: dict[str, int]
    tok_s_reps: dict[int, float] = field(default_factory=dict[int, float])
    server_tok_s: float | None = None
    window_s: float | None = None


SERVER_MIN_TOKENS = 8
"""The fewest tokens a request decodes to count in :attr:`LoadRow.server_tok_s`: a
short answer's rate is a few passes' (llama-server's ``predicted_per_second``)."""


def looping_items(samples: Iterable[dict[str, Any]]) -> list[str]:
    """Items whose answer looped in any arm, at any c or repetition, sorted."""
    return sorted(
        {s["item"] for s in samples if s.get("ok") and s.get("repetition", 0) > LOOP_SCORE}
    )


def steady_window(samples: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """The steady part of one closed-loop block: from the first request sent to the last.

    ``c`` clients share one queue of items; until the last item is sent every client
    has a request in flight, after it the block drains and fewer than ``c`` are. The
    first H200 run measured Σ tokens ÷ the whole span instead, and the drain (a few
    whole-file answers finishing alone) filled most of it at c = 32, so every arm's
    figure read as flat in c. Returns (start, end) in the records' ``t0`` clock, s;
    end ≤ start when the block had one request.
    """
    starts = [s["t0"] for s in samples]
    return min(starts), max(starts)


def _overlap(a0: float, a1: float, lo: float, hi: float) -> float:
    return max(0.0, min(a1, hi) - max(a0, lo))


def _tokens_between(s: dict[str, Any], lo: float, hi: float) -> float:
    """A request's tokens decoded inside [lo, hi], spread evenly from its first token on."""
    first = s["t0"] + (s.get("ttft_s") or 0.0)
    end = s["t0"] + s["wall_s"]
    n = float(s["tokens"] or 0)
    if end <= first:
        return n if lo <= end <= hi else 0.0
    return n * _overlap(first, end, lo, hi) / (end - first)


def level_c(level: str) -> int:
    """The concurrency of a level tag (:attr:`~fronde.bench.protocol.Level.tag`).

    ``c32`` → 32, ``c24-gap0.25-plain`` → 24, the empty tag (one client) → 1.
    """
    head = level.split("-")[0]
    return int(head[1:]) if head.startswith("c") else 1


def load_rows(samples: Sequence[dict[str, Any]], loops: Sequence[str]) -> list[LoadRow]:
    """Every (arm, c) cell of ``samples`` (records of one load run), in run order."""
    cells: dict[tuple[str, int], dict[int, list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for s in samples:
        cells[(s["arm"], level_c(s["level"]))][s["rep"]].append(s)
    left = set(loops)
    rows: list[LoadRow] = []
    for (arm, c), reps in cells.items():
        rates: list[float] = []
        by_rep: dict[int, float] = {}
        loads: list[float] = []
        walls: list[float] = []
        ttfts: list[float] = []
        served: list[float] = []
        windows: list[float] = []
        routes: Counter[str] = Counter()
        for rep_no, rep in reps.items():
            ok = [s for s in rep if s["ok"]]
            if not ok:
                continue
            kept = [s for s in ok if s["item"] not in left]
            lo, hi = steady_window(ok)
            span = max(s["t0"] + s["wall_s"] for s in ok) - min(s["t0"] for s in ok)
            n_rates = len(rates)
            if hi > lo:
                windows.append(hi - lo)
                rates.append(sum(_tokens_between(s, lo, hi) for s in kept) / (hi - lo))
                loads.append(
                    sum(_overlap(s["t0"], s["t0"] + s["wall_s"], lo, hi) for s in ok) / (hi - lo)
                )
            elif span > 0:  # one request: its own span
                rates.append(sum(s["tokens"] or 0 for s in kept) / span)
                loads.append(sum(s["wall_s"] for s in ok) / span)
            if len(rates) > n_rates:
                by_rep[int(rep_no)] = round(rates[-1], 1)
            walls += [s["wall_s"] for s in kept]
            ttfts += [s["ttft_s"] for s in kept if s.get("ttft_s") is not None]
            served += _server_rates(kept)
            for s in ok:
                route: dict[str, Any] = s.get("route") or {}
                if "class" in route:
                    routes[f"{route['class']}→{route.get('mode', '?')}"] += 1
        n_all = sum(len(r) for r in reps.values())
        failed = sum(not s["ok"] for r in reps.values() for s in r)
        rows.append(
            LoadRow(
                arm,
                c,
                round(median(rates), 1) if rates else 0.0,
                round(min(rates), 1) if rates else 0.0,
                round(max(rates), 1) if rates else 0.0,
                round(float(np.percentile(walls, 50)), 3) if walls else float("nan"),
                round(float(np.percentile(walls, 99)), 3) if walls else float("nan"),
                round(float(np.percentile(ttfts, 50)), 3) if ttfts else None,
                round(median(loads), 1) if loads else 0.0,
                n_all - failed,
                failed,
                len(rates),
                dict(routes.most_common()),
                dict(sorted(by_rep.items())),
                round(median(served), 1) if served else None,
                round(median(windows), 2) if windows else None,
            )
        )
    return rows


def _server_rates(samples: Iterable[dict[str, Any]]) -> list[float]:
    """Each request's decode tok/s by its server's timings (:attr:`LoadRow.server_tok_s`)."""
    parsed = (Timings.parse(s.get("timings")) for s in samples)
    return [
        t.predicted_per_second
        for t in parsed
        if t is not None and t.predicted_n >= SERVER_MIN_TOKENS
    ]
