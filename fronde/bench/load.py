"""The load benchmark's arms and plans: many agents at once, Fronde against one llama-server.

With c requests in flight, does Fronde serve more tok/s than the one llama-server a
user would run instead, without a worse tail? Each c is measured apart
(:func:`load_setup`). Arms, all with the same slots and context: the static servers a
user runs (``plain``, ``default``, ``cascade``), a calibration server per Fronde mode
no static arm already runs (``s-simple``, …), the controls (:data:`CONTROLS`) and a
router arm per placement of the measured load rule (:data:`ROUTERS`). The static and
router plans run a repetition at a time, bracketed (:func:`bracketed`); the curves
saved after each static part are what the router arms read (in-sample).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from fronde.bench.arms import ARMS, NO_HINDSIGHT, PINNED_CIS, Arm, static_argv
from fronde.bench.load_lengths import LengthArms, length_arms
from fronde.bench.load_mix import WorkloadName, load_mix
from fronde.bench.passes import Timed
from fronde.bench.protocol import Level, Plan
from fronde.bench.workloads import Form
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.modes import Mode

__all__ = [
    "BACKEND_SAMPLING", "CLIENTS", "CONTROLS", "PINNED", "PINNED_CIS", "PROXY", "ROUTED",
    "ROUTERS", "SINGLE", "SINGLE_NH", "SINGLE_PLAIN", "SPREAD", "LoadSetup", "arm_about",
    "load_setup", "spec_of",
]  # fmt: skip

CLIENTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
"""Concurrent clients measured by default."""

Part = Literal["static", "router"]
"""The two halves of a load run: static servers (their curves saved), then Fronde."""

BACKEND_SAMPLING = "--backend-sampling"
"""llama-server's flag that samples on the device (b11434): on the H200 at c = 32 a plain
server read 654 tok/s without it and 2,248 with it (an outside client's check)."""

STATIC = ("plain", "default", "cascade")
"""The static arms a user would run instead of Fronde."""

SPREAD = Arm(
    "plain2",
    "static",
    servers=2,
    about="two plain llama-servers, each request to the less busy: does spreading pay?",
)
"""Two plain servers against one: they take turns where the GPU is the limit and gain
where the step is spent on the CPU (``results/serving-probe-gpu-h200-20261203``)."""

PROXY = Arm(
    "fr-plain",
    "fronde",
    Mode.BASELINE,
    about="Fronde in front of the plain server alone (`fronde serve --mode baseline`, "
    "every request forced there): the proxy without routing",
)
"""``fr-plain ÷ plain`` is what the hop and Fronde's slot placement change, a router
arm ÷ ``fr-plain`` what routing adds (:mod:`~fronde.bench.load_verdict`)."""

ROUTERS = {"marginal": "router", "threshold": "router-t", "best": "router-b"}
"""The router arm of each placement of the measured load rule, one llama-server per mode."""

SINGLE = "single-b"
"""Fronde routing (best placement) with one llama-server for every mode (a patched build)."""

SINGLE_NH = "single-nh"
""":data:`SINGLE` with ``router.hindsight`` off: ``single-b ÷ single-nh`` is what feeding
each answer to the counterfactual book costs under load (SmolLM2 on an H200 at c = 8,
``results/load-gpu-h200-cpu-smollm2-135m-20261206-agent-fresh-p9c``: ``single-b`` read
0.94× ``fr-sbase`` with every answer decoded plainly in both)."""

ROUTED = (*ROUTERS.values(), SINGLE, SINGLE_NH)
"""Every router arm's name."""

PER_MODE = ("FRONDE_BACKEND__TOPOLOGY", "per-mode")
ONE_SERVER = ("FRONDE_BACKEND__TOPOLOGY", "single")

SINGLE_PLAIN = Arm(
    "fr-sbase",
    "fronde",
    Mode.BASELINE,
    env=(ONE_SERVER,),
    alone=False,
    about="Fronde's one llama-server for every mode, every request forced to baseline "
    "(`speculative.n_max` 0): does a request that drafts nothing decode as on `plain`?",
)
"""``fr-sbase ÷ fr-plain``: what the speculators a request does not use cost it."""

PINNED = Arm(
    "pinned",
    "static",
    pin=True,
    about="the plain server, client k sending `id_slot` = k: busy slots adjacent, no routing",
)
"""The plain server with client k on slot k: the placement a server could make itself
(docs/slot-placement.md; b11434 picks the least recently used idle slot). On an H100 it
read 1.89–2.14× plain at c = 8 on the agent mix."""

PLAIN_NOBS = Arm(
    "plain-nobs",
    "static",
    unflags=(BACKEND_SAMPLING,),
    about="the plain server without `--backend-sampling` (what a user runs by default)",
)
PLAIN_BS = Arm(
    "plain-bs",
    "static",
    flags=(BACKEND_SAMPLING,),
    about="the plain server with `--backend-sampling`",
)
"""The plain arm without (``plain-nobs``) or with (``plain-bs``) :data:`BACKEND_SAMPLING`,
whichever ``backend.plain_args`` do not already give it."""

CONTROLS = frozenset({SPREAD.name, PROXY.name, PINNED.name, PINNED_CIS.name, SINGLE_PLAIN.name})
"""Arms that are no single server a user runs unchanged: not the verdict's best static arm."""

SHORT = {
    Mode.BASELINE: "base", Mode.NGRAM_SIMPLE: "simple", Mode.NGRAM_MOD: "mod",
    Mode.CASCADE: "casc", Mode.DRAFT: "draft",
}  # fmt: skip
"""A calibration server's name is ``s-`` and its mode's short name."""

NGRAM_MOD_DEFAULTS = ("24", "48", "64")
"""ngram-mod's n_match, n_min, n_max when no flag names them (``common/common.h``)."""


def _probe_about(mode: Mode) -> str:
    return f"llama-server as {mode}"


def _router_about(placement: str) -> str:
    return f"Fronde routing, measured load rule, {placement} placement"


def arm_about(name: str) -> str:
    """What the load arm ``name`` is, as the page's legend says it (else the name itself)."""
    known = {a.name: a.about for a in (*ARMS, SPREAD, PROXY, PINNED, PINNED_CIS, SINGLE_PLAIN)}
    known |= {r: _router_about(p) for p, r in ROUTERS.items()}
    known[SINGLE] = _router_about("best") + ", one llama-server for every mode"
    known[SINGLE_NH] = known[SINGLE] + ", no hindsight (router.hindsight false)"
    known |= {f"s-{short}": _probe_about(m) for m, short in SHORT.items()}
    probe, _, length = name.rpartition("-n")  # a draft-length arm: s-mod-n16
    if name not in known and probe in known and length.isdigit():
        return f"{known[probe]}, draft length {length} (--draft-lengths)"
    return known.get(name, name)


def bracketed(reps: int) -> list[tuple[Part, int]]:
    """The parts of a load run in order, A B B A: static 0, router 0, router 1, static 1.

    And so on: a drift over a lease then falls on both plans alike (run one after the other, the
    static arms' later blocks decoded 0.85–0.87× as fast as their first: H200, 2026-12-04).
    """
    out: list[tuple[Part, int]] = []
    for rep in range(reps):
        pair: list[tuple[Part, int]] = [("static", rep), ("router", rep)]
        out += pair[::-1] if rep % 2 else pair
    return out


def spec_of(args: Sequence[str]) -> tuple[str, ...]:
    """The speculation an argv starts: spec types and ngram-mod's (n_match, n_min, n_max).

    ``()`` for plain decoding; ``--spec-default`` is ngram-mod at its defaults (b11434
    ``common/arg.cpp``). Other flags are not looked at: the arms compared share them.
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
        static, router: the two plans (every c).
        calibration: Fronde mode → the static arm whose curve is that mode's backend's.
        settings: the settings every static arm starts with (slots and context set).
        more: (part, plan) of arms at their own concurrencies (``--arm NAME@1,8,32``).
        lengths: mode → draft length → its arm (``--draft-lengths``); empty without.
        notes: lines the run prints first: the lengths not measured and why, the
            calibration arms added for a named router arm.
    """

    static: Plan
    router: Plan
    calibration: dict[Mode, str]
    settings: Settings
    more: tuple[tuple[Part, Plan], ...] = ()
    lengths: dict[Mode, dict[int, str]] = field(default_factory=dict[Mode, dict[int, str]])
    notes: tuple[str, ...] = ()

    def plans(self, part: Part) -> list[Plan]:
        """The plans of ``part``: its arms at other concurrencies first, then the main plan."""
        main = self.static if part == "static" else self.router
        return [p for k, p in self.more if k == part and p.arms] + ([main] if main.arms else [])


def _router_arms(env: tuple[tuple[str, str], ...]) -> dict[str, Arm]:
    """A router arm per placement (one server per mode), :data:`SINGLE` and :data:`SINGLE_NH`."""
    arms = {
        ROUTERS[p]: Arm(
            ROUTERS[p],
            "fronde",
            env=(*env, PER_MODE, ("FRONDE_ROUTER__LOAD_PLACEMENT", p)),
            about=_router_about(p),
        )
        for p in ("marginal", "best", "threshold")
    }
    placement = ("FRONDE_ROUTER__LOAD_PLACEMENT", "best")
    single = Arm(SINGLE, "fronde", env=(*env, ONE_SERVER, placement), about=arm_about(SINGLE))
    blind = (*single.env, NO_HINDSIGHT)
    arms[SINGLE] = single
    arms[SINGLE_NH] = replace(single, name=SINGLE_NH, env=blind, about=arm_about(SINGLE_NH))
    return arms


def _calibrate(run: Settings, static: list[Arm], pinned: bool) -> dict[Mode, str]:
    """Each mode's calibration arm; appends to ``static`` a server for each mode no arm runs.

    With ``pinned`` (timed blocks) the calibration servers are measured with client k on
    slot k, as Fronde places its requests. On an H100 (gemma, the agent mix,
    ``results/load-gpu-h100-cpu-gemma-270m-20261206-agent-fresh-topo``) the unpinned plain
    curve read 383-420 tok/s at c = 2-16 and the pinned one 777-953, so a router reading
    unpinned curves sent those loads to ngram-mod and served 0.55-0.70× pinned.
    """
    # One server per calibration: plain2's argv is plain's, never a mode's curve.
    specs = {
        a.name: spec_of(static_argv(a, run)[1])
        for a in static
        if a.servers == 1 and a.pin == pinned and not a.unflags
    }
    calibration: dict[Mode, str] = {}
    for mode in run.modes:
        probe = Arm(f"s-{SHORT[mode]}", "static", force=mode, about=_probe_about(mode))
        probe = replace(probe, pin=pinned, about=probe.about + ", pinned" * pinned)
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


def _static_arms(
    run: Settings, pinned: bool, lengths: Sequence[int]
) -> tuple[list[Arm], dict[Mode, str], LengthArms]:
    """The static arms (``plain`` first), each mode's calibration arm, the lengths' arms.

    Pinned: plain decoding calibrates on :data:`PINNED`, which is not in the list (it
    runs by its own name).
    """
    known = {a.name: a for a in ARMS}
    static = [known[n] for n in STATIC] + [SPREAD]
    candidates = static + [PINNED] * pinned
    calibration = _calibrate(run, candidates, pinned=pinned)
    static += [a for a in candidates if a not in static and a is not PINNED]
    names = {m: f"s-{short}" for m, short in SHORT.items()}
    drafts = length_arms(run, calibration, lengths, pinned, names)
    return static + list(drafts.arms), calibration, drafts


def _with_calibration(
    arms: Mapping[str, tuple[int, ...] | None], calibration: Mapping[Mode, str]
) -> tuple[dict[str, tuple[int, ...] | None], tuple[str, ...]]:
    """``arms`` with every mode's calibration arm where a router arm is named, and a note.

    A router arm places requests by the load curves its own session measures; named
    without a mode's calibration arm it has no curve for that mode, and its load rule
    sends every request to the modes that have one (SmolLM2 on an H200 decoded every
    answer plainly from c = 2 and read 0.77× the pinned server at c = 16,
    ``results/load-gpu-h200-cpu-smollm2-135m-20261206-agent-fresh-p9c``; with the curve,
    1.10–1.17×, ``…-agent-fresh-len``). The added arms run at the router arms' own
    concurrencies (all the run's when those differ); an arm already named keeps its own.
    Returns the arms and the note (empty when nothing was added).
    """
    routed = {arms[name] for name in ROUTED if name in arms}
    missing = [name for name in dict.fromkeys(calibration.values()) if name not in arms]
    if not routed or not missing:
        return dict(arms), ()
    cs = next(iter(routed)) if len(routed) == 1 else None
    note = f"--arm: the router arms' calibration added: {', '.join(missing)}"
    return {**dict(arms), **dict.fromkeys(missing, cs)}, (note,)


def _check_names(arms: Mapping[str, object], every: Sequence[Arm], variant: Arm) -> None:
    """Raise FrondeError for a name in ``arms`` that is no arm of ``every`` (names them)."""
    wrong = sorted(set(arms) - {a.name for a in every})
    if wrong:
        hint = f" (the plain arm has{' no' * (variant is PLAIN_BS)} {BACKEND_SAMPLING})"
        raise FrondeError(
            f"no load arm {', '.join(wrong)}; arms: {', '.join(a.name for a in every)}" + hint
        )


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
    lengths: Sequence[int] = (),
) -> LoadSetup:
    """The arms and plans of a load run (``fronde bench load``'s options, read).

    ``slots`` is llama-server's ``-np`` per backend, at least max(``clients``);
    ``items`` how many items of the workload to send (all when None), ``skip`` the item
    ids left out; ``placements`` a router arm each (:data:`ROUTERS`), with :data:`PROXY`
    among them if ``proxy``. ``timed``: the blocks' warm-up and window (None: each item
    once, as the screen sends them; :data:`PINNED` runs by default only with it).
    ``arms``: name → its own concurrencies (None: ``clients``), by default the static
    arms, :data:`SPREAD`, the calibration servers, :data:`PINNED`, :data:`PROXY` and the
    router arms. ``lengths``: draft lengths to measure each speculative mode at (with
    ``arms`` named, their calibration arms come too).

    Raises:
        FrondeError: llama-server or the model is missing; an arm name that is none,
            or ``plain-nobs`` while the plain arm has no ``--backend-sampling``.
    """
    ctx = max(settings.backend.ctx_size, slots * 2048)
    backend = settings.backend.model_copy(update={"parallel": slots, "ctx_size": ctx})
    run = settings.model_copy(update={"backend": backend})
    static, calibration, drafts = _static_arms(run, timed is not None, lengths)
    env = (
        ("FRONDE_BACKEND__PARALLEL", str(slots)),
        ("FRONDE_BACKEND__CTX_SIZE", str(ctx)),
        ("FRONDE_ROUTER__LOAD_RULE", "measured"),
    )
    routers = _router_arms(env)
    variant = PLAIN_NOBS if BACKEND_SAMPLING in static_argv(static[0], run)[1] else PLAIN_BS
    proxies = [replace(PROXY, env=(*env, PER_MODE)), replace(SINGLE_PLAIN, env=(*env, ONE_SERVER))]
    every = [*static, PINNED, PINNED_CIS, variant, *proxies, *routers.values()]
    if arms is None:  # the default arms
        named = [ROUTERS[p] for p in placements]
        chosen = [a.name for a in static] + [PINNED.name] * bool(timed)
        arms = dict.fromkeys(chosen + [PROXY.name] * (proxy and bool(named)) + named)
    elif drafts.arms:  # the lengths' arms and the calibration arms they are read against
        own = [calibration[m] for m in drafts.table]
        arms = dict.fromkeys([*own, *(a.name for a in drafts.arms)]) | dict(arms)
    arms, added = _with_calibration(arms, calibration)
    _check_names(arms, every, variant)
    mix = load_mix(workload, items, skip)

    def plan(kind: Part, cs: tuple[int, ...] | None) -> Plan:
        picked = [a for a in every if (a.kind == "static") == (kind == "static")]
        picked = [a for a in picked if a.name in arms and arms[a.name] == cs]
        levels = tuple(Level(c, timed=timed) for c in (cs or clients))
        return Plan.single(mix, picked, reps, form, max_tokens, levels)

    sets = sorted({cs for cs in arms.values() if cs is not None})
    parts: tuple[Part, Part] = ("static", "router")
    more: list[tuple[Part, Plan]] = [(kind, plan(kind, cs)) for cs in sets for kind in parts]
    return LoadSetup(
        plan("static", None), plan("router", None), calibration, run, tuple(more),
        {m: dict(t) for m, t in drafts.table.items()},
        tuple(f"--draft-lengths: {n}" for n in drafts.notes) + added,
    )  # fmt: skip
