"""The battery: eight prompts written by the project, five generations and three edits.

The CPU profile's model (gemma-3-270m) is a base model, so every prompt is
completion-style: generations open a document the model continues, and edits lay
out an original file, then a heading for the corrected file, so that the model
copies the original while changing what was asked. That copy is the case n-gram
speculation exists for, and the edits' outputs are mostly copies by design.

An instruct profile would wrap the same tasks in chat messages; only the form
changes, not the task (see ``BatteryPrompt.kind``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BATTERY", "INVENTORY_PY", "BatteryPrompt"]


@dataclass(frozen=True)
class BatteryPrompt:
    """One battery prompt.

    Attributes:
        name: short key used in records and tables.
        kind: ``generation`` or ``edit`` (the seed's lengths: 768 and 1536 tokens).
        content: the content class (code, prose, math, json) for per-class verdicts.
        prompt: the completion-style text sent as ``prompt``.
        stop: a stop string that ends an edit at the closing fence, or None.
    """

    name: str
    kind: Literal["generation", "edit"]
    content: Literal["code", "prose", "math", "json"]
    prompt: str
    stop: str | None = None


INVENTORY_PY = """import json


class inventory:
    def __init__(self, path):
        self.path = path
        self.items = {}

    def load(self):
        with open(self.path) as f:
            self.items = json.load(f)

    def save(self):
        with open(self.path, "w") as f:
            json.dump(self.items, f, indent=2)

    def add(self, name, count):
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name, count):
        have = self.items.get(name, 0)
        if count > have:
            raise ValueError("not enough " + name)
        self.items[name] = have - count

    def total(self):
        t = 0
        for k in self.items:
            t = t + self.items[k]
        return t

    def low(self, limit):
        out = []
        for k in self.items:
            if self.items[k] < limit:
                out.append(k)
        return out
"""
"""The file the rewrite edit and the agent loop start from (about 250 tokens)."""

_WINDOWS = '''def moving_average(values, window):
    """Return the moving averages of values over window items."""
    out = []
    for i in range(len(values) - window):
        chunk = values[i:i + window]
        out.append(sum(chunk) / window)
    return out


def normalize(values):
    lo, hi = min(values), max(values)
    return [(v - lo) / (hi - lo) for v in values]


def histogram(values, bins):
    lo, hi = min(values), max(values)
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        k = min(int((v - lo) / width), bins - 1)
        counts[k] += 1
    return counts


def summary(values):
    return {"n": len(values), "mean": sum(values) / len(values),
            "min": min(values), "max": max(values)}


def clip(values, lo, hi):
    return [min(max(v, lo), hi) for v in values]
'''

_CONFIG_JSON = """{
  "service": "orders",
  "version": "1.4.2",
  "listen": {"host": "0.0.0.0", "port": 8080},
  "database": {
    "url": "postgres://orders@db:5432/orders",
    "pool_size": 10,
    "timeout_s": 5
  },
  "cache": {"enabled": false, "ttl_s": 60},
  "features": ["refunds", "coupons", "gift-cards"],
  "limits": {"max_items": 50, "max_total_eur": 5000},
  "log": {"level": "info", "format": "text"}
}
"""

BATTERY: tuple[BatteryPrompt, ...] = (
    BatteryPrompt(
        "code",
        "generation",
        "code",
        "# file: geometry.py\n"
        '"""Small 2-D geometry helpers: points, vectors, polygons."""\n\n'
        "import math\n\n\nclass Point:\n",
    ),
    BatteryPrompt(
        "prose-en",
        "generation",
        "prose",
        "The history of the lighthouse is a history of coastlines, of trade and of the "
        "people who kept the lamps burning through the night. In this essay we follow",
    ),
    BatteryPrompt(
        "prose-fr",
        "generation",
        "prose",
        "L'histoire des moulins à vent en France commence au Moyen Âge. Dans les plaines "
        "de Beauce comme sur les côtes de Bretagne, les meuniers",
    ),
    BatteryPrompt(
        "math",
        "generation",
        "math",
        "Problem: A train travels 180 km in 2 hours and then 240 km in 3 hours. What is "
        "its average speed for the whole journey?\nSolution, step by step:\nStep 1:",
    ),
    BatteryPrompt(
        "json",
        "generation",
        "json",
        '{"catalog": [\n  {"id": 1, "name": "desk lamp", "price": 24.5, "stock": 12, '
        '"tags": ["lighting", "office"]},\n  {"id": 2, "name": "bookshelf", "price": 89.0, '
        '"stock": 4, "tags": ["furniture"]},\n  {"id": 3,',
    ),
    BatteryPrompt(
        "edit-rewrite",
        "edit",
        "code",
        "Rename the class inventory to Inventory and add type hints to every method.\n"
        f"```python\n{INVENTORY_PY}```\n"
        "Here is the whole file again, with the class renamed and type hints added:\n"
        "```python\n",
        stop="```",
    ),
    BatteryPrompt(
        "edit-bugfix",
        "edit",
        "code",
        "Fix the off-by-one bug in moving_average (the last window is skipped).\n"
        f"```python\n{_WINDOWS}```\n"
        "Here is the whole file again, with the bug fixed:\n```python\n",
        stop="```",
    ),
    BatteryPrompt(
        "edit-json",
        "edit",
        "json",
        "Change the port to 9090, enable the cache, and set the log level to debug.\n"
        f"```json\n{_CONFIG_JSON}```\n"
        "Here is the whole file again, with the three changes:\n```json\n",
        stop="```",
    ),
)
"""The eight battery prompts, in the order the runner visits them."""
