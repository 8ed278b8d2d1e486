"""Summarise rounds of ``scripts/ttft_split.py`` output, one group of files per arm.

    python scripts/ttft_rounds.py old=results/X/raw/gap-*-old.txt new=results/X/raw/gap-*-new.txt

Each file is one run's printed output (``ttft_split.py > FILE``; a first line
``uptime: …`` is read as the machine's load). For each arm, prints the median over its
rounds and, in brackets, the lowest and highest round, of: the paired TTFT difference
(each round's median of k-th through Fronde minus k-th direct, ms); the median time to
the response headers each way and their difference (the upstream connection and the
request's way into llama-server, before any prefill); Fronde's own wall and CPU time
from its upstream send to the upstream headers (its ``sent`` and ``headers`` marks); and
the 1-minute load average the rounds began at.
"""

from __future__ import annotations

import glob
import re
import statistics
import sys
from pathlib import Path

NUM = r"(-?\d+(?:\.\d+)?)"


def first(pattern: str, text: str) -> float:
    """The first number ``pattern`` captures in ``text``.

    Raises:
        ValueError: ``pattern`` does not match (not a complete ttft_split output).
    """
    m = re.search(pattern, text, re.M)
    if m is None:
        raise ValueError(f"no match for {pattern!r}")
    return float(m.group(1))


def marks(text: str, name: str) -> tuple[float, float]:
    """Fronde's mark ``name``: its median wall ms and median CPU ms."""
    m = re.search(rf"^  {name}\s+{NUM} \[[^]]*\]\s+{NUM} \[", text, re.M)
    if m is None:
        raise ValueError(f"no mark {name!r}")
    return float(m.group(1)), float(m.group(2))


def one(text: str) -> dict[str, float]:
    """The figures of one run's output."""
    direct = first(rf"^direct\s+{NUM} ", text)
    fronde = first(rf"^fronde\s+{NUM} ", text)
    sent, headers = marks(text, "sent"), marks(text, "headers")
    return {
        "paired TTFT, fronde - direct": first(rf"paired, TTFT ms:\s+{NUM}", text),
        "headers direct": direct,
        "headers fronde": fronde,
        "headers fronde - direct": fronde - direct,
        "Fronde sent -> headers, wall": headers[0] - sent[0],
        "Fronde sent -> headers, CPU": headers[1] - sent[1],
        "load (1 min)": first(rf"load average: {NUM}", text),
    }


def show(title: str, runs: list[dict[str, float]]) -> None:
    """Print ``title``, then each figure's median [lowest, highest] over ``runs``."""
    print(f"{title}: {len(runs)} rounds, median [lowest, highest] of the rounds, ms")
    for key in runs[0]:
        xs = [r[key] for r in runs]
        print(f"  {key:30} {statistics.median(xs):7.2f} [{min(xs):.2f}, {max(xs):.2f}]")


def main() -> None:
    """Parse ``ARM=GLOB`` arguments; print each arm's figures over its rounds.

    With two arms of as many rounds, also the second minus the first, round by round
    (the files of each arm in name order: ``…-r1-…`` with ``…-r1-…``).
    """
    arms: list[tuple[str, list[dict[str, float]]]] = []
    for arg in sys.argv[1:]:
        arm, pattern = arg.split("=", 1)
        texts = [Path(p).read_text() for p in sorted(glob.glob(pattern))]
        runs = [one(t) for t in texts if "paired, TTFT" in t]  # a run still going: left out
        show(arm, runs)
        arms.append((arm, runs))
    if len(arms) == 2 and len(arms[0][1]) == len(arms[1][1]):
        (a, xs), (b, ys) = arms
        diffs = [{k: y[k] - x[k] for k in x} for x, y in zip(xs, ys, strict=True)]
        show(f"{b} - {a}, round by round", diffs)


if __name__ == "__main__":
    main()
