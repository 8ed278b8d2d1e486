"""Fronde's time stamps of each request in a load run, per block: where its first token went.

With ``server.stamps`` on (``FRONDE_SERVER__STAMPS=true``, :mod:`fronde.stamps`) each Fronde
arm logs one ``request.stamps`` line per request: milliseconds since the request reached
Fronde at ``parsed``, ``planned``, ``slot``, ``sent`` (the upstream call made),
``headers`` (its response head came), ``event`` (its first body read), ``head`` and
``byte`` (the client's response head and first byte written). ``fronde bench load`` keeps
each Fronde arm's log in the block's log folder (``logs/<block>/fronde-serve.log``); this
collects those lines into ``stamps.jsonl`` in the load folder (one line a request, with
its block) and prints, per block, the medians of the marks and of the spans between them:
Fronde's time before the upstream call (``sent``), the upstream's time to its first body
read (``sent`` → ``event``: llama-server's prefill and first token, and the connection),
and the relay to the client (``event`` → ``byte``).

    python scripts/gpu/stamps_of.py /root/fronde-results/<load folder>

``scripts/gpu/device.sh load`` runs it when ``LOAD_STAMPS`` is set.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

SPANS = (("0", "sent"), ("sent", "headers"), ("headers", "event"), ("event", "byte"))
"""The spans printed: (from, to), ``0`` the request's arrival."""


def stamps(folder: Path) -> list[dict[str, Any]]:
    """Every ``request.stamps`` line of the Fronde logs under ``folder/logs``, with its block."""
    out: list[dict[str, Any]] = []
    for log in sorted(folder.glob("logs/*/fronde-serve.log")):
        for line in log.read_text(errors="replace").splitlines():
            if '"request.stamps"' not in line:
                continue
            try:
                rec: dict[str, Any] = json.loads(line[line.index("{") :])
            except ValueError:
                continue
            out.append({"block": log.parent.name, "t0": rec.get("t0"), "ms": rec.get("ms", {})})
    return out


def span(ms: dict[str, float], a: str, b: str) -> float | None:
    """Milliseconds from mark ``a`` (``0``: the arrival) to mark ``b``; None if one is missing."""
    start = 0.0 if a == "0" else ms.get(a)
    end = ms.get(b)
    return None if start is None or end is None else end - start


def main() -> int:
    """Write ``stamps.jsonl`` into the folder named on the command line, print the table."""
    if len(sys.argv) != 2:
        print("usage: stamps_of.py LOAD_FOLDER", file=sys.stderr)
        return 2
    folder = Path(sys.argv[1])
    recs = stamps(folder)
    with (folder / "stamps.jsonl").open("w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in recs)
    blocks = sorted({r["block"] for r in recs})
    head = " | ".join(f"{a}→{b}" for a, b in SPANS)
    print(f"| block | requests | {head} |  (median ms)")
    print("|---|---:|" + "---:|" * len(SPANS))
    for block in blocks:
        mine = [r["ms"] for r in recs if r["block"] == block]
        cells: list[str] = []
        for a, b in SPANS:
            got = [v for v in (span(ms, a, b) for ms in mine) if v is not None]
            cells.append(f"{statistics.median(got):.2f}" if got else "–")
        print(f"| {block} | {len(mine)} | {' | '.join(cells)} |")
    if not recs:
        print("no request.stamps lines: was FRONDE_SERVER__STAMPS=true set for the run?")
    return 0


if __name__ == "__main__":
    sys.exit(main())
