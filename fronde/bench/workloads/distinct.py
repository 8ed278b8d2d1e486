"""Distinct prompts: many short chat requests, none alike, for the load benchmark.

The agent mix (:func:`fronde.bench.load_mix.agent_mix`) has 74 items, so a window of
20 s at c = 32 sends most of them again, and a repeated prompt is drafted from a
speculative server's memory of the first answer and found in the prompt cache. These
prompts never repeat within a block: :data:`TEMPLATES` × :data:`TOPICS` (1,536) in one
seeded shuffle, more than a block sends at 2,000–3,000 tok/s over 25–30 s with
128-token answers (an H200 at c = 32 read 2,248 tok/s on such prompts: about 530
answers in 30 s). Deterministic: the same list on every machine and in every run.
"""

from __future__ import annotations

import random

from fronde.bench.workloads import Item, Workload

__all__ = ["DISTINCT_TOKENS", "TEMPLATES", "TOPICS", "distinct_workload"]

DISTINCT_TOKENS = 128
"""The answers' budget by default, tokens (``fronde bench load --max-tokens``): a
paragraph."""

TEMPLATES: tuple[str, ...] = (
    "Explain {t} to a curious twelve-year-old.",
    "Write a short paragraph about the history of {t}.",
    "What are three common misconceptions about {t}?",
    "Describe how {t} works, step by step.",
    "Give a beginner five practical tips about {t}.",
    "Write a haiku, then a one-line explanation, about {t}.",
    "What would change in daily life without {t}?",
    "Compare {t} with something from a kitchen, in a few sentences.",
    "List the main pros and cons of {t}.",
    "Write a short dialogue between two friends arguing about {t}.",
    "Summarize what an engineer should know about {t}.",
    "Invent a short story in which {t} saves the day.",
    "What questions would a journalist ask an expert on {t}?",
    "Describe {t} as a museum guide would.",
    "Write a product description for a book about {t}.",
    "Explain why {t} matters for the environment.",
    "Give a timeline of key moments in {t}.",
    "Write a limerick about {t} and explain its joke.",
    "How would you teach {t} in a one-hour class?",
    "Describe a day in the life of someone who works on {t}.",
    "What is the future of {t} in twenty years?",
    "Write a persuasive paragraph in favour of {t}.",
    "Explain {t} using only short sentences.",
    "What are the safety concerns around {t}?",
)
"""Request shapes; each takes one topic as ``{t}``."""

TOPICS: tuple[str, ...] = (
    "volcanoes",
    "bread baking",
    "the printing press",
    "honeybees",
    "lighthouses",
    "solar panels",
    "chess openings",
    "the Roman aqueducts",
    "coral reefs",
    "bicycles",
    "jazz improvisation",
    "glaciers",
    "paper money",
    "submarines",
    "tea ceremonies",
    "the immune system",
    "wind turbines",
    "origami",
    "the Silk Road",
    "black holes",
    "composting",
    "sourdough starters",
    "railway signalling",
    "octopuses",
    "weather balloons",
    "stained glass",
    "the water cycle",
    "public libraries",
    "electric guitars",
    "mushrooms",
    "container shipping",
    "ancient Egyptian writing",
    "rainforests",
    "typewriters",
    "the metric system",
    "hot air balloons",
    "cheese making",
    "desert plants",
    "radio astronomy",
    "marathon running",
    "beekeeping laws",
    "clock towers",
    "recycling plastics",
    "snowflakes",
    "violin making",
    "the Moon landings",
    "urban gardens",
    "tides",
    "pottery glazes",
    "migratory birds",
    "bridges",
    "fermented foods",
    "satellites",
    "map making",
    "earthquakes",
    "wool spinning",
    "penguins",
    "the telegraph",
    "rock climbing",
    "street lighting",
    "perfume",
    "the Olympic Games",
    "sea turtles",
    "spreadsheets",
)
"""Subjects; 64 of them, none a substring of a template."""


def distinct_workload(items: int | None = None, seed: int = 23) -> Workload:
    """:data:`TEMPLATES` × :data:`TOPICS` as chat items, shuffled with ``seed``.

    Each item is one user message (``messages``) and the same text as a completion
    prompt (``prompt``), no budget of its own (the run's, :data:`DISTINCT_TOKENS` by
    default); ids ``distinct-0000`` … in
    the shuffled order, domain the template's number. ``items`` keeps the first that
    many (all when None).
    """
    pairs = [(k, topic) for k in range(len(TEMPLATES)) for topic in TOPICS]
    random.Random(seed).shuffle(pairs)  # noqa: S311 - a reproducible order, not a secret
    out: list[Item] = []
    for n, (k, topic) in enumerate(pairs[:items]):
        text = TEMPLATES[k].format(t=topic)
        out.append(
            Item(
                id=f"distinct-{n:04d}",
                domain=f"template-{k:02d}",
                prompt=f"Question: {text}\nAnswer:",
                messages=({"role": "user", "content": text},),
            )
        )
    return Workload("distinct", tuple(out))
