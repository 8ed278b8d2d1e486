"""Count the TCP connections each process opened to llama-server while a command ran.

    python scripts/backend_conns.py -- python scripts/ttft_split.py --n 10 --gap-s 0.3

Runs the command, and every 50 ms reads ``ss -Htnp state established``. A socket that
llama-server holds gives its listening port (the local side); a socket another process
holds whose peer is that port is a connection that process opened to llama-server.
Prints, after the command's own output, one line per client process: how many distinct
connections (local ports) it held and its command line. A client that reuses its
connection shows 1; one that opens a connection a request, about one a request. The
sampling costs CPU, so the timed rounds ran without it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROW = re.compile(r"\S+:(\d+)\s+\S+:(\d+)\s+users:\(\(\"([^\"]+)\",pid=(\d+)")
"""An ``ss -Htnp`` row: local port, peer port, the holder's name and pid."""


def sample(stop: threading.Event, rows: set[tuple[int, int, str, int]]) -> None:
    """Until ``stop``, add each established socket (local port, peer port, name, pid)."""
    while not stop.is_set():
        out = subprocess.run(
            ["ss", "-Htnp", "state", "established"], capture_output=True, text=True
        ).stdout
        for line in out.splitlines():
            m = ROW.search(line)
            if m:
                rows.add((int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4))))
        time.sleep(0.05)


def cmdline(pid: int) -> str:
    """The first 70 characters of ``pid``'s command line, or ``(exited)``."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "(exited)"
    return raw.replace(b"\0", b" ").decode(errors="replace")[:70]


def main() -> None:
    """Run the command after ``--`` under the sampler; print the counts."""
    argv = sys.argv[sys.argv.index("--") + 1 :]
    rows: set[tuple[int, int, str, int]] = set()
    names: dict[int, str] = {}
    stop = threading.Event()
    t = threading.Thread(target=sample, args=(stop, rows), daemon=True)
    t.start()
    proc = subprocess.Popen(argv)
    while proc.poll() is None:  # name the clients while they live
        for _, _, name, pid in list(rows):
            if name != "llama-server" and pid not in names:
                names[pid] = cmdline(pid)
        time.sleep(0.5)
    stop.set()
    t.join()
    listen = {local for local, _, name, _ in rows if name == "llama-server"}
    seen: dict[int, set[int]] = {}
    for local, peer, name, pid in rows:
        if name != "llama-server" and peer in listen:
            seen.setdefault(pid, set()).add(local)
    for pid, ports in sorted(seen.items()):
        print(f"connections to llama-server: {len(ports):3d} by pid {pid} ({names.get(pid, '')})")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
