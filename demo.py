"""Live demo: four scenes through Fronde's router, with a large live decode tok/s counter.

    .venv/bin/python demo.py                      # uses Fronde on :8080, or starts one
    .venv/bin/python demo.py --url http://127.0.0.1:8080 --plain
    .venv/bin/python demo.py --with-repeat        # plays the edit a second time
    .venv/bin/python demo.py --max-tokens 48      # shorter scenes, for a slow machine

The scenes are prose → code → JSON → an edit (completion-style prompts of the
priming set, ``fronde/bench/workloads/priming.json``; the default model is a base model). Each
scene goes to the router as an ordinary request, so what you see is what it
decided: the route (probe, edit, cache, fallback), the mode, and the probe's
result. Each scene is then played once more with baseline forced, for the
"× baseline" column (``--no-compare`` skips that).

What is measured, and how:
- live decode tok/s: (chunks − 1) ÷ (time since the first chunk), as they arrive;
  llama-server sends one chunk per token. Prefill is excluded; for a probed answer,
  a hand-over's prefill falls inside the span and is counted.
- α = accepted ÷ drafted and τ = tokens per verify pass, from llama-server's
  ``timings``, when the mode drafted.
- overhead: Fronde's own time before the upstream call (its ``/fronde/v1/router`` row).

First encounters: every request carries a new ``seed`` (ignored at temperature 0),
so none is a prompt-cache hit, and a neutral warm-up runs first instead of a
rehearsal of the scenes. A demo-started server has fresh n-gram pools; a server
given with ``--url`` that has already served these prompts may have ngram-mod's
pool primed with their answers, and the demo says so. ``--with-repeat`` replays
the edit with the same seed: a cache hit on a primed pool, labelled as such.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from fronde.backends.process import die_with_parent, free_port
from fronde.bench.serve import nvidia_smi_query, settled
from fronde.bench.timed_client import Sample, repetition_score, stream
from fronde.bench.verdict import LOOP_SCORE
from fronde.bench.workloads import Item, load_workload
from fronde.config import Settings, load_settings
from fronde.errors import FrondeError
from fronde.modes import Mode
from fronde.runtime.install import find_llama_binary
from fronde.runtime.local import profile_of
from fronde.runtime.models import model_path

INVENTORY_PY = (
    load_workload("agent-sessions").items[0].prompt.split("```python\n")[1].split("```")[0]
)
"""The first agent session's file (``agent-sessions.json``, ``inventory-py``)."""

EDIT_PROMPT = (
    "Rename the class inventory to Inventory and add type hints to every method.\n"
    f"```python\n{INVENTORY_PY}```\n"
    "Here is the whole file again, with the class renamed and type hints added:\n"
    "```python\nimport json\n\n\nclass Inventory:\n"
)
"""The edit scene: the battery's rewrite edit with the answer's first lines given.

Without them, the base model's first sight of the battery's ``edit-rewrite`` is a
loop of ``import`` lines on every mode (repetition 0.93, measured 2026-11-30 on a
fresh server); with them it copies the file (repetition 0.01, 268 tokens, stops at
the closing fence). A base model mostly copies: the type hints may not appear.
"""

SCENES: tuple[tuple[str, str, int], ...] = (
    ("prose", "prose-en", 128),
    ("code", "code", 128),
    ("JSON", "json", 128),
    ("edit", "edit", 320),
)
"""(scene title, priming item id or ``edit``, max tokens). The edit stops at its fence."""

WARMUP_PROMPT = "A short note about the weather:"
"""The neutral warm-up: unrelated to every scene, so it primes no n-gram pool with an answer."""

SERVE_READY_S = 240.0
"""How long a demo-started ``fronde serve`` may take to load every backend, seconds."""

GPU_VRAM_MARGIN = 1.3
"""Free VRAM needed per loaded model copy, as a multiple of the GGUF size (KV cache and
compute buffers come on top of the weights; 1.3 covers gemma-270m and Qwen3-8B at the
profiles' context sizes, from their llama-server load logs)."""

# A 3-row block font for the big counter.
_FONT = {
    "0": ("█▀█", "█ █", "█▄█"),
    "1": ("▄█ ", " █ ", "▄█▄"),
    "2": ("▀▀█", "█▀▀", "█▄▄"),
    "3": ("▀▀█", " ▀█", "▄▄█"),
    "4": ("█ █", "▀▀█", "  █"),
    "5": ("█▀▀", "▀▀█", "▄▄█"),
    "6": ("█▀▀", "█▀█", "█▄█"),
    "7": ("▀▀█", "  █", "  █"),
    "8": ("█▀█", "█▀█", "█▄█"),
    "9": ("█▀█", "▀▀█", "▄▄█"),
    ".": (" ", " ", "▄"),
    " ": ("  ", "  ", "  "),
}


