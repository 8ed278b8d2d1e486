"""Check a `fronde bench load` folder's figures with the outside client, on the same machine.

For each named arm and c: the arm on fresh servers, as the benchmark starts it (its
argv, slots and context; a router arm reads the load curves the run saved on this
machine), warmed with the same 4-token request, its slot history given when the run
gave one; then `scripts/load_check.py` (which imports nothing from Fronde) measures it
with the run's window and warm-up, `--pin` for the pinned arm. --reps rounds, each round
every arm at every c in turn, so that the repetitions bracket one another as the run's
do. Each figure is printed beside the run's own: its median, lowest and highest
repetition; once every round is in, a line per (arm, c) says whether the two ranges
overlap. Records, one JSON object a line, go to --out; a second call with the same --out
skips the (arm, c, round) done.

    python scripts/gpu/outside_check.py results/<run> --arm plain --arm pinned \
        --arm router-b --clients 1 --clients 8 --clients 32 --reps 2 --out $OUT/check.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
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


def run_range(row: dict[str, Any]) -> tuple[float, float]:
    """The run's [lowest, highest] repetition of a load.json row (±10 % of a lone one)."""
    if row["reps"] < 2:
        return row["tok_s"] * (1 - ONE_REP_TOLERANCE), row["tok_s"] * (1 + ONE_REP_TOLERANCE)
    return row["tok_s_lo"], row["tok_s_hi"]


def agree(outside: list[float], row: dict[str, Any] | None) -> str:
    """Whether the outside figures' range meets the run's (:func:`run_range`), else how far.

    Two ranges of repetitions that overlap agree "within their repetition spread"; a
    lone outside figure must lie inside the run's range.
    """
    if row is None or not row["tok_s"] or not outside:
        return "-"
    lo, hi = run_range(row)
    mine = f"[{min(outside):.0f}, {max(outside):.0f}]" if len(outside) > 1 else f"{outside[0]:.0f}"
    if min(outside) <= hi and max(outside) >= lo:
        return f"{mine} meets [{lo:.0f}, {hi:.0f}]: agree"
    mid = sorted(outside)[len(outside) // 2]
    return f"{mine}, {mid / row['tok_s']:.2f}× the median, misses [{lo:.0f}, {hi:.0f}]"


def pooled_sd(cells: list[list[float]]) -> float:
    """The pooled standard deviation of ln tok/s over ``cells`` (each a cell's repetitions).

    Σ over cells of the squared deviations from the cell's mean log ÷ Σ (n − 1): how far
    one block of an arm lies from another block of the same arm and c in this lease. 0.0
    when no cell has two repetitions.
    """
    logs = [[math.log(x) for x in cell] for cell in cells if len(cell) >= 2 and min(cell) > 0]
    dof = sum(len(cell) - 1 for cell in logs)
    sq = sum((x - sum(cell) / len(cell)) ** 2 for cell in logs for x in cell)
    return math.sqrt(sq / dof) if dof else 0.0


def agree_pooled(outside: list[float], bench: list[float], sd: float) -> str:
    """Whether the two means differ by at most two pooled standard errors, in ln tok/s.

    The lone-figure rule of :func:`agree` holds a figure to the range of the run's
    repetitions, which a third draw of the same arm falls inside only (n − 1) ÷ (n + 1)
    of the time (1/3 with two); this one asks whether the outside client and the
    benchmark read one arm alike, given the spread every checked cell shows:
    |mean ln outside − mean ln bench| ≤ 2 · ``sd`` · √(1/k + 1/n).
    """
    if not outside or not bench or not sd or min(outside + bench) <= 0:
        return "-"
    gap = sum(map(math.log, outside)) / len(outside) - sum(map(math.log, bench)) / len(bench)
    bound = 2 * sd * math.sqrt(1 / len(outside) + 1 / len(bench))
    verdict = "agree" if abs(gap) <= bound else "differ"
    band = f"×{math.exp(-bound):.2f}–{math.exp(bound):.2f}"
    return f"{math.exp(gap):.2f}× the run, within {band}: {verdict}"


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


def reps_of(row: dict[str, Any]) -> list[float]:
    """A load.json row's tok/s per repetition (``tok_s_reps``: repetition → tok/s)."""
    reps: dict[str, float] = row.get("tok_s_reps") or {}
    return [float(v) for v in reps.values()] if reps else [float(row["tok_s"])]


def judge(run: Path, names: list[str], clients: list[int], out: Path) -> None:
    """Print, per (arm, c), the outside figures beside the run's, by both rules."""
    rows = {(r["arm"], r["c"]): r for r in json.loads((run / "load.json").read_text())["rows"]}
    seen = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    mine = {
        (n, c): [r["tok_s"] for r in seen if (r["arm"], r["clients"]) == (n, c)]
        for n in names
        for c in clients
    }
    theirs = {k: reps_of(rows[k]) for k in mine if k in rows}
    sd = pooled_sd([*theirs.values(), *mine.values()])
    print(f"pooled spread of one block: {sd:.3f} in ln tok/s, over {len(theirs)} cells", flush=True)
    for (name, c), outside in mine.items():
        row = rows.get((name, c))
        bench = f"{row['tok_s']:.0f} [{row['tok_s_lo']:.0f}, {row['tok_s_hi']:.0f}]" if row else "-"
        pooled = agree_pooled(outside, theirs.get((name, c), []), sd)
        print(f"{name} c={c}: outside {agree(outside, row)}; {pooled} (bench load {bench})")


def main() -> int:
    """Run the checks; print one line each; exit 0 (the lines say within or not)."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("run", type=Path, help="a `fronde bench load` folder (this machine's)")
    ap.add_argument("--arm", action="append", required=True, help="plain, pinned, router-b, …")
    ap.add_argument("--clients", type=int, action="append", required=True)
    ap.add_argument("--reps", type=int, default=1, help="rounds of every (arm, c)")
    ap.add_argument("--out", type=Path, required=True, help="JSONL of the outside figures")
    ap.add_argument("--judge", action="store_true", help="run nothing: judge --out's records")
    args = ap.parse_args()
    if args.judge:
        judge(args.run, args.arm, args.clients, args.out)
        return 0
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
    seen: list[dict[str, Any]] = []
    if args.out.exists():  # a call cut short: the next one goes on from its records
        seen = [json.loads(line) for line in args.out.read_text().splitlines()]
    done = {(r["arm"], r["clients"], r.get("round", 0)) for r in seen}
    for k in range(args.reps):
        for name in args.arm:
            for c in args.clients:
                if (name, c, k) in done:
                    continue
                got = asyncio.run(
                    check_one(arms[name], setup.settings, form, c, identity, args.run, logs)
                )
                row = rows.get((name, c))
                got |= {"arm": name, "round": k, "run": str(args.run)}
                got |= {"harness": row and row["tok_s"]}
                seen.append(got)
                with args.out.open("a") as fh:
                    fh.write(json.dumps(got) + "\n")
                print(f"{name} c={c} round {k}: outside {got['tok_s']:.0f} tok/s", flush=True)
    judge(args.run, args.arm, args.clients, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
