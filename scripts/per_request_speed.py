"""Decode speed of per-request speculation on one llama-server (Fronde's patch set).

Arms, each a request of the same copy task (a text the model continues by copying) at
temperature 0, prompt cache off, interleaved round by round so that a busy machine
weighs on every arm alike:

- ``stock-plain``: stock b11434 without speculation (the speed to match);
- ``patched-plain``: the patched build without speculation (what the patch costs);
- ``cascade-n_max-0``: the patched build started with the cascade (``--spec-type
  ngram-simple,ngram-mod``, Fronde's ngram-mod flags), the request sending
  ``speculative.n_max`` = 0;
- ``cascade-on``: the same server, the request without the field (drafting as configured).

Each arm reports llama-server's own ``timings.predicted_per_second`` (decode tok/s),
``draft_n`` and ``draft_n_accepted``, one JSON line per request, then a summary line per
arm (median, min, max). Servers are started from the argv Fronde itself would use
(``plan_pool``), so the flags are the benchmark's.

    python scripts/per_request_speed.py --stock ~/.cache/fronde/llama.cpp/<stock>/bin/llama-server \
        --patched /path/to/patched/bin/llama-server --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from fronde.backends.pool import plan_pool
from fronde.backends.process import free_port
from fronde.config import load_settings
from fronde.modes import Mode
from fronde.runtime.models import load_profile

COPY = (
    "Copy the list below exactly, then copy it again.\n\n"
    + "".join(
        f"{i}. item {i}: the {w} is in box {i * 7 % 13}\n"
        for i, w in enumerate(
            ["apple", "river", "hammer", "cloud", "violin", "pepper", "engine", "garden"] * 2, 1
        )
    )
    + "\nCopy:\n1."
)
"""The copy task: the model repeats a list it has just read, so n-gram drafts are accepted."""


def argv_for(binary: Path, mode: Mode, profile: str) -> list[str]:
    """Fronde's llama-server argv for ``mode`` of ``profile``, on ``binary``."""
    settings = load_settings(profile=profile, modes=[mode])
    plan = plan_pool(settings, load_profile(settings.models_dir, profile), binary, Path("."))
    return [str(binary), *plan.specs[mode].args]


@contextmanager
def server(argv: list[str], log: Path) -> Generator[str]:
    """A llama-server from ``argv`` on a free port until the block ends; its base URL."""
    port = free_port()
    with log.open("wb") as fh:
        proc = subprocess.Popen([*argv, "--port", str(port)], stdout=fh, stderr=fh)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{argv[0]} exited: {log.read_text()[-1000:]}")
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def one(base: str, n_predict: int, fields: dict[str, Any]) -> dict[str, Any]:
    """The native /completion answer to the copy task with ``fields``."""
    body = {"prompt": COPY, "n_predict": n_predict, "temperature": 0, "cache_prompt": False}
    r = httpx.post(base + "/completion", json=body | fields, timeout=600)
    r.raise_for_status()
    answer: dict[str, Any] = r.json()
    return answer


def main() -> None:
    """Run the arms ``--runs`` times each, interleaved; print JSON lines."""
    p = argparse.ArgumentParser(description="Decode speed of per-request speculation.")
    p.add_argument("--stock", type=Path, required=True, help="stock b11434 llama-server")
    p.add_argument("--patched", type=Path, required=True, help="patched llama-server")
    p.add_argument("--profile", default="cpu-gemma-270m")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--n-predict", type=int, default=256)
    p.add_argument("--logs", type=Path, default=Path("."), help="folder for the servers' logs")
    a = p.parse_args()
    with (
        server(argv_for(a.stock, Mode.BASELINE, a.profile), a.logs / "stock-plain.log") as stock,
        server(argv_for(a.patched, Mode.BASELINE, a.profile), a.logs / "patched.log") as plain,
        server(argv_for(a.patched, Mode.CASCADE, a.profile), a.logs / "cascade.log") as cascade,
    ):
        arms: dict[str, tuple[str, dict[str, Any]]] = {
            "stock-plain": (stock, {}),
            "patched-plain": (plain, {}),
            "cascade-n_max-0": (cascade, {"speculative.n_max": 0}),
            "cascade-on": (cascade, {}),
        }
        for base, fields in arms.values():
            one(base, 16, fields)  # warm-up: page the weights in
        speeds: dict[str, list[float]] = {name: [] for name in arms}
        texts: dict[str, set[str]] = {name: set() for name in arms}
        for run in range(a.runs):
            for name, (base, fields) in arms.items():
                answer = one(base, a.n_predict, fields)
                t = answer["timings"]
                speeds[name].append(t["predicted_per_second"])
                texts[name].add(answer["content"])
                keep = ("predicted_n", "predicted_per_second", "draft_n", "draft_n_accepted")
                print(json.dumps({"arm": name, "run": run} | {k: t.get(k) for k in keep}))
    reference = next(iter(texts["stock-plain"]))
    for name, values in speeds.items():
        summary = {"arm": name, "median_tok_s": round(statistics.median(values), 1)}
        summary |= {"min": round(min(values), 1), "max": round(max(values), 1)}
        summary |= {"same_text_as_stock_plain": texts[name] == {reference}}
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