def big(number: str) -> str:
    """``number`` drawn 3 rows high with block characters (digits, '.' and ' ')."""
    return "\n".join(" ".join(_FONT[c][row] for c in number) for row in range(3))


@dataclass
class Scene:
    """One scene to play: a title and the workload item behind it."""

    title: str
    prompt: Item
    max_tokens: int


@dataclass
class Played:
    """What one played scene measured.

    Attributes:
        scene: the scene.
        routed: the client-side measurement of the routed answer.
        row: the router's own record of it (``/fronde/v1/router`` → ``recent``), or {}.
        baseline: the same prompt with baseline forced, or None (``--no-compare``).
        label: the scene's title in tables (the repeat is marked).
    """

    scene: Scene
    routed: Sample
    row: dict[str, Any]
    baseline: Sample | None
    label: str

    def decode_tok_s(self) -> float:
        """The routed answer's client-side decode tok/s."""
        return self.routed.decode_tok_s()

    def repetition(self) -> float:
        """Repetition score of the routed answer (0 = none, 1 = one loop; bench.stats)."""
        return repetition_score(self.routed.text)

    def speedup(self) -> float | None:
        """Routed ÷ baseline decode tok/s, both client-side, or None."""
        return None if self.baseline is None else routed_speedup(self.routed, self.baseline)


def routed_speedup(routed: Sample, baseline: Sample) -> float | None:
    """Client-side decode tok/s of ``routed`` ÷ that of ``baseline``, or None."""
    base = baseline.decode_tok_s()
    return routed.decode_tok_s() / base if base > 0 else None


def scenes(max_tokens: int | None = None) -> list[Scene]:
    """The four scenes: three priming generation prompts and :data:`EDIT_PROMPT`.

    ``max_tokens`` replaces every scene's token budget (``--max-tokens``); None keeps
    :data:`SCENES`'.
    """
    by_name = {p.id: p for p in load_workload("priming").items}
    by_name["edit"] = Item("edit", "edit", EDIT_PROMPT, (), stop=("```",))
    return [Scene(title, by_name[name], max_tokens or n) for title, name, n in SCENES]


def tokens_arg(text: str | None) -> int | None:
    """``--max-tokens``: None when not given, else a whole number ≥ 1.

    Raises:
        SystemExit: one line saying what to give instead.
    """
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise SystemExit(f"demo: --max-tokens {text}: give a whole number of tokens ≥ 1, e.g. 48")
    return int(text)


def fmt(value: float | None, digits: int = 1) -> str:
    """A number with ``digits`` decimals, or "-" for None."""
    return "-" if value is None else f"{value:.{digits}f}"


def probe_text(row: dict[str, Any], routed: Sample) -> str:
    """The probe's result in words, e.g. ``ngram-mod 61.2 vs baseline 40.3 tok/s``."""
    info = routed.fronde or row
    if info.get("probe_tok_s") is None:
        return "-"
    text = f"{info.get('probed')} {info['probe_tok_s']:.1f}"
    if info.get("floor_tok_s") is not None:
        text += f" vs {info.get('floor')} {info['floor_tok_s']:.1f}"
    return text + " tok/s"


# --- preflight and server ---------------------------------------------------------------


def gpu_free_mib() -> list[int]:
    """Free memory of each NVIDIA GPU in MiB (``nvidia-smi``), or [] without one."""
    return [int(x) for x in nvidia_smi_query("memory.free") if x.isdigit()]


