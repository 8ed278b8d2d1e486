"""The benchmark's one store: versioned JSONL, resumable by block, failures kept.

Records (each with ``schema`` = :data:`SCHEMA`): ``run`` (machine, llama-server build,
commit and dirty flag, the plan), ``sample`` (one request of one block, or its
failure) and ``block`` (a block ended: ``ok``, or why not). A resumed run skips the
blocks that ended ok; samples count only from the last ok block of a key. Records from
another machine or build are refused (pyperf's ``_compare.py`` refuses the same).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from fronde.errors import FrondeError

__all__ = ["SCHEMA", "SESSION_GAP_S", "Store", "machine_class", "samples_of", "sessions"]

SCHEMA = 2
"""Version of the record layout (1 was the retired battery's)."""


def machine_class(machine: object) -> object:
    """What of a ``machine`` record must match: ``system`` becomes its ``os`` and ``arch``.

    ``"Linux-6.18.44-fc-v1147-gpu-x86_64-…"`` → ``os`` Linux, ``arch`` x86_64 (the
    kernel's build differs between leases of one kind of VM).
    """
    if not isinstance(machine, dict):
        return machine
    rec = cast("dict[str, Any]", machine)
    if "system" not in rec:
        return rec
    system = str(rec["system"])
    arch = next((a for a in ("x86_64", "aarch64", "arm64") if a in system), "")
    rest = {k: v for k, v in rec.items() if k != "system"}
    return {**rest, "os": system.split("-", 1)[0], "arch": arch}


SESSION_GAP_S = 1800
"""Runs without ``boot_id`` started further apart than this, s, are two sessions (a lease
of the device machine lasts 30 minutes at most)."""


def _session_key(run: dict[str, Any]) -> tuple[str, str | None, float | None]:
    try:
        started = datetime.strptime(str(run.get("started_at")), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:  # a run record without its start: no time to tell sessions by
        at = None
    else:
        at = started.replace(tzinfo=UTC).timestamp()
    system = str(cast("dict[str, Any]", run.get("machine") or {}).get("system", ""))
    return system, run.get("boot_id"), at


def sessions(records: Sequence[dict[str, Any]]) -> dict[str, str]:
    """``block_id`` → the measuring session that ran it (one machine, one boot).

    Labelled by its first start, UTC (``2026-12-03 13:02``). Two runs are one session
    when they share a ``boot_id`` or, without one, ran on the same kernel build within
    :data:`SESSION_GAP_S`. The same server read 0.52–0.94× from one H200 lease to the
    next (``results/load-gpu-h200-cpu-smollm2-135m-20261203``).
    """
    out: dict[str, str] = {}
    label, prev = "", None
    for rec in records:
        if rec.get("type") == "run":
            key = _session_key(rec)
            same = prev is not None and (
                key[1] == prev[1]
                if key[1] and prev[1]
                else key[0] == prev[0]
                and (key[2] is None or prev[2] is None or 0 <= key[2] - prev[2] <= SESSION_GAP_S)
            )
            if not same:
                label = str(rec.get("started_at", ""))[:16].replace("T", " ")
            prev = key
        elif "block_id" in rec:
            out.setdefault(str(rec["block_id"]), label)
    return out


@dataclass(frozen=True)
class Store:
    """An append-only JSONL file of benchmark records."""

    path: Path

    def append(self, record: dict[str, Any]) -> None:
        """Append one record (``schema`` added), flushed at once so a stop loses nothing."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"schema": SCHEMA, **record}, ensure_ascii=False) + "\n")

    @property
    def packed(self) -> Path:
        """The file as committed to ``results/``: the path with ``.gz`` added."""
        return self.path.with_name(self.path.name + ".gz")

    def exists(self) -> bool:
        """Whether the file, or its gzipped copy (:attr:`packed`), is there."""
        return self.path.exists() or self.packed.exists()

    def records(self) -> list[dict[str, Any]]:
        """Every record of this schema in file order (from :attr:`packed` if only it is)."""
        if self.path.exists():
            text = self.path.read_text(encoding="utf-8")
        elif self.packed.exists():
            text = gzip.decompress(self.packed.read_bytes()).decode("utf-8")
        else:
            return []
        out: list[dict[str, Any]] = []
        for line in text.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and cast("dict[str, Any]", rec).get("schema") == SCHEMA:
                out.append(cast("dict[str, Any]", rec))
        return out

    def begin(self, run: dict[str, Any], identity: dict[str, Any]) -> None:
        """Write a ``run`` record after checking earlier runs share ``identity``.

        ``identity`` is what must match to compare speeds (machine by
        :func:`machine_class`, build, profile, form…); ``run`` describes the run.

        Raises:
            FrondeError: the file holds a run with another identity (which field).
        """
        for rec in self.records():
            if rec["type"] != "run":
                continue
            for key, value in identity.items():
                old = rec["identity"].get(key)
                if key == "machine":
                    same = machine_class(old) == machine_class(value)
                else:
                    same = old == value
                if not same:
                    raise FrondeError(
                        f"{self.path} holds a run with another {key} "
                        f"({old!r}, not {value!r}); use another --out"
                    )
        self.append({"type": "run", "identity": identity, **run})

    def done_blocks(self) -> set[str]:
        """Keys of the blocks that ended ok."""
        return {r["block"] for r in self.records() if r["type"] == "block" and r["ok"]}

    def samples(self) -> list[dict[str, Any]]:
        """The samples of the last ok block of each key, in file order (:func:`samples_of`)."""
        return samples_of(self.records())


def samples_of(recs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples of the last ok block of each key among ``recs`` (a store's records)."""
    last: dict[str, str] = {}
    for r in recs:
        if r["type"] == "block" and r["ok"]:
            last[r["block"]] = r["block_id"]
    return [r for r in recs if r["type"] == "sample" and last.get(r["block"]) == r["block_id"]]
