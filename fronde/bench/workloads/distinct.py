"""Distinct prompts: many short chat requests, none alike, for the load benchmark.

The agent mix has 74 items, so a 20 s window at c = 32 sends most again, drafted from a
speculative server's memory and found in the prompt cache. The templates × topics of
``distinct.json`` (24 × 64 = 1,536, one seeded shuffle) are more than a block sends (an
H200 at c = 32 read 2,248 tok/s: about 530 answers in 30 s).
"""

from __future__ import annotations

import json
import random

from fronde.bench.workloads import FOLDER, Item, Workload

__all__ = ["DISTINCT_TOKENS", "distinct_workload"]

DISTINCT_TOKENS = 128
"""The answers' budget by default, tokens (``fronde bench load --max-tokens``)."""


def distinct_workload(items: int | None = None, seed: int = 23) -> Workload:
    """Every template × topic as chat items, shuffled with ``seed``; the first ``items``.

    Ids ``distinct-0000`` … in the shuffled order, domain the template's number.
    """
    data = json.loads((FOLDER / "distinct.json").read_text(encoding="utf-8"))
    templates: list[str] = data["templates"]
    pairs = [(k, topic) for k in range(len(templates)) for topic in data["topics"]]
    random.Random(seed).shuffle(pairs)  # noqa: S311 - a reproducible order, not a secret
    out: list[Item] = []
    for n, (k, topic) in enumerate(pairs[:items]):
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
