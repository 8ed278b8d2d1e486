"""fronde.config_sections.physical_cores: llama.cpp's count of cores, from sysfs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fronde import config_sections
from fronde.config_sections import BackendSettings, physical_cores


def _sysfs(root: Path, masks: list[str]) -> Path:
    for cpu, mask in enumerate(masks):
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings").write_text(mask + "\n")
    return root


def test_two_hardware_threads_of_a_core_count_once(tmp_path: Path) -> None:
    # 4 cores with 2 threads each, numbered as Linux does on x86: cpu k and k + 4 share one.
    root = _sysfs(tmp_path, ["11", "22", "44", "88", "11", "22", "44", "88"])
    assert physical_cores(root, range(8)) == 4
    # A container's share: cpus 0 and 4 are one core, 1 another.
    assert physical_cores(root, [0, 4, 1]) == 2


def test_cores_without_hardware_threads_count_one_each(tmp_path: Path) -> None:
    root = _sysfs(tmp_path, ["1", "2"])
    assert physical_cores(root, [0, 1]) == 2


def test_no_topology_gives_none(tmp_path: Path) -> None:
    assert physical_cores(tmp_path, [0, 1]) is None
    assert physical_cores(tmp_path, []) is None


def test_the_default_threads_are_the_cores_at_most_8_else_the_cpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(config_sections, "physical_cores", lambda: 4)
    assert BackendSettings().threads == 4  # a 4-core, 8-thread laptop: -t 4, not 8
    monkeypatch.setattr(config_sections, "physical_cores", lambda: 24)
    assert BackendSettings().threads == 8
    monkeypatch.setattr(config_sections, "physical_cores", lambda: None)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert BackendSettings().threads == 3
