"""Live demo: stream one prompt through Fronde in each mode, with a live decode tok/s counter.

    .venv/bin/python demo.py                 # starts `fronde serve` if none answers
    .venv/bin/python demo.py --url http://127.0.0.1:8080 --plain

Every figure on screen is measured as the tokens arrive: decode tok/s is
(chunks so far − 1) ÷ (time since the first chunk), and the final figure is
llama-server's own ``predicted_per_second`` with α = accepted ÷ drafted from its
``timings``. The scenes (prose, code, JSON, edit) grow in a later version.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from fronde.bench.stream import StreamedCompletion, stream_completion
from fronde.errors import FrondeError

# Completion-style: a base model continues it by copying, which is what n-gram
# speculation accelerates.
PROMPT = (
    "# inventory.py (original)\n"
    "ITEMS = {\n"
    '    "apple": {"price": 0.5, "stock": 120},\n'
    '    "banana": {"price": 0.25, "stock": 80},\n'
    '    "cherry": {"price": 3.0, "stock": 15},\n'
    "}\n\n"
    "def total_value(items):\n"
    "    return sum(v['price'] * v['stock'] for v in items.values())\n\n"
    "# inventory.py (copy)\n"
    "ITEMS = {\n"
)


def stream(base: str, mode: str, max_tokens: int) -> Iterator[StreamedCompletion]:
    """Stream the prompt with ``mode`` forced; yield the measurement after each chunk."""
    body = {"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    with httpx.Client(timeout=httpx.Timeout(300.0, connect=5.0)) as http:
        try:
            yield from stream_completion(
                http, f"{base}/v1/completions", body, {"x-fronde-mode": mode}
            )
        except FrondeError as exc:
            raise SystemExit(f"demo: {mode}: {exc.message}") from exc


def panel(mode: str, scene: StreamedCompletion) -> Panel:
    """The live screen: mode, a big tok/s figure, α, and the streaming text."""
    head = Text.assemble(
        ("mode ", "dim"),
        (scene.mode or "?", "bold cyan"),
        ("   decode ", "dim"),
        (f"{scene.client_tok_s(scene.chunks):6.1f} tok/s", "bold green"),
    )
    if (a := scene.alpha()) is not None:
        head.append(f"   α {a:.2f}", "bold magenta")
    return Panel(Group(head, Text(scene.text[-600:])), title=f"Fronde — {mode}")


def ensure_server(url: str | None) -> tuple[str, subprocess.Popen[bytes] | None]:
    """Return a base URL that answers /health 200, starting `fronde serve` if needed."""
    base = url or "http://127.0.0.1:8080"
    with contextlib.suppress(httpx.TransportError):
        if httpx.get(f"{base}/health", timeout=2).status_code == 200:
            return base, None
    if url is not None:
        raise SystemExit(f"demo: no Fronde answering at {url} (start it with `fronde serve`)")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fronde", "serve", "--port", "8080"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = (proc.stderr.read() if proc.stderr else b"").decode().strip().splitlines()
            raise SystemExit(f"demo: fronde serve failed: {err[-1] if err else proc.returncode}")
        with contextlib.suppress(httpx.TransportError):
            health = httpx.get(f"{base}/health", timeout=2).json()
            if all(b["state"] in ("ready", "left-out") for b in health["backends"].values()):
                return base, proc
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit("demo: fronde serve did not become ready in 240 s")


def main() -> None:
    """Run the demo (see the module docstring for usage)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url", help="a running Fronde, e.g. http://127.0.0.1:8080")
    ap.add_argument("--plain", action="store_true", help="plain lines instead of a live screen")
    ap.add_argument("--max-tokens", type=int, default=96)
    args = ap.parse_args()
    base, proc = ensure_server(args.url)
    console = Console()
    try:
        health = httpx.get(f"{base}/health", timeout=5).json()
        modes = [m for m, b in health["backends"].items() if b["state"] == "ready"]
        done: dict[str, StreamedCompletion] = {}
        for mode in modes:
            scene: StreamedCompletion | None = None
            if args.plain:
                scene = deque(stream(base, mode, args.max_tokens), maxlen=1)[-1]
            else:
                with Live(console=console, refresh_per_second=12) as live:
                    for scene in stream(base, mode, args.max_tokens):
                        live.update(panel(mode, scene))
            if scene is None:
                raise SystemExit(f"demo: {mode}: the stream was empty")
            done[mode] = scene
            if args.plain:
                a = scene.alpha()
                tps = scene.timings.get("predicted_per_second", 0.0)
                console.print(
                    f"mode={scene.mode} decode_tok_s={tps:.1f}"
                    f" tokens={scene.timings.get('predicted_n', 0)}"
                    + (f" alpha={a:.2f}" if a is not None else ""),
                    markup=False,
                    highlight=False,
                )
        table = Table(title="decode tok/s (llama-server timings), same prompt in each mode")
        for col in ("mode", "tok/s", "× baseline", "α", "tokens"):
            table.add_column(col, justify="right")
        base_tps = (
            done["baseline"].timings.get("predicted_per_second") if "baseline" in done else None
        )
        for mode, s in done.items():
            tps = float(s.timings.get("predicted_per_second", 0.0))
            a = s.alpha()
            table.add_row(
                mode,
                f"{tps:.1f}",
                f"{tps / base_tps:.2f}" if base_tps else "-",
                f"{a:.2f}" if a is not None else "-",
                str(s.timings.get("predicted_n", 0)),
            )
        console.print(table)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