def preflight(settings: Settings) -> list[str]:
    """What stops a demo-started ``fronde serve``, one line each; [] when nothing does.

    Checks: the llama-server build, the profile's model files, and, when the
    profile offloads layers to a GPU, free VRAM for one copy of the models per mode
    (each mode is its own llama-server process).
    """
    problems: list[str] = []
    try:
        find_llama_binary(settings.cache_dir, settings.llama_server)
    except FrondeError as exc:
        problems.append(f"no backend: {exc.message}")
    try:
        profile = profile_of(settings)
    except FrondeError as exc:
        return [*problems, f"no model profile: {exc.message}"]
    size: dict[str, int] = {}
    for entry in profile.models:
        try:
            size[entry.role] = model_path(settings.models_dir, entry).stat().st_size
        except FrondeError as exc:
            problems.append(f"no model: {exc.message}")
    layers = settings.backend.n_gpu_layers
    if layers and not problems:
        free = gpu_free_mib()
        # One target copy per mode that runs; the draft mode also loads the draft model.
        copies = [m for m in settings.modes if m != Mode.DRAFT or "draft" in size]
        need_bytes = size["target"] * len(copies) + size.get("draft", 0) * (Mode.DRAFT in copies)
        need_mib = int(need_bytes * GPU_VRAM_MARGIN / 2**20)
        if not free:
            problems.append(f"-ngl {layers} is set but no NVIDIA GPU answers nvidia-smi")
        elif max(free) < need_mib:
            problems.append(
                f"too little free VRAM: {max(free)} MiB, {len(copies)} modes need about "
                f"{need_mib} MiB (run fewer with `--mode`, or set residency to swap)"
            )
    return problems


def answering(base: str) -> dict[str, Any] | None:
    """Fronde's ``/health`` body at ``base``, or None when nothing answers there."""
    with contextlib.suppress(httpx.TransportError, ValueError):
        body: dict[str, Any] = httpx.get(f"{base}/health", timeout=3).json()
        if "backends" in body:
            return body
    return None


def backends_ready(health: dict[str, Any]) -> list[str]:
    """Ready modes of a ``/health`` body."""
    return [m for m, b in health["backends"].items() if b["state"] == "ready"]


