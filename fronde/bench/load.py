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

**Workload** (:mod:`fronde.bench.load_mix`): the agent mix (workload A's prompts and
workload B's agent steps in one seeded shuffle) or distinct short chat prompts.
**Blocks** are timed (:func:`~fronde.bench.passes.timed_pass`): c closed-loop clients
over keep-alive connections run through the workload, round again when it ends, for a
warm-up and then a window (20 s or more on a GPU), on fresh servers or on servers that
first answered one short request per slot (slot history).

**Figures** per (arm, c), medians over repetitions (:mod:`fronde.bench.load_rows`):
``tok_s``, every streamed token that arrived in the window ÷ the window; ``p50_s``,
``p99_s``, end-to-end latency of one request; ``ttft_s``, its median time to first
token; ``in_flight``, mean requests in flight in the window. An answer that looped
(repetition score above :data:`~fronde.bench.verdict.LOOP_SCORE`) stays counted: its
items' share of the tokens and the figure without them are given apart.

**Placement and routing.** ``pinned``, the plain server with client k sending
``id_slot`` = k (:data:`PINNED`), is what slot placement alone gives the plain server;
``fr-plain ÷ plain`` is Fronde's one-mode placement (and its hop), ``router ÷ fr-plain``
and ``router ÷ pinned`` what routing adds (:mod:`fronde.bench.load_ratios`).

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from fronde.bench.arms import ARMS, Arm, static_argv
from fronde.bench.load_mix import WorkloadName, load_mix
from fronde.bench.passes import Timed
from fronde.bench.protocol import Level, Plan
from fronde.bench.workloads import Form
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.modes import Mode

__all__ = [
    "BACKEND_SAMPLING",
    "CLIENTS",
    "CONTROLS",
    "PINNED",
    "PROXY",
    "ROUTERS",
    "SPREAD",
    "LoadSetup",
    "arm_about",
    "load_setup",
    "spec_of",
]

CLIENTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
"""Concurrent clients measured by default (the issue's c = 1 … 32)."""

Part = Literal["static", "router"]
"""The two halves of a load run: static servers (their curves saved), then Fronde."""


BACKEND_SAMPLING = "--backend-sampling"
"""llama-server's flag that samples on the device (b11434): on the H200 a plain server
without it (and without Fronde's template and ``-t 8``) read 654 tok/s at c = 32 on
distinct prompts, with it 2,248 (an outside client's check)."""

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

PINNED = Arm(
    "pinned",
    "static",
    pin=True,
    about="the plain server, client k sending `id_slot` = k: busy slots adjacent, no routing",
)
"""The plain arm's server with each closed-loop client on its own slot: the placement a
server could make itself (docs/slot-placement.md). b11434 picks the least recently used
idle slot (``get_available_slot``), so 8 clients rotate over 32 KV caches, and a step
splits into one micro-batch per run of consecutive sequence ids: on an H100 this arm
read 1.89–2.14× plain at c = 8 on the agent mix (an outside client's check). A client a
user would have to change: not a static arm of the verdict."""

PLAIN_NOBS = Arm(
    "plain-nobs",
    "static",
    unflags=(BACKEND_SAMPLING,),
    about="the plain server without `--backend-sampling` (what a user runs by default)",
)
"""The plain arm without :data:`BACKEND_SAMPLING`, where ``backend.plain_args`` give it."""

PLAIN_BS = Arm(
    "plain-bs",
    "static",
    flags=(BACKEND_SAMPLING,),
    about="the plain server with `--backend-sampling`",
)
"""The plain arm with :data:`BACKEND_SAMPLING`, where ``backend.plain_args`` do not."""

CONTROLS = frozenset({SPREAD.name, PROXY.name, PINNED.name})
"""Arms that are no single server a user runs unchanged: left out of the verdict's best
static arm (two servers, Fronde's hop, a client that names slots)."""

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


def bracketed(reps: int) -> list[tuple[Part, int]]:
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
    out: list[tuple[Part, int]] = []
    for rep in range(reps):
        pair: list[tuple[Part, int]] = [("static", rep), ("router", rep)]
        out += pair[::-1] if rep % 2 else pair
    return out


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
        more: plans of arms measured at other concurrencies than the run's (``--arm
            NAME@1,8,32``), each with its part.
    """

    static: Plan
    router: Plan
    calibration: dict[Mode, str]
    settings: Settings
    more: tuple[tuple[Part, Plan], ...] = ()

    def plans(self, part: Part) -> list[Plan]:
        """The plans of ``part``: its arms at other concurrencies first, then the main plan."""
        main = self.static if part == "static" else self.router
        return [p for k, p in self.more if k == part and p.arms] + ([main] if main.arms else [])


def _router_arms(env: tuple[tuple[str, str], ...]) -> dict[str, Arm]:
    """A router arm per placement of the measured rule (:data:`ROUTERS`), on ``env``."""
    return {
        ROUTERS[p]: Arm(
            ROUTERS[p],
            "fronde",
            env=(*env, ("FRONDE_ROUTER__LOAD_PLACEMENT", p)),
            about=_router_about(p),
        )
        for p in ("marginal", "best", "threshold")
    }


def _calibrate(run: Settings, static: list[Arm]) -> dict[Mode, str]:
    """Each mode's calibration arm; appends to ``static`` a server for each mode no arm runs."""
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
    return calibration


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
    *,
    workload: WorkloadName = "agent",
    timed: Timed | None = None,
    arms: Mapping[str, tuple[int, ...] | None] | None = None,
) -> LoadSetup:
    """The arms and plans of a load run (see the module docstring).

    Args:
        settings: the user's settings (profile, modes, GPU offload, speculation).
        form: the profile's prompt form.
        max_tokens: the budget of the items that carry none.
        reps: repetitions of every block.
        clients: the concurrencies measured.
        slots: llama-server slots per backend (``-np``); at least max(clients) so that
            no request waits in a queue the arms do not share.
        items: how many items of the workload to send (all when None).
        placements: the measured rule's placements, one router arm each (``router``
            for marginal, ``router-t`` for threshold, ``router-b`` for best).
        skip: item ids to leave out (see :func:`~fronde.bench.load_mix.agent_mix`).
        proxy: with router arms, run :data:`PROXY` among them (what the proxy
            itself changes, on the router's settings).
        workload: ``agent`` or ``distinct`` (:mod:`fronde.bench.load_mix`).
        timed: the blocks' warm-up and window (None: each item once, as the screen
            sends them); by default :data:`PINNED` runs only with it.
        arms: name → its own concurrencies (None: ``clients``); by default the static
            arms, :data:`SPREAD`, the calibration servers, :data:`PINNED`, :data:`PROXY`
            (``proxy``) and a router arm per placement (``placements``).

    Raises:
        FrondeError: llama-server or the model is missing; an arm name that is none,
            or ``plain-nobs`` while the plain arm has no ``--backend-sampling``.
    """
    ctx = max(settings.backend.ctx_size, slots * 2048)
    backend = settings.backend.model_copy(update={"parallel": slots, "ctx_size": ctx})
    run = settings.model_copy(update={"backend": backend})
    known = {a.name: a for a in ARMS}
    static = [known[n] for n in STATIC] + [SPREAD]
    calibration = _calibrate(run, static)
    env = (
        ("FRONDE_BACKEND__PARALLEL", str(slots)),
        ("FRONDE_BACKEND__CTX_SIZE", str(ctx)),
        ("FRONDE_ROUTER__LOAD_RULE", "measured"),
    )
    routers = _router_arms(env)
    variant = PLAIN_NOBS if BACKEND_SAMPLING in static_argv(known["plain"], run)[1] else PLAIN_BS
    every = [*static, PINNED, variant, replace(PROXY, env=env), *routers.values()]
    if arms is None:  # the default arms
        named = [ROUTERS[p] for p in placements]
        chosen = [a.name for a in static] + [PINNED.name] * bool(timed)
        arms = dict.fromkeys(chosen + [PROXY.name] * (proxy and bool(named)) + named)
    wrong = sorted(set(arms) - {a.name for a in every})
    if wrong:
        hint = f" (the plain arm has{' no' * (variant is PLAIN_BS)} {BACKEND_SAMPLING})"
        raise FrondeError(
            f"no load arm {', '.join(wrong)}; arms: {', '.join(a.name for a in every)}" + hint
        )
    mix = load_mix(workload, items, skip)

    def plan(kind: Part, cs: tuple[int, ...] | None) -> Plan:
        picked = [a for a in every if (a.kind == "static") == (kind == "static")]
        picked = [a for a in picked if a.name in arms and arms[a.name] == cs]
        levels = tuple(Level(c, timed=timed) for c in (cs or clients))
        return Plan.single(mix, picked, reps, form, max_tokens, levels)

    sets = sorted({cs for cs in arms.values() if cs is not None})
    parts: tuple[Part, Part] = ("static", "router")
    more: list[tuple[Part, Plan]] = [(kind, plan(kind, cs)) for cs in sets for kind in parts]
    return LoadSetup(plan("static", None), plan("router", None), calibration, run, tuple(more))
