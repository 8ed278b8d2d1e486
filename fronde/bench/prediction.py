"""Does a Predicted Output pay? Edits with and without ``prediction``, on fresh servers.

Each arm is its own ``fronde serve`` forced to ngram-mod (its pool starts empty), given
the same distinct edits: a small Python file of its own (nothing repeats across
requests) and an instruction. Two scenarios: ``file-in-prompt`` (the prompt holds the
file and asks for it whole with one change; OpenAI's own example) and ``diff-only``
(the prompt holds only a diff; ``prediction`` is a file the model does not otherwise
see). Per request: decode tok/s and α from ``timings``, the wall time, the feed's time
(``x-fronde-prediction-feed-ms``) and ``accepted_prediction_tokens``. An edit whose
answer loops in either arm is left out and named (a loop is drafted perfectly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from fronde.bench.arms import Arm
from fronde.bench.protocol import Level, Plan
from fronde.bench.tables import Grid
from fronde.bench.timed_client import repetition_score
from fronde.bench.verdict import LOOP_SCORE
from fronde.bench.workloads import Item, Workload
from fronde.modes import Mode

__all__ = [
    "EDITS", "SCENARIOS", "Edit", "PredictionSample", "prediction_grid", "prediction_plans",
    "prediction_samples", "server_tok_s",
]  # fmt: skip

SCENARIOS = ("file-in-prompt", "diff-only")
"""The two scenarios (module docstring), in run and page order."""


@dataclass(frozen=True)
class Edit:
    """One edit: the old file, the change as a diff, and the two prompts."""

    old: str
    diff: str
    instruction: str

    def prompt(self, scenario: str) -> str:
        """The request's user message for ``scenario`` (module docstring)."""
        if scenario == "diff-only":
            return f"Apply this diff and output the whole new file, nothing else:\n{self.diff}"
        return f"{self.instruction} Output the whole new file, nothing else.\n\n{self.old}"


def _edit(i: int) -> Edit:
    """A distinct small file (names and constants depend on ``i``) and one change to it."""
    name, k = f"scale_{i}", 3 + i
    old = (
        f"def {name}(values, factor={k}):\n"
        f'    """Multiply every value by factor {k} and drop the negative ones."""\n'
        f"    kept = [v for v in values if v >= 0]\n"
        f"    return [v * factor for v in kept]\n\n\n"
        f"def total_{i}(values):\n"
        f"    return sum({name}(values))\n\n\n"
        f"if __name__ == '__main__':\n"
        f"    print(total_{i}([1, 2, -3, {i}]))\n"
    )
    diff = (
        f"--- a/m{i}.py\n+++ b/m{i}.py\n@@ -3,2 +3,2 @@\n"
        f"-    kept = [v for v in values if v >= 0]\n+    kept = [v for v in values if v > 0]\n"
    )
    instruction = f"In this file, make {name} drop zeros too (keep only values > 0)."
    return Edit(old, diff, instruction)


EDITS = [_edit(i) for i in range(8)]
"""The edits, in order."""


@dataclass(frozen=True)
class PredictionSample:
    """One answer: its scenario, arm (``with`` or ``without`` a prediction) and figures."""

    scenario: str
    arm: str
    edit: int
    decode_tok_s: float
    alpha: float | None
    tokens: int
    wall_s: float
    feed_ms: float | None
    accepted_prediction_tokens: int | None
    text: str


def prediction_plans(max_tokens: int = 192) -> list[Plan]:
    """Per scenario, the arm ``without`` then ``with`` a prediction (the old file).

    Each is `fronde serve --mode ngram-mod` (its pool empty), sent every edit, whole.
    """
    plans: list[Plan] = []
    for scenario in SCENARIOS:
        for arm in ("without", "with"):
            items = tuple(
                Item(
                    f"edit-{i}",
                    scenario,
                    edit.prompt(scenario),
                    ({"role": "user", "content": edit.prompt(scenario)},),
                    model="fronde:ngram-mod",
                    fields={"prediction": {"type": "content", "content": edit.old}}
                    if arm == "with"
                    else {},
                )
                for i, edit in enumerate(EDITS)
            )
            about = f"Fronde, ngram-mod forced, {arm} a prediction"
            plans.append(
                Plan.single(
                    Workload(scenario, items),
                    [Arm(arm, "fronde", Mode.NGRAM_MOD, about=about)],
                    1,
                    "chat",
                    max_tokens,
                    (Level(stream=False),),
                )
            )
    return plans


