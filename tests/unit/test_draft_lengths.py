"""The draft length by load: measured by ``fronde bench load``, saved with the load curves,
set per request on the one server of every mode.

Over fake llama-servers (tests/fakes): ``--fake-record`` writes each body a server
receives, so a test sees the ``speculative.n_max`` a request carried.
"""

from __future__ import annotations

import json
from pathlib import Path

from fronde.evidence.calibration import LoadCurves, load_curves, save_load_curves
from fronde.evidence.draft_schedule import DraftSchedule
from fronde.modes import Mode

SCHEDULE = DraftSchedule({Mode.NGRAM_MOD: ((1, 24), (4, 8)), Mode.CASCADE: ((2, 16),)})
CURVES = LoadCurves(
    {
        Mode.BASELINE: ((1, 600.0), (4, 2200.0)),
        Mode.NGRAM_MOD: ((1, 700.0), (4, 1900.0)),
        Mode.CASCADE: ((1, 690.0), (4, 1850.0)),
    },
    "runs/load-test",
    lengths=SCHEDULE,
)


# --- the schedule and its file -------------------------------------------------------------


def test_the_schedule_is_a_step_from_the_largest_load_measured_at_or_below_n() -> None:
    assert SCHEDULE.n_max(Mode.NGRAM_MOD, 1) == 24
    assert SCHEDULE.n_max(Mode.NGRAM_MOD, 3) == 24  # a step, not a line
    assert SCHEDULE.n_max(Mode.NGRAM_MOD, 4) == 8
    assert SCHEDULE.n_max(Mode.NGRAM_MOD, 64) == 8
    assert SCHEDULE.n_max(Mode.CASCADE, 1) == 16  # below the smallest c: its point
    assert SCHEDULE.n_max(Mode.NGRAM_SIMPLE, 4) is None  # not measured


def test_the_schedule_survives_load_json_and_an_old_entry_loads_without_one(
    tmp_path: Path,
) -> None:
    save_load_curves(tmp_path, "k", CURVES)
    data = json.loads((tmp_path / "load.json").read_text())
    assert data["k"]["draft_lengths"] == {"ngram-mod": [[1, 24], [4, 8]], "cascade": [[2, 16]]}
    back = load_curves(tmp_path, "k")
    assert back is not None and back.lengths == SCHEDULE and back.points == CURVES.points
    # An entry written before the schedule existed: the curves load, no schedule.
    del data["k"]["draft_lengths"]
    data["old"] = data["k"]
    data["bad"] = data["k"] | {"draft_lengths": {"ngram-mod": [[0, 8]], "nope": [[1, 2]]}}
    (tmp_path / "load.json").write_text(json.dumps(data))
    old = load_curves(tmp_path, "old")
    assert old is not None and old.lengths is None and old.points == CURVES.points
    bad = load_curves(tmp_path, "bad")
    assert bad is not None and bad.lengths is None  # nothing readable in it
