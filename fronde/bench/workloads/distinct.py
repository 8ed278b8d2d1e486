"""Distinct prompts: many short chat requests, none alike, for the load benchmark.

The agent mix (:func:`fronde.bench.load_mix.agent_mix`) has 74 items, so a window of
20 s at c = 32 sends most of them again, and a repeated prompt is drafted from a
speculative server's memory of the first answer and found in the prompt cache. These
prompts never repeat within a block: the templates × topics of ``distinct.json``
(24 × 64 = 1,536) in one seeded shuffle, more than a block sends at 2,000–3,000 tok/s
over 25–30 s with 128-token answers (an H200 at c = 32 read 2,248 tok/s on such
prompts: about 530 answers in 30 s). Deterministic: the same list on every machine and
in every run.
"""

from __future__ import annotations

import json
import random

from fronde.bench.workloads import FOLDER, Item, Workload

__all__ = ["DISTINCT_TOKENS", "distinct_workload"]

DISTINCT_TOKENS = 128
"""The answers' budget by default, tokens (``fronde bench load --max-tokens``): a
paragraph."""


def distinct_workload(items: int | None = None, seed: int = 23) -> Workload:
    """Every template × topic of ``distinct.json`` as chat items, shuffled with ``seed``.

    Each item is one user message (``messages``) and the same text as a completion
    prompt (``prompt``), no budget of its own (the run's, :data:`DISTINCT_TOKENS` by
    default); ids ``distinct-0000`` … in the shuffled order, domain the template's
    number. ``items`` keeps the first that many (all when None).
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
