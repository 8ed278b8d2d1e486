"""scripts/slot_runs.py: busy runs from records, and the replay of each slot rule."""

from __future__ import annotations

from typing import Any

from tests.scripts import load_script


def _request(t0: float, wall_s: float, slot: int) -> dict[str, Any]:
    return {"t0": t0, "wall_s": wall_s, "route": {"slot": str(slot)}}


def _walk() -> list[dict[str, Any]]:
    """Six requests on 25 down to 20 (the first where the server's first one put it), three
    of them short (24, 23, 20), then two more: the recorded slots after the first are
    the rule's to choose again."""
    first = [_request(0.0, 10.0, 25)]
    first += [_request(0.01 * k, 10.0 if k in (3, 4) else 1.0, 0) for k in range(1, 6)]
    return [*first, _request(1.5, 8.0, 0), _request(1.6, 8.0, 0)]


def test_the_rule_before_walked_down_and_the_current_one_closes_the_gaps() -> None:
    script = load_script("slot_runs.py")
    window = (2.0, 9.0)
    old = script.block_figures(script.replayed(_walk(), script.edge_first, 32), window)
    new = script.block_figures(script.replayed(_walk(), script.next_slot, 32), window)
    # Held {25, 22, 21} at 1.5: edge-first extends down to 20 and 19 (runs {25} and
    # {19-22}); next_slot fills the gap, 23, then 24 joins the two: one run.
    assert old["split"] == 1.0 and old["runs"] == 2.0
    assert new["split"] == 0.0 and new["runs"] == 1.0


def test_runs_counts_runs_of_consecutive_ids() -> None:
    script = load_script("slot_runs.py")
    assert [script.runs(b) for b in ([], [3], [3, 4, 5], [0, 2, 3, 7])] == [0, 1, 1, 3]
