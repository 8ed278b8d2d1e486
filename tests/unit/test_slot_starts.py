"""scripts/gpu/slot_starts.py: each task's wait between its slot's launch and its prompt."""

from __future__ import annotations

import gzip
from pathlib import Path

from tests.scripts import load_script

# A b11434 info log, cut to the lines the script reads: slot 1 was used and is idle
# when task 20 launches on slot 0 (one idle used slot); task 21 launches on slot 1 while
# slot 0 is busy (none).
LOG = """\
0.00.001.000 I srv  load_model: initializing, n_slots = 4
0.01.000.000 I slot get_availabl: id  1 | task -1 | selected slot by id (1)
0.01.000.500 I slot launch_slot_: id  1 | task 10 | processing task, is_child = 0
0.01.100.000 I slot print_timing: id  1 | task 10 |       total time =      99.00 ms /    20 tokens
0.01.100.600 I slot      release: id  1 | task 10 | stop processing: n_tokens = 20, truncated = 0
0.02.000.000 I slot get_availabl: id  0 | task -1 | selected slot by id (0)
0.02.004.000 I slot launch_slot_: id  0 | task 20 | processing task, is_child = 0
0.02.110.000 I slot get_availabl: id  1 | task -1 | selected slot by id (1)
0.02.110.500 I slot launch_slot_: id  1 | task 21 | processing task, is_child = 0
0.02.200.000 I slot print_timing: id  0 | task 20 |       total time =      90.00 ms /    20 tokens
0.02.200.000 I slot      release: id  0 | task 20 | stop processing: n_tokens = 20, truncated = 0
0.02.300.000 I slot print_timing: id  1 | task 21 |       total time =     189.00 ms /    20 tokens
0.02.300.000 I slot      release: id  1 | task 21 | stop processing: n_tokens = 20, truncated = 0
"""


def test_a_task_waits_are_read_with_the_idle_used_slots_at_its_launch(tmp_path: Path) -> None:
    script = load_script("gpu/slot_starts.py")
    rows, picks = script.waits(LOG.splitlines())
    # task 10: 0 idle used; 100.1 - 99 = 1.1 ms. task 20: slot 1 idle and used; 196 - 90 = 106
    # ms. task 21: slot 0 busy; 189.5 - 189 = 0.5 ms.
    assert [idle for idle, _ in rows] == [0, 1, 0]
    assert [round(w, 1) for _, w in rows] == [1.1, 106.0, 0.5]
    assert [round(p, 1) for p in picks] == [0.5, 4.0, 0.5]
    log = tmp_path / "baseline.log.gz"
    with gzip.open(log, "wt") as fh:
        fh.write(LOG)
    line = script.report(log)
    assert "3 tasks, launch→prompt 1.1 ms" in line and "0-7: 1.1 ms (3)" in line
    assert "select→launch 0.5 ms" in line


def test_a_log_without_tasks_says_so(tmp_path: Path) -> None:
    script = load_script("gpu/slot_starts.py")
    log = tmp_path / "fronde-serve.log"
    log.write_text('{"event": "serve.ready"}\n')
    assert script.report(log).endswith("no task")