def server_tok_s(record: dict[str, Any]) -> float:
    """A sample's decode tok/s by its llama-server's ``timings`` (0.0 without them)."""
    timings: dict[str, Any] = record.get("timings") or {}
    return float(timings.get("predicted_per_second") or 0.0)


def prediction_samples(records: Sequence[dict[str, Any]]) -> list[PredictionSample]:
    """The answers of :func:`prediction_plans` from the store's sample records (ok ones)."""
    out: list[PredictionSample] = []
    for rec in records:
        if not rec["ok"]:
            continue
        feed = rec["route"].get("prediction-feed-ms")
        out.append(
            PredictionSample(
                scenario=rec["workload"],
                arm=rec["arm"],
                edit=int(rec["order"]),
                decode_tok_s=server_tok_s(rec),
                alpha=rec["alpha"],
                tokens=int(rec["tokens"]),
                wall_s=float(rec["wall_s"]),
                feed_ms=float(feed) if feed is not None else None,
                accepted_prediction_tokens=rec.get("accepted_prediction_tokens"),
                text=rec["text"],
            )
        )
    return out


def _median(values: list[float]) -> str:
    return f"{median(values):.2f}" if values else "-"


def prediction_grid(samples: list[PredictionSample], title: str) -> Grid:
    """Medians per scenario and arm, and the ratios with ÷ without over the same edits."""
    grid = Grid(
        title,
        ("scenario", "arm", "decode tok/s", "α", "wall s", "feed ms", "accepted", "same"),
        left=2,
    )
    looping = {(s.scenario, s.edit) for s in samples if repetition_score(s.text) > LOOP_SCORE}
    notes: list[str] = []
    for scenario in SCENARIOS:
        left_out = sorted(e for sc, e in looping if sc == scenario)
        if left_out:
            notes.append(f"{scenario}: edits {left_out} looped in an arm, left out")
        kept = [s for s in samples if s.scenario == scenario and s.edit not in left_out]
        without = {s.edit: s for s in kept if s.arm == "without"}
        for arm in ("without", "with"):
            group = [s for s in kept if s.arm == arm]
            if not group:
                if any(s.scenario == scenario and s.arm == arm for s in samples):
                    grid.rows.append((scenario, arm, "all looped"))
                continue
            alphas = [s.alpha for s in group if s.alpha is not None]
            feeds = [s.feed_ms for s in group if s.feed_ms is not None]
            accepted = [
                float(s.accepted_prediction_tokens)
                for s in group
                if s.accepted_prediction_tokens is not None
            ]
            same = sum(1 for s in group if s.edit in without and without[s.edit].text == s.text)
            grid.rows.append(
                (
                    scenario,
                    arm,
                    _median([s.decode_tok_s for s in group]),
                    _median(alphas),
                    _median([s.wall_s for s in group]),
                    _median(feeds),
                    _median(accepted),
                    f"{same}/{len(group)}",
                )
            )
        pairs = [(s, without[s.edit]) for s in kept if s.arm == "with" and s.edit in without]
        speed = [w.decode_tok_s / o.decode_tok_s for w, o in pairs if o.decode_tok_s]
        wall = [w.wall_s / o.wall_s for w, o in pairs if o.wall_s]
        if pairs:
            grid.rows.append((scenario, "with ÷ without", _median(speed), "", _median(wall)))
    grid.notes.append(
        "accepted: the prediction's tokens found in the answer (OpenAI's"
        " accepted_prediction_tokens); same: answers identical to the arm without's."
    )
    grid.notes.append(
        "Medians over the edits; the ratios are medians of per-edit ratios. An edit whose "
        f"answer loops in either arm (repetition score > {LOOP_SCORE}) counts in neither."
    )
    grid.notes.extend(notes)
    return grid
