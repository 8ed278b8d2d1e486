"""What does routing tool-bearing requests give an agent? Workload B's steps with ``tools``.

Agent tools (opencode, Continue's agent mode) send their tool list with every request.
Before the structured-output matrix such a request always ran on baseline; now it is
routed where the chat template ignores tools (:mod:`fronde.router.classify`). Each arm
is a fresh ``fronde serve`` with its default modes, given every step of the agent
sessions (``fronde/bench/workloads/agent-sessions.json``: edits and questions on a
Python, a JavaScript and a SQL file) in order, each with an opencode-like tool list:
``before`` with ``router.speculate_structured = false`` (every such request on
baseline), ``after`` with the default. Per step: the route, the mode, decode tok/s from
llama-server's timings (the router's row) and the wall time; a step whose answer loops
in either arm is left out of the speeds and named.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median
from typing import Any

import httpx

from fronde.bench.tables import Grid
from fronde.bench.timed_client import repetition_score, router_row
from fronde.bench.verdict import LOOP_SCORE
from fronde.bench.workloads import load_workload

__all__ = ["AGENT_TOOLS", "ToolStep", "run_tool_session", "tool_grid", "tool_markdown"]


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


def run_tool_session(
    base_url: str,
    arm: str,
    max_tokens: int = 128,
    progress: Callable[[str, int], None] | None = None,
) -> list[ToolStep]:
    """Send every step of the agent sessions, with :data:`AGENT_TOOLS`, greedy, in order."""
    workload = load_workload("agent-sessions")
    out: list[ToolStep] = []
    with httpx.Client(base_url=base_url, timeout=900) as http:
        for item in workload.items:
            body = item.body("chat", max_tokens) | {"tools": AGENT_TOOLS, "stream": False}
            body.pop("stream_options", None)
            t0 = time.monotonic()
            r = http.post("/v1/chat/completions", json=body)
            wall = time.monotonic() - t0
            row = router_row(http, r.headers["x-fronde-request-id"])
            choices: list[dict[str, Any]] = r.json().get("choices") or [{}]
            message: dict[str, Any] = choices[0].get("message") or {}
            out.append(
                ToolStep(
                    arm=arm,
                    step=item.id,
                    route=r.headers.get("x-fronde-class", ""),
                    mode=r.headers.get("x-fronde-mode", ""),
                    decode_tok_s=float(row.get("decode_tok_s") or 0.0),
                    tokens=int(row.get("tokens") or 0),
                    wall_s=wall,
                    text=str(message.get("content") or ""),
                )
            )
            if progress is not None:
                progress(f"{arm} {item.id}", 1)
    return out


def tool_grid(steps: list[ToolStep], title: str) -> Grid:
    """Per arm: routes, Σ tokens ÷ Σ decode time, wall time; and after ÷ before."""
    grid = Grid(
        title,
        ("arm", "routes", "decode tok/s", "wall s", "step tok/s"),
        left=2,
    )
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


def tool_markdown(steps: list[ToolStep], title: str) -> str:
    """:func:`tool_grid` as a Markdown page (``tools.md``)."""
    return tool_grid(steps, title).markdown()