def start_server(settings: Settings) -> tuple[str, subprocess.Popen[bytes]]:
    """Start ``fronde serve`` on a free port and wait until every backend is up.

    Raises:
        SystemExit: it exited, or was not ready within :data:`SERVE_READY_S`.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fronde", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=die_with_parent,  # no orphan server if the demo is killed
    )
    deadline = time.monotonic() + SERVE_READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = (proc.stderr.read() if proc.stderr else b"").decode().strip().splitlines()
            raise SystemExit(f"demo: fronde serve failed: {err[-1] if err else proc.returncode}")
        health = answering(base)
        if health and settled(health):  # swap residency: the modes not resident stay stopped
            return base, proc
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"demo: fronde serve did not become ready in {SERVE_READY_S:.0f} s")


# --- playing a scene ----------------------------------------------------------------------


class Demo:
    """Plays scenes against the Fronde at ``base`` and renders them.

    Args:
        base: Fronde's base URL.
        console: where to draw.
        plain: plain lines instead of a live screen.
    """

    def __init__(self, base: str, console: Console, plain: bool) -> None:
        self.base = base
        self.console = console
        self.plain = plain
        self.http = httpx.Client(timeout=httpx.Timeout(600.0, connect=5.0))
        self.seed = random.SystemRandom().randrange(1, 2**31)  # a cache buster
        self.played: list[Played] = []

    def close(self) -> None:
        """Close the HTTP client."""
        self.http.close()

    def line(self, text: str) -> None:
        """One plain line (no markup, no highlighting)."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def stream(
        self, prompt: Item, max_tokens: int, seed: int, mode: str | None = None
    ) -> Iterator[Sample]:
        """Stream one completion; ``mode`` forces a mode (else the router decides)."""
        body = prompt.body("completion", max_tokens) | {"seed": seed}
        headers = {"x-fronde-mode": mode} if mode else {}
        try:
            yield from stream(self.http, self.base, "completion", body, headers)
        except FrondeError as exc:
            raise SystemExit(f"demo: {exc.message}") from exc

    def warm_up(self, modes: list[str]) -> None:
        """A few tokens of a neutral prompt on each mode (loads caches, primes no answer)."""
        neutral = Item("warm-up", "warm-up", WARMUP_PROMPT, ())
        for i, mode in enumerate(modes):
            for _ in self.stream(neutral, 8, self.seed + 10_000 + i, mode):
                pass
        self.line(f"warm-up: 8 tokens of a neutral prompt on {', '.join(modes)}")

    def row_of(self, request_id: str | None) -> dict[str, Any]:
        """The router's record of request ``request_id``, or {} when it has aged out."""
        recent: list[dict[str, Any]] = self.http.get(f"{self.base}/fronde/v1/router").json()[
            "recent"
        ]
        return next((r for r in recent if r.get("id") == request_id), dict[str, Any]())

    def play(self, scene: Scene, seed: int, compare: bool, label: str) -> Played:
        """Play ``scene`` through the router, then (if ``compare``) on baseline."""
        routed = self.show(scene, label, self.stream(scene.prompt, scene.max_tokens, seed))
        row = self.row_of(routed.request_id)
        baseline = None
        if compare:
            baseline = self.show(
                scene,
                f"{label}: baseline, for comparison",
                self.stream(scene.prompt, scene.max_tokens, seed + 1, "baseline"),
                keep=False,
            )
            if not self.plain:
                self.line(
                    f"  baseline on the same prompt: {baseline.decode_tok_s():.1f}"
                    f" tok/s decode → {label} ran at {fmt(routed_speedup(routed, baseline), 2)}×"
                )
        played = Played(scene, routed, row, baseline, label)
        self.played.append(played)
        if self.plain:
            self.line(plain_line(played))
        return played

    def show(
        self,
        scene: Scene,
        label: str,
        events: Iterator[Sample],
        keep: bool = True,
    ) -> Sample:
        """Consume ``events``, drawing the live screen unless plain; return the last one.

        ``keep`` leaves the final screen on the terminal (the routed answer does; the
        baseline comparison only leaves a line).
        """
        last: Sample | None = None
        if self.plain:
            with contextlib.suppress(IndexError):
                last = deque(events, maxlen=1)[-1]
        else:
            with Live(console=self.console, refresh_per_second=10, transient=True) as live:
                for last in events:
                    live.update(self.screen(label, last))
            if last is not None and keep:
                self.console.print(self.screen(label, last, final=True))
        if last is None or last.first is None:
            raise SystemExit(f"demo: {scene.title}: the stream ended without text")
        return last

    def screen(self, label: str, s: Sample, final: bool = False) -> Panel:
        """The live screen of one stream: route, mode, probe, big tok/s, α, text."""
        info = s.fronde or {}
        mode = info.get("mode") or s.mode or "?"
        if s.route == "probe" and not final:
            mode = f"{s.mode} (probing)"
        head = Text.assemble(
            ("class ", "dim"),
            (s.route or "?", "bold yellow"),
            ("   mode ", "dim"),
            (mode, "bold cyan"),
        )
        if final and s.route == "probe":
            head.append(f"   probe {probe_text({}, s)}", "dim")
        tok_s = s.decode_tok_s()
        figure = Text(big(f"{tok_s:5.1f}"), style="bold green")
        figure.append("  tok/s decode", "green")
        if (a := s.alpha) is not None:
            figure.append(f"   α {a:.2f}", "bold magenta")
        tail = "\n".join(s.text.splitlines()[-12:])
        return Panel(Group(head, figure, Text(tail)), title=f"Fronde — {label}", expand=True)

    def summary(self) -> Table:
        """One row per played scene."""
        table = Table(title="Fronde demo: one row per scene (decode tok/s as the client saw it)")
        for col in ("scene", "class", "mode"):
            table.add_column(col, no_wrap=True)
        table.add_column("probe vs floor", no_wrap=True)
        for col in ("tok/s", "× base", "α", "τ", "tokens", "rep.", "ovh ms"):
            table.add_column(col, justify="right", no_wrap=True)
        for p in self.played:
            rep = p.repetition()
            table.add_row(
                p.label,
                p.routed.route or "-",
                routed_mode(p),
                probe_short(p.row, p.routed),
                fmt(p.decode_tok_s()),
                fmt(p.speedup(), 2),
                fmt(p.row.get("alpha"), 2),
                fmt(p.row.get("tau"), 2),
                str(p.routed.pieces),
                f"{rep:.2f}" + (" loop" if rep > LOOP_SCORE else ""),
                fmt(p.row.get("overhead_ms"), 2),
            )
        return table

    def notes(self) -> list[str]:
        """What a reader of the table should know: loops, quarantines."""
        out: list[str] = []
        loops = [p.label for p in self.played if p.repetition() > LOOP_SCORE]
        if loops:
            out.append(
                f"note: {', '.join(loops)} looped (repetition score > {LOOP_SCORE}): a "
                "base model's loop is easy to draft, so its α and speed-up are inflated"
            )
        modes = self.http.get(f"{self.base}/fronde/v1/router").json()["modes"]
        for mode, m in modes.items():
            if m.get("collapses"):
                out.append(
                    f"note: {mode} collapsed below half its EMA {m['collapses']} time(s) and was "
                    "quarantined (is something else loading this machine?)"
                )
        return out


