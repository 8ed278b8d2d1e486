"""``fronde bench verdict``: is Fronde faster than the one llama-server you would run?

The main job (``./reproduce.sh`` runs it): workloads A (first encounter) and B (agent
sessions) on fresh servers for every arm, then the report, and the floor saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fronde.cli_options import ConfigOpt, settings_from

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rich.console import Console

    from fronde.bench.protocol import Plan
    from fronde.bench.store import Store
    from fronde.bench.workloads import Workload
    from fronde.config import Settings
    from fronde.modes import Mode
    from fronde.runtime.models import Profile

__all__ = ["SESSION_ARMS", "bench_verdict", "save_verdict_floor", "verdict_folder"]

SESSION_ARMS = {False: ("base", "default", "cascade", "router"), True: ("default", "router")}
"""Workload B's default arms (full, quick): a session takes minutes per arm on a CPU
(SmolLM2-135M on 2 cores: 2 minutes for one 8-step session)."""


def verdict_folder(profile: str, now: float | None = None) -> Path:
    """Where a verdict run writes when given no ``--out``: ``runs/verdict-PROFILE-UTCTIME``.

    What ``fronde bench report`` finds with no folder named. A profile name's characters
    other than letters, digits, ``.``, ``_`` and ``-`` become ``-`` (``local:NAME``).
    """
    import re
    import time

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return Path("runs") / f"verdict-{re.sub(r'[^A-Za-z0-9._-]', '-', profile)}-{stamp}"


def _times(n: int, noun: str) -> str:
    """``1 rep``, ``2 reps``: a count and its noun, plural from 2 on."""
    return f"{n} {noun}{'s' * (n != 1)}"


def bench_verdict(
    config: ConfigOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="folder for records.jsonl, the charts, summary.md; a run resumes with the"
            " same --out [default: runs/verdict-PROFILE-UTCTIME, new each run]"
        ),
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="2 prompts per domain, 48 tokens, one session (CPU: ~10 min)")
    ] = False,
    reps: Annotated[int, typer.Option(help="workload A: repetitions", min=1)] = 2,
    session_reps: Annotated[int, typer.Option(help="workload B: repetitions", min=1)] = 1,
    max_tokens: Annotated[
        int | None, typer.Option(help="tokens per request [default: 64, quick 48]", min=4)
    ] = None,
    per_domain: Annotated[
        int | None,
        typer.Option(help="workload A: prompts per domain (0: none) [default: 4, quick 2]", min=0),
    ] = None,
    sessions: Annotated[
        int | None,
        typer.Option(help="workload B: sessions (0: none) [default: all, quick 1]", min=0),
    ] = None,
    arm: Annotated[
        list[str] | None,
        typer.Option("--arm", help="workload A's arms (repeatable) [default: all but mod12]"),
    ] = None,
    session_arm: Annotated[
        list[str] | None,
        typer.Option(
            "--session-arm",
            help="workload B's arms (repeatable) [default: base default cascade router;"
            " quick: default router]",
        ),
    ] = None,
    interleave: Annotated[
        bool,
        typer.Option(
            help="workload A: all arms of a repetition up at once, each prompt sent to every "
            "arm in turn (--no-interleave: one arm after the other)"
        ),
    ] = True,
) -> None:
    """Is Fronde faster than the one llama-server you would run instead? Every arm fresh.

    Then the tables, the verdict and a short answer; ./reproduce.sh runs this.
    Resumes: blocks already in OUT/records.jsonl are skipped.
    Exit status 0 PASS, 2 FAIL.
    """
    from fronde.runtime.local import profile_of

    settings = settings_from(config)
    profile = profile_of(settings)
    out = out or verdict_folder(profile.name)
    first, session = _workloads(quick, per_domain, sessions)
    plan = _verdict_plan(
        profile,
        (first, session),
        (arm, session_arm),
        quick,
        (reps, session_reps),
        max_tokens,
        interleave,
    )
    _run_verdict(settings, config, plan, out, profile.name, (len(first.items), len(session.items)))


def _workloads(
    quick: bool, per_domain: int | None, sessions: int | None
) -> tuple[Workload, Workload]:
    """Workload A (first encounter) and B (agent sessions) as the options cut them."""
    from fronde.bench.workloads import load_workload

    first = load_workload("first-encounter").first(
        per_domain if per_domain is not None else (2 if quick else 4)
    )
    n_sessions = 1 if quick and sessions is None else sessions
    session = (
        load_workload("agent-sessions").groups(n_sessions) if n_sessions != 0 else first.first(0)
    )
    return first, session


def _verdict_plan(
    profile: Profile,
    workloads: tuple[Workload, Workload],
    arms: tuple[list[str] | None, list[str] | None],
    quick: bool,
    reps: tuple[int, int],
    max_tokens: int | None,
    interleave: bool,
) -> Plan:
    """The verdict's plan: workloads A and B (those with items), their arms, repetitions.

    ``arms``, ``reps``: A's and B's (``--arm``/``--session-arm``, None the defaults);
    ``max_tokens`` None: 64, quick 48.
    """
    from fronde.bench.arms import arms_named
    from fronde.bench.protocol import Plan
    from fronde.bench.workloads import load_workload

    has_draft = profile.draft is not None
    arm, session_arm = arms
    return Plan(
        workloads=tuple(w for w in workloads if w.items),
        arms=tuple(arms_named(arm or (), draft=has_draft)),
        session_arms=tuple(arms_named(session_arm or SESSION_ARMS[quick], draft=has_draft)),
        reps=reps[0],
        session_reps=reps[1],
        form=profile.prompt_form,
        max_tokens=max_tokens or (48 if quick else 64),
        priming=load_workload("priming"),
        interleave=interleave,
    )


def _run_verdict(
    settings: Settings,
    config: Path | None,
    plan: Plan,
    out: Path,
    profile: str,
    sizes: tuple[int, int],
) -> None:
    """Run ``plan`` into ``out`` (resuming), save the floor, print the report.

    A resumed run must match the machine, build, profile, form and budget. ``sizes``:
    A's prompts and B's steps, as printed.

    Raises:
        typer.Exit: with status 2 when the verdict is FAIL.
    """
    from fronde.bench.commands_experiments import run_plans
    from fronde.bench.commands_report import show_report
    from fronde.bench.progress import bench_console
    from fronde.runtime.install import find_llama_binary, llama_build_info

    build = llama_build_info(find_llama_binary(settings.cache_dir, settings.llama_server))
    identity: dict[str, Any] = {"build": build, "profile": profile, "form": plan.form}
    identity["max_tokens"] = plan.max_tokens
    run = {"session_arms": [a.name for a in plan.session_arms], "reps": plan.reps}
    run |= {"session_reps": plan.session_reps, "interleave": plan.interleave}
    head = (
        f"{profile} ({plan.form}): A {sizes[0]} prompts × {len(plan.arms)} arms × "
        f"{_times(plan.reps, 'rep')}, {plan.max_tokens} tokens; B {sizes[1]} steps × "
        f"{len(plan.session_arms)} arms × {_times(plan.session_reps, 'rep')} "
        f"→ {out / 'records.jsonl'}"
    )
    store = run_plans([plan], settings, config, out, identity, run, head)
    console = bench_console()
    save_verdict_floor(settings, store, out, console)
    show_report(out, console)


def save_verdict_floor(settings: Settings, store: Store, out: Path, console: Console) -> None:
    """Save the fastest forced Fronde mode of workload A as this machine's floor.

    Not from one repetition, nor when a forced arm drifted beyond ±10 % (a trial beside
    a test suite measured baseline fastest at a drift of 0.22), nor from one forced mode:
    a run with `base` alone would save plain decoding as "the fastest" and every later
    `fronde serve` would fall back to it (2026-12-07, the CPU's agent-session runs).
    """
    from fronde.bench.arms import ARMS
    from fronde.bench.verdict import DRIFT_WARN, table
    from fronde.serving import FLOORS_FILE, calibration_key, save_floor

    a = table(store.samples(), "first-encounter")  # no checks: the report computes them
    forced = {x.name: x.force for x in ARMS if x.reachable and x.name in a.arms}
    rates = {m: a.total(name) for name, m in forced.items() if m is not None and a.items}
    if len(rates) < 2:
        if rates:
            console.print("floor: not saved (one Fronde mode measured)", markup=False)
        return
    drifted = [n for n in forced if len(a.reps) < 2 or abs(a.drift(n) - 1.0) > DRIFT_WARN]
    if drifted:
        console.print(
            f"floor: not saved (repetitions disagree or too few: {', '.join(drifted)})",
            markup=False,
            highlight=False,
        )
        return
    costs = _served_costs(store, forced)
    key = calibration_key(settings)
    best = save_floor(settings.cache_dir, key, rates, str(out), costs)
    console.print(
        f"floor: {best} is the fastest Fronde mode here; `fronde serve` starts from it "
        f"(saved in {settings.cache_dir / FLOORS_FILE}, with the draft cost each mode's server "
        f"paid: {', '.join(f'{m} {c:.2f}' for m, c in costs.items()) or 'none measured'})",
        markup=False,
        highlight=False,
    )


def _served_costs(store: Store, forced: Mapping[str, Mode | None]) -> dict[Mode, float]:
    """Mode → the draft cost its forced arm's server paid over workload A (passes a token)."""
    from fronde.bench.breakeven import served_costs_by

    def mode(s: dict[str, Any]) -> Mode | None:
        first = s.get("workload") == "first-encounter"
        return forced.get(str(s.get("arm"))) if first else None

    return {m: f.draft_cost for m, f in served_costs_by(store.samples(), mode).items()}
