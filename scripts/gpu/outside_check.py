"""Check a `fronde bench load` folder's figures with the outside client, on the same machine.

For each named arm and c: the arm on fresh servers, as the benchmark starts it (its
argv, slots and context; a router arm reads the load curves the run saved on this
machine), warmed with the same 4-token request, its slot history given when the run
gave one; then `scripts/load_check.py` (which imports nothing from Fronde) measures it
with the run's window and warm-up, `--pin` for the pinned arm. Each figure is printed
beside the run's own: its median, lowest and highest repetition. Records, one JSON
object a line, go to --out; a second call with the same --out skips the pairs done.

    python scripts/gpu/outside_check.py results/<run> --arm plain --arm pinned \
        --arm router-b --clients 1 --clients 8 --clients 32 --out $OUT/check.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from fronde.bench.arms import started
from fronde.bench.load import load_setup
from fronde.bench.load_report import recorded_run
from fronde.bench.passes import Timed
from fronde.bench.protocol import WARM_ITEM
from fronde.bench.store import Store
from fronde.bench.timed_client import bench_http, send
from fronde.config import load_settings
from fronde.logging import configure_logging
from fronde.runtime.local import profile_of

CHECK = Path(__file__).resolve().parents[1] / "load_check.py"


ONE_REP_TOLERANCE = 0.10
"""How far the outside figure may lie from a cell of one repetition, as a fraction: the
spread of one arm's blocks in one lease (H200, 2026-12-04: up to ±15 % on 1.7-s
windows; a 20-s window holds more)."""


def agree(outside: float, row: dict[str, Any] | None) -> str:
    """``within`` the run's [lowest, highest] repetition (±10 % of a lone one), else how far."""
    if row is None or not row["tok_s"]:
        return "-"
    lo, hi = row["tok_s_lo"], row["tok_s_hi"]
    if row["reps"] < 2:
        lo, hi = row["tok_s"] * (1 - ONE_REP_TOLERANCE), row["tok_s"] * (1 + ONE_REP_TOLERANCE)
    if lo <= outside <= hi:
        return f"within [{lo:.0f}, {hi:.0f}]"
    return f"{outside / row['tok_s']:.2f}× the median, outside [{lo:.0f}, {hi:.0f}]"


async def check_one(
    arm: Any, settings: Any, form: Any, c: int, identity: dict[str, Any], folder: Path, logs: Path
) -> dict[str, Any]:
    """Start ``arm`` fresh, warm it, run load_check.py at ``c``; its JSON figures."""
    async with started(arm, settings, None, logs) as target:
        async with bench_http() as http:
            await send(http, target.base_url, form, target.body(WARM_ITEM, form, 4), target.headers)
        cmd = [sys.executable, str(CHECK), "--url", target.base_url, "--clients", str(c)]
        cmd += ["--workload", str(folder / "workload.json"), "--json"]
        cmd += ["--window-s", str(identity["window_s"]), "--warmup-s", str(identity["warmup_s"])]
        cmd += ["--history", str(identity.get("history") or 0)]
        cmd += ["--pin"] if arm.pin else []
        for name, value in target.headers.items():
            cmd += ["--header", f"{name}:{value}"]
        run = await asyncio.to_thread(
            subprocess.run, cmd, capture_output=True, text=True, check=True
        )
        return json.loads(run.stdout)


def main() -> int:
    """Run the checks; print one line each; exit 0 (the lines say within or not)."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("run", type=Path, help="a `fronde bench load` folder (this machine's)")
    ap.add_argument("--arm", action="append", required=True, help="plain, pinned, router-b, …")
    ap.add_argument("--clients", type=int, action="append", required=True)
    ap.add_argument("--out", type=Path, required=True, help="JSONL of the outside figures")
    args = ap.parse_args()
    configure_logging(level="warning")
    last, _ = recorded_run(args.run, Store(args.run / "records.jsonl"))
    identity: dict[str, Any] = last["identity"]
    if "window_s" not in identity:
        raise SystemExit(f"{args.run}: a run before timed windows; nothing to check against")
    settings = load_settings()
    form = profile_of(settings).prompt_form
    timed = Timed(identity["warmup_s"], identity["window_s"], identity["history"])
    setup = load_setup(
        settings, form, identity["max_tokens"], 1, tuple(args.clients), identity["slots"],
        skip=identity.get("skip", []), workload=identity.get("workload", "agent"),
        timed=timed, arms=dict.fromkeys(args.arm),
    )  # fmt: skip
    arms = {a.name: a for p in (setup.static, setup.router) for a in p.arms}
    rows = {(r["arm"], r["c"]): r for r in json.loads((args.run / "load.json").read_text())["rows"]}
    logs = args.out.parent / "outside-logs"
    done: set[tuple[str, int]] = set()
    if args.out.exists():  # a call cut short: the next one goes on from its records
        done = {
            (r["arm"], r["clients"]) for r in map(json.loads, args.out.read_text().splitlines())
        }
    for name in args.arm:
        for c in args.clients:
            if (name, c) in done:
                continue
            got = asyncio.run(
                check_one(arms[name], setup.settings, form, c, identity, args.run, logs)
            )
            row = rows.get((name, c))
            got |= {"arm": name, "run": str(args.run), "harness": row and row["tok_s"]}
            with args.out.open("a") as fh:
                fh.write(json.dumps(got) + "\n")
            mine = (
                f"{row['tok_s']:.0f} [{row['tok_s_lo']:.0f}, {row['tok_s_hi']:.0f}]" if row else "-"
            )
            print(f"{name} c={c}: outside {got['tok_s']:.0f} tok/s, bench load {mine}: "
                  f"{agree(got['tok_s'], row)}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
