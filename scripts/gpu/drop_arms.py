"""Copy a benchmark's records (JSON lines, stdin to stdout) without the named arms' blocks.

``python scripts/gpu/drop_arms.py router router-b < records.jsonl > seeded.jsonl``:
the ``block`` and ``sample`` records of those arms are left out, so a resumed
``fronde bench load`` runs them again whole (``scripts/gpu/device.sh load`` with
``LOAD_FRESH_ARMS``); ``run`` records and every other arm pass unchanged. With no arm
named, a plain copy.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main() -> int:
    """Filter stdin to stdout; the count left out goes to stderr."""
    drop = set(sys.argv[1:])
    left = 0
    for line in sys.stdin:
        rec: dict[str, Any] = json.loads(line) if line.strip() else {}
        if rec.get("type") in ("block", "sample") and rec.get("arm") in drop:
            left += 1
            continue
        sys.stdout.write(line)
    print(
        f"drop_arms.py: {left} records of {', '.join(sorted(drop)) or 'no arm'} left out",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
