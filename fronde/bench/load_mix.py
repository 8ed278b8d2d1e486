"""The load run's workloads, and the file of requests an outside client sends again.

``agent``: workload A's first-encounter prompts and workload B's agent steps in one
seeded shuffle (74 items). ``distinct``: 1,536 short chat prompts, none alike
(:mod:`fronde.bench.workloads.distinct`). ``workload.json`` holds every request body
as sent to a llama-server, in order (``scripts/load_check.py`` sends them again).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from fronde.bench.timed_client import PATHS
from fronde.bench.workloads import Form, Workload, load_workload
from fronde.bench.workloads.distinct import DISTINCT_TOKENS, distinct_workload

__all__ = ["WorkloadName", "agent_mix", "default_tokens", "load_mix", "workload_file"]

WorkloadName = Literal["agent", "distinct"]
"""The load run's workloads (``fronde bench load --workload``)."""


def agent_mix(items: int | None = None, seed: int = 23, skip: Sequence[str] = ()) -> Workload:
    """Workload A's prompts and B's agent steps shuffled with ``seed``.

    ``skip`` is left out, then the first ``items`` kept (all when None).
    """
    mix = [*load_workload("first-encounter").items, *load_workload("agent-sessions").items]
    random.Random(seed).shuffle(mix)  # noqa: S311 - a reproducible order, not a secret
    left = set(skip)
    return Workload("agent-mix", tuple([i for i in mix if i.id not in left][:items]))


def load_mix(name: WorkloadName, items: int | None = None, skip: Sequence[str] = ()) -> Workload:
    """The workload ``name``, ``skip`` left out, the first ``items`` (all when None)."""
    if name == "distinct":
        left = set(skip)
        whole = distinct_workload()
        return Workload(whole.name, tuple([i for i in whole.items if i.id not in left][:items]))
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