def probe_short(row: dict[str, Any], routed: Sample) -> str:
    """The probe in a narrow column: ``55.1 vs 53.8``, or "-"."""
    info = routed.fronde or row
    probe, floor = info.get("probe_tok_s"), info.get("floor_tok_s")
    if probe is None:
        return "-"
    return f"{probe:.1f}" + (f" vs {floor:.1f}" if floor is not None else "")


def routed_mode(p: Played) -> str:
    """The mode that finished the answer (a probe's winner, else the header's mode)."""
    return str((p.routed.fronde or {}).get("mode") or p.row.get("mode") or p.routed.mode)


def plain_line(p: Played) -> str:
    """A scene's result as one ``key=value`` line (for logs and tests).

    A value with spaces is quoted as a shell would (``probe='ngram-mod 61.2 vs baseline
    40.3 tok/s'``): :func:`shlex.split` reads the line back.
    """
    fields = {
        "scene": p.label,
        "class": p.routed.route,
        "static_class": p.row.get("static_class"),
        "mode": routed_mode(p),
        "probe": probe_text(p.row, p.routed),
        "decode_tok_s": fmt(p.decode_tok_s()),
        "baseline_tok_s": (fmt(p.baseline.decode_tok_s()) if p.baseline is not None else "-"),
        "speedup": fmt(p.speedup(), 2),
        "alpha": fmt(p.row.get("alpha"), 2),
        "tau": fmt(p.row.get("tau"), 2),
        "tokens": p.routed.pieces,
        "overhead_ms": fmt(p.row.get("overhead_ms"), 2),
        "repetition": f"{p.repetition():.2f}",
    }
    return " ".join(f"{k}={shlex.quote(str(v))}" for k, v in fields.items())


def main() -> None:
    """Run the demo (see the module docstring for usage)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url", help="a running Fronde, e.g. http://127.0.0.1:8080")
    ap.add_argument("--plain", action="store_true", help="plain lines instead of a live screen")
    ap.add_argument("--with-repeat", action="store_true", help="play the edit a second time")
    ap.add_argument("--no-compare", action="store_true", help="skip the baseline comparison")
    ap.add_argument(
        "--max-tokens",
        metavar="N",
        help="tokens per scene (default: 128, the edit 320); smaller is quicker on a slow machine",
    )
    args = ap.parse_args()
    max_tokens = tokens_arg(args.max_tokens)
    console = Console(width=150) if args.plain else Console()
    if args.url is not None and not args.url.startswith(("http://", "https://")):
        raise SystemExit(f"demo: --url {args.url}: give the scheme, e.g. http://{args.url}")
    try:
        settings = load_settings()
    except FrondeError as exc:
        raise SystemExit(f"demo: {exc.message}") from exc
    proc: subprocess.Popen[bytes] | None = None
    base = args.url or f"http://127.0.0.1:{settings.server.port}"
    health = answering(base)
    if health is None and args.url:
        raise SystemExit(f"demo: no Fronde answers at {args.url}: start it with `fronde serve`")
    if health is None:
        problems = preflight(settings)
        if problems:
            raise SystemExit("demo: cannot start Fronde: " + "; ".join(problems))
        console.print("starting fronde serve (backends load in a few seconds)…", highlight=False)
        base, proc = start_server(settings)
        health = answering(base) or {}
    ready = backends_ready(health)
    if "baseline" not in ready:
        states = ", ".join(f"{m}: {b['state']}" for m, b in health.get("backends", {}).items())
        raise SystemExit(f"demo: Fronde at {base} has no ready baseline ({states})")
    demo = Demo(base, console, args.plain)
    try:
        router = demo.http.get(f"{base}/fronde/v1/router").json()
        served = sum(m.get("samples", 0) for m in router.get("modes", {}).values())
        demo.line(f"Fronde at {base}; ready modes: {', '.join(ready)}; live page: {base}/ui")
        if proc is None and (served or router.get("cache", {}).get("entries")):
            demo.line(
                "note: this server has served requests before; if it saw these prompts, "
                "ngram-mod's pool may hold their answers (restart it for a first encounter)"
            )
        demo.warm_up(ready)
        for i, scene in enumerate(scenes(max_tokens), 1):
            if not args.plain:
                console.rule(f"scene {i}/{len(SCENES)}: {scene.title}")
            demo.play(scene, demo.seed + i, not args.no_compare, scene.title)
        if args.with_repeat:
            edit = scenes(max_tokens)[-1]
            demo.play(edit, demo.seed + len(SCENES), not args.no_compare, "edit again (primed)")
        console.print(demo.summary())
        for note in demo.notes():
            demo.line(note)
    finally:
        demo.close()
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
