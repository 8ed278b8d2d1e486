"""What does routing tool-bearing requests give an agent? Workload B's steps with ``tools``.

Agent tools send their tool list with every request; such a request is routed where the
chat template ignores tools (:mod:`fronde.router.classify`). Two fresh ``fronde serve``
arms get every agent step in order with an opencode-like tool list: ``before`` with
``router.speculate_structured = false`` (every such request on baseline) and ``after``
with the default. Per step: route, mode, decode tok/s from ``timings`` and wall time;
a step whose answer loops in either arm is left out of the speeds and named.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import median
from typing import Any

from fronde.bench.arms import Arm
from fronde.bench.prediction import server_tok_s
from fronde.bench.protocol import Level, Plan
from fronde.bench.tables import Grid
from fronde.bench.timed_client import repetition_score
from fronde.bench.verdict import LOOP_SCORE
from fronde.bench.workloads import Workload, load_workload

__all__ = ["AGENT_TOOLS", "ToolStep", "tool_grid", "tool_steps", "tools_plan"]


def _tool(name: str, description: str, **params: str) -> dict[str, Any]:
    props = {k: {"type": "string", "description": v} for k, v in params.items()}
    schema = {"type": "object", "properties": props, "required": list(params)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


AGENT_TOOLS = [
    _tool("read", "Read a file", path="the file's path"),
    _tool("write", "Write a file", path="the file's path", content="the new content"),
    _tool("bash", "Run a shell command", command="the command line"),
]
"""A tool list of the kind opencode sends with every build request."""


@dataclass(frozen=True)
class ToolStep:
    """One step's answer in one arm."""

    arm: str
    step: str
    route: str
    mode: str
    decode_tok_s: float
    tokens: int
    wall_s: float
    text: str = ""


def tools_plan(max_tokens: int = 128) -> Plan:
    """Every agent step with :data:`AGENT_TOOLS`, whole, ``before`` then ``after``.

    ``before`` runs with ``router.speculate_structured = false``.
    """
    steps = load_workload("agent-sessions").items
    items = tuple(replace(step, fields={"tools": AGENT_TOOLS}) for step in steps)
    arms = [
        Arm(
            "before",
            "fronde",
            env=(("FRONDE_ROUTER__SPECULATE_STRUCTURED", "false"),),
            about="Fronde, every tool-bearing request on baseline",
        ),
        Arm("after", "fronde", about="Fronde, tool-bearing requests routed"),
    ]
    workload = Workload("agent-tools", items)
    return Plan.single(workload, arms, 1, "chat", max_tokens, (Level(stream=False),))


def tool_steps(records: Sequence[dict[str, Any]]) -> list[ToolStep]:
    """The steps of :func:`tools_plan` from the store's sample records (ok ones)."""
    return [
        ToolStep(
            arm=rec["arm"],
            step=rec["item"],
            route=rec["route"].get("class", ""),
            mode=rec["route"].get("mode", ""),
            decode_tok_s=server_tok_s(rec),
            tokens=int(rec["tokens"]),
            wall_s=float(rec["wall_s"]),
            text=rec["text"],
        )
        for rec in records
        if rec["ok"]
    ]


def tool_grid(steps: list[ToolStep], title: str) -> Grid:
    """Per arm: routes, Σ tokens ÷ Σ decode time, wall time; and after ÷ before."""
    grid = Grid(title, ("arm", "routes", "decode tok/s", "wall s", "step tok/s"), left=2)
    totals: dict[str, tuple[float, float]] = {}
    looping = sorted({s.step for s in steps if repetition_score(s.text) > LOOP_SCORE})
    for arm in ("before", "after"):
        every = [s for s in steps if s.arm == arm]
        group = [s for s in every if s.step not in looping]
        if not group:
            continue
        routes: dict[str, int] = {}
        for s in every:
            key = f"{s.route}→{s.mode}"
            routes[key] = routes.get(key, 0) + 1
        tokens = sum(s.tokens for s in group)
        decode_s = sum(s.tokens / s.decode_tok_s for s in group if s.decode_tok_s)
        wall = sum(s.wall_s for s in group)
        totals[arm] = (tokens / decode_s if decode_s else 0.0, wall)
        listed = "\n".join(f"{k}: {v}" for k, v in sorted(routes.items()))
        step_speed = median(s.decode_tok_s for s in group)
        rate = totals[arm][0]
        grid.rows.append((arm, listed, f"{rate:.1f}", f"{wall:.1f}", f"{step_speed:.1f}"))
    if len(totals) == 2:
        speed = totals["after"][0] / totals["before"][0] if totals["before"][0] else 0.0
        wall = totals["after"][1] / totals["before"][1] if totals["before"][1] else 0.0
        grid.rows.append(("after ÷ before", "", f"{speed:.3f}", f"{wall:.3f}"))
    grid.notes.append(
        "routes: class→mode: steps; decode tok/s: Σ tokens ÷ Σ decode seconds; wall s:"
        " Σ wall seconds; step tok/s: the median step's decode tok/s."
    )
    grid.notes.append(
        "Routes count every step; the speeds and times leave out the steps whose answer "
        f"loops in either arm (repetition score > {LOOP_SCORE}): "
        + (", ".join(looping) if looping else "none")
    )
    return grid
