"""The load run's workloads, and the file of requests an outside client sends again.

``agent``: workload A's first-encounter prompts and workload B's agent steps in one
seeded shuffle (74 items). ``distinct``: 1,536 short chat prompts, none alike
(:func:`distinct_workload`). ``workload.json`` holds every request body as sent to a
llama-server, in order (``scripts/load_check.py`` sends them again).

Why distinct prompts: the agent mix has 74 items, so a 20 s window at c = 32 sends most
again, drafted from a speculative server's memory and found in the prompt cache. The
templates × topics of ``workloads/distinct.json`` (24 × 64 = 1,536, one seeded shuffle)
are more than a block sends (an H200 at c = 32 read 2,248 tok/s: about 530 answers in
30 s).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from fronde.bench.timed_client import PATHS
from fronde.bench.workloads import FOLDER, Form, Item, Workload, load_workload

__all__ = [
    "DISTINCT_TOKENS", "WorkloadName", "agent_mix", "default_tokens", "distinct_workload",
    "load_mix", "workload_file",
]  # fmt: skip

WorkloadName = Literal["agent", "distinct"]
"""The load run's workloads (``fronde bench load --workload``)."""

DISTINCT_TOKENS = 128
"""The distinct prompts' answers' budget by default, tokens (``fronde bench load --max-tokens``)."""


def _cut(whole: Workload, items: int | None, skip: Sequence[str]) -> Workload:
    """``whole`` with ``skip`` left out, then the first ``items`` kept (all when None)."""
    left = set(skip)
    return Workload(whole.name, tuple([i for i in whole.items if i.id not in left][:items]))


def agent_mix(items: int | None = None, seed: int = 23, skip: Sequence[str] = ()) -> Workload:
    """Workload A's prompts and B's agent steps shuffled with ``seed``.

    ``skip`` is left out, then the first ``items`` kept (all when None).
    """
    mix = [*load_workload("first-encounter").items, *load_workload("agent-sessions").items]
    random.Random(seed).shuffle(mix)  # noqa: S311 - a reproducible order, not a secret
    return _cut(Workload("agent-mix", tuple(mix)), items, skip)


def distinct_workload(seed: int = 23) -> Workload:
    """Every template × topic of ``distinct.json`` as chat items, shuffled with ``seed``.

    Ids ``distinct-0000`` … in the shuffled order, domain the template's number.
    """
    data = json.loads((FOLDER / "distinct.json").read_text(encoding="utf-8"))
    templates: list[str] = data["templates"]
    pairs = [(k, topic) for k in range(len(templates)) for topic in data["topics"]]
    random.Random(seed).shuffle(pairs)  # noqa: S311 - a reproducible order, not a secret
    out: list[Item] = []
    for n, (k, topic) in enumerate(pairs):
        text = templates[k].format(t=topic)
        out.append(
            Item(
                id=f"distinct-{n:04d}",
                domain=f"template-{k:02d}",
                prompt=f"Question: {text}\nAnswer:",
                messages=({"role": "user", "content": text},),
            )
        )
    return Workload("distinct", tuple(out))


def load_mix(name: WorkloadName, items: int | None = None, skip: Sequence[str] = ()) -> Workload:
    """The workload ``name``, ``skip`` left out, the first ``items`` (all when None)."""
    if name == "distinct":
        return _cut(distinct_workload(), items, skip)
    return agent_mix(items, skip=skip)


def default_tokens(name: WorkloadName) -> int:
    """The budget of a workload's items that carry none: 64 (agent), 128 (distinct)."""
    return DISTINCT_TOKENS if name == "distinct" else 64


def workload_file(path: Path, workload: Workload, form: Form, max_tokens: int) -> None:
    """Write ``workload``'s requests as sent to a llama-server to ``path`` (JSON).

    ``{"name", "path", "items": [{"id", "body"}]}``: ``path`` the endpoint of ``form``.
    """
    body = {
        "name": workload.name,
        "path": PATHS[form],
        "items": [{"id": i.id, "body": i.body(form, max_tokens)} for i in workload.items],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, ensure_ascii=False, indent=1) + "\n")
