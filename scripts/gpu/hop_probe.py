"""What Fronde's hop changes for one llama-server, each of its parts apart.

A diagnostic for the load benchmark (``fronde bench load``): on the H200 (gemma, c = 32,
2026-12-04) the plain server served 778 tok/s to the benchmark's client and 910 behind
``fronde serve --mode baseline`` (``fr-plain``), its own per-request timings 42 against
49 tok/s. The hop differs from the benchmark's client in three ways, each a variant
here, beside the two ends:

- ``direct``: the benchmark's client (:func:`~fronde.bench.timed_client.bench_http`: httpx's
  own transport, a new connection per request), the item's body as the plain arm sends it;
- ``keepalive``: the same client with pooled keep-alive connections (the ``openai`` SDK's
  default);
- ``aiohttp``: httpx over aiohttp with keep-alive, as Fronde reaches its backends
  (:func:`~fronde.backends.client.make_http_client`'s transport);
- ``fbody``: the benchmark's client with the body Fronde sends upstream (its ``stop``
  strings taken for Fronde to apply, ``timings_per_token`` asked;
  :meth:`~fronde.request.relay.OwnedStops.take`);
- ``hop``: through Fronde (the load benchmark's ``fr-plain`` arm), with ``keepalive``'s client;
- ``hop-iter``: the same with ``server.push`` off: each upstream read sent on through
  ASGI ``send`` by the task it wakes, as before streams were written from the read;
- ``hop-new``: ``hop`` with ``direct``'s client, a new connection to Fronde per request, as
  every ``hop`` block before 2026-12-07 10:00 UTC had it (a client connection per request
  that an SDK keeping its connections never pays, charged to the hop);
- ``other`` (with ``--partner``): the benchmark's client on the partner's server alone;
- ``race`` (with ``--partner``): both servers fresh, every request sent to both at once,
  the answer that ends first kept whole and the other request cancelled (its stream
  closed, which frees its slot). What the load page's "Racing two servers at c = 1"
  reads off the static arms in-sample, here measured with the two servers on one GPU at
  once. Each kept answer is one server's own, as that mode alone would give it.

Every block starts the plain server fresh (``--server cascade`` or ``default``: that
static arm's server instead; ``-np`` slots, the load run's context and
``backend.plain_args``), sends the load benchmark's agent mix with ``c`` closed-loop
clients, and is read as the load benchmark reads its blocks
(:func:`~fronde.bench.load.load_rows`: steady-window tok/s, the server's own decode
tok/s). The variants' order turns each repetition so that drift falls on all of them.

On the H200 (gemma, c = 32, 2026-12-04; ``results/hop-gpu-h200-cpu-gemma-270m-20261204``)
Fronde in front read 0.99× direct [0.94, 1.03] over 10 pairs: the hop is neutral there,
and the load run's ``fr-plain ÷ plain`` 1.17× was the spread between blocks. ``fbody``
read 1.24× mostly because no one applies its stops: every answer ran to its budget.
Racing plain (``--backend-sampling``) against cascade at c = 1 (``--partner cascade``,
gemma, 2026-12-04; ``results/hop-gpu-h200-cpu-gemma-270m-20261204-race``) read 0.50×
the better server alone: there, two servers decoding at once slowed each other by more
than half (cascade kept 80 % of the answers).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import math
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
from httpx_aiohttp import AiohttpTransport

from fronde.backends.client import KEEPALIVE_S
from fronde.bench.arms import ARMS, Arm, Target, started, static_argv
from fronde.bench.load import PROXY, spec_of
from fronde.bench.load_mix import agent_mix
from fronde.bench.load_rows import load_rows, looping_items
from fronde.bench.protocol import WARM_ITEM
from fronde.bench.timed_client import Sample, bench_http, send
from fronde.bench.verdict import bootstrap, geomean
from fronde.config import load_settings
from fronde.errors import FrondeError
from fronde.modes import Mode
from fronde.request.relay import OwnedStops
from fronde.runtime.local import profile_of

VARIANTS = (
    "direct", "keepalive", "aiohttp", "fbody", "hop", "hop-iter", "hop-new", "other", "race"
)  # fmt: skip
"""The variants, in their first repetition's order (the module docstring says what each is)."""

PAIRED = ("other", "race")
"""The variants that need ``--partner``: a run without one leaves them out."""

TIMEOUT = httpx.Timeout(900.0, connect=10.0)
"""The benchmark client's timeouts (:func:`~fronde.bench.timed_client.bench_http`)."""


def _client(variant: str, c: int) -> httpx.AsyncClient:
    """The HTTP client a variant sends with.

    ``aiohttp`` has Fronde's transport and keep-alive expiry
    (:data:`~fronde.backends.client.KEEPALIVE_S`), not its retry of a connection
    llama-server closed: such a request fails here.
    """
    if variant in ("keepalive", "hop", "hop-iter"):
        return httpx.AsyncClient(timeout=TIMEOUT, limits=httpx.Limits(max_connections=c + 8))
    if variant == "aiohttp":
        limits = httpx.Limits(max_connections=c + 8, keepalive_expiry=KEEPALIVE_S)
        return httpx.AsyncClient(
            timeout=TIMEOUT, limits=limits, transport=AiohttpTransport(limits=limits)
        )
    return bench_http()


def _whole(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` asking for one whole answer instead of a stream (``--whole``)."""
    out = {k: v for k, v in body.items() if k != "stream_options"}
    return out | {"stream": False}


def _body_of(variant: str, whole: bool = False) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """How a variant changes the static arm's body.

    ``fbody``: Fronde's upstream body (a body with stops loses them and asks for
    ``timings_per_token``; one without stops, or with tools, is sent unchanged, as Fronde
    sends it). ``whole``: every variant's body asks for a whole answer (:func:`_whole`).
    """
    end: Callable[[dict[str, Any]], dict[str, Any]] = _whole if whole else _same
    if variant == "fbody":
        return lambda body: end(OwnedStops.take(body, chat="messages" in body)[0])
    return end


def _same(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as it is."""
    return body


SERVERS = {"plain": Mode.BASELINE, "cascade": Mode.CASCADE, "default": Mode.NGRAM_MOD}
"""``--server``: the static arm, and the Fronde mode whose backend must run its argv (as
the load benchmark's calibration finds them: ``default`` is ngram-mod at n_min 48, n_max
64 only with ``speculation.ngram_mod_n_min``/``n_max`` set so, as ``device.sh`` does)."""


@dataclass(frozen=True)
class Setup:
    """What every block of a run shares.

    Attributes:
        c: closed-loop clients.
        slots: ``-np`` of the server (the load run's: its largest c).
        max_tokens: workload A's budget.
        items: the mix's first N items (all when None).
        skip: item ids left out (the load run's screened loops, ``--skip-from``).
        server: the static arm (:data:`SERVERS`).
        partner: the second static arm of ``other`` and ``race`` (:data:`SERVERS`).
        whole: every request asks for a whole answer (``stream`` false): its time to
            first token is then the time to the whole answer.
    """

    c: int
    slots: int
    max_tokens: int = 64
    items: int | None = None
    skip: tuple[str, ...] = ()
    server: str = "plain"
    partner: str | None = None
    whole: bool = False


async def race(
    http: httpx.AsyncClient, targets: list[Target], form: str, body: dict[str, Any]
) -> tuple[Sample, int]:
    """Send ``body`` to every target at once; keep the first successful answer to end.

    The other requests are cancelled: their streams close (``bench_http`` keeps no
    connection), and llama-server stops a slot whose client has gone at its next token
    (not checked here). Two answers that end in the same turn of the event loop are
    told apart by when their last event came.

    Args:
        http: the client (:func:`~fronde.bench.timed_client.bench_http`).
        targets: the servers, each started fresh for the block.
        form: ``completion`` or ``chat`` (which endpoint).
        body: the request, streamed.

    Returns:
        The kept sample (timed from its own send) and its server's index in ``targets``.

    Raises:
        FrondeError: every request failed (each failure named).
    """
    tasks = [asyncio.create_task(send(http, t.base_url, form, body, t.headers)) for t in targets]
    pending: set[asyncio.Task[Sample]] = set(tasks)
    errors: list[str] = []
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            failed = {t: exc for t in done if (exc := t.exception()) is not None}
            ok = [t for t in done if t not in failed]
            errors += [repr(exc) for exc in failed.values()]
            if ok:
                first = min(ok, key=lambda t: t.result().end or math.inf)
                return first.result(), tasks.index(first)
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    raise FrondeError(f"every server failed: {'; '.join(errors)}")


async def block(variant: str, rep: int, setup: Setup) -> list[dict[str, Any]]:
    """One block of ``variant`` on fresh servers: one sample record per item.

    ``hop`` is Fronde with only the static arm's mode, every request forced there;
    ``other`` the partner's static server alone; ``race`` starts both static servers
    and sends every request to both (:func:`race`), its records naming the ``winner``.

    Raises:
        FrondeError: that mode's backend would not run the static arm's speculation, the
            variant needs ``setup.partner`` and has none, or a server did not start.
    """
    c = setup.c
    settings = load_settings()
    ctx = max(settings.backend.ctx_size, setup.slots * 2048)
    backend = settings.backend.model_copy(update={"parallel": setup.slots, "ctx_size": ctx})
    run = settings.model_copy(update={"backend": backend})
    env = (("FRONDE_BACKEND__PARALLEL", str(setup.slots)), ("FRONDE_BACKEND__CTX_SIZE", str(ctx)))
    static = next(a for a in ARMS if a.name == setup.server)
    mode = SERVERS[setup.server]
    probe = Arm(f"s-{mode}", "static", force=mode)
    if spec_of(static_argv(static, run)[1]) != spec_of(static_argv(probe, run)[1]):
        raise FrondeError(f"Fronde's {mode} backend does not run {setup.server}'s speculation")
    if variant == "hop-iter":
        env = (*env, ("FRONDE_SERVER__PUSH", "false"))
    hop = replace(PROXY, name=f"fr-{setup.server}", force=mode, env=env)
    arms = [hop if variant.startswith("hop") else static]
    if variant in PAIRED:
        if setup.partner is None:
            raise FrondeError(f"the {variant} variant needs --partner")
        partner = next(a for a in ARMS if a.name == setup.partner)
        arms = [partner] if variant == "other" else [static, partner]
    form = profile_of(settings).prompt_form
    mix = agent_mix(setup.items, skip=setup.skip)
    shape = _body_of(variant, setup.whole)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hop-") as logs:
        async with contextlib.AsyncExitStack() as stack:
            targets = [
                await stack.enter_async_context(started(a, run, None, Path(logs))) for a in arms
            ]
            http = await stack.enter_async_context(_client(variant, c))
            target = targets[0]
            for t in targets:
                await _one(http, t, form, shape(t.body(WARM_ITEM, form, 4)))
            gate = asyncio.Semaphore(c)
            t_start = time.perf_counter()

            async def one(order: int, body: dict[str, Any], item_id: str) -> None:
                level = f"c{c}-whole" if setup.whole else f"c{c}"
                head = {"arm": variant, "rep": rep, "level": level, "item": item_id}
                head |= {"order": order, "t0": round(time.perf_counter() - t_start, 4)}
                try:
                    if len(targets) > 1:
                        sample, won = await race(http, targets, form, body)
                        head |= {"winner": arms[won].name}
                    else:
                        sample = await send(http, target.base_url, form, body, target.headers)
                    out.append(head | {"ok": True, **sample.record()})
                except Exception as exc:  # a failure is a finding, recorded
                    out.append(head | {"ok": False, "error": repr(exc)[:300]})
                finally:
                    gate.release()

            tasks: list[asyncio.Task[None]] = []
            for order, item in enumerate(mix.items):
                await gate.acquire()
                body = shape(target.body(item, form, setup.max_tokens))
                tasks.append(asyncio.create_task(one(order, body, item.id)))
            await asyncio.gather(*tasks)
    return out


async def _one(http: httpx.AsyncClient, target: Target, form: str, body: dict[str, Any]) -> None:
    """A warm-up request."""
    await send(http, target.base_url, form, body, target.headers)


def _ttft_delta(samples: list[dict[str, Any]], name: str, base_name: str, loops: set[str]) -> str:
    """Median of the item-by-item differences in time to first token against the base, ms.

    Each answered item of a ``name`` block less the same item's in the base's block of
    the same repetition (c = 1 sends the items in the same order), looping items left out;
    the interval is the lowest and highest repetition's own median. With ``--whole`` the
    time to first token is the time to the whole answer.
    """
    first: dict[tuple[str, int, str], float] = {
        (s["arm"], s["rep"], s["item"]): s["ttft_s"]
        for s in samples
        if s["ok"] and s.get("ttft_s") is not None and s["item"] not in loops
    }
    by_rep: dict[int, list[float]] = {}
    for (arm, rep, item), t in first.items():
        if arm == name and (base := first.get((base_name, rep, item))) is not None:
            by_rep.setdefault(rep, []).append(1000 * (t - base))
    if name == base_name or not by_rep:
        return "–"
    every = [d for ds in by_rep.values() for d in ds]
    meds = [statistics.median(ds) for ds in by_rep.values()]
    return f"{statistics.median(every):+.2f} [{min(meds):+.2f}, {max(meds):+.2f}]"


def _paired(tok_s: dict[Any, float], base: dict[Any, float]) -> list[float]:
    """Each repetition's tok/s ÷ ``base``'s in the same repetition (where it has one)."""
    return [v / base[k] for k, v in tok_s.items() if base.get(k)]


def _summary(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean of paired ratios and its 95 % bootstrap interval (NaN when empty)."""
    lo, hi = bootstrap([[x] for x in ratios])
    return (geomean(ratios) if ratios else math.nan), lo, hi


def table(files: list[list[dict[str, Any]]]) -> list[str]:
    """The page's table: per variant, tok/s and its ratio to ``direct`` (else ``keepalive``).

    Args:
        files: the records of one or more runs (one list each); a run's repetition pairs
            only with its own ``direct`` block.

    Returns:
        Markdown lines: tok/s median [lowest, highest] over every block, the server's own
        decode tok/s, p50 and time to first token, and the geometric mean of the paired
        ratios with its 95 % bootstrap interval (:func:`~fronde.bench.verdict.bootstrap`);
        with ``race`` and ``other`` blocks, a line more: ``race`` against the better of
        ``direct`` and ``other`` in each repetition, and how many kept answers came
        from each server.

    Raises:
        ValueError: the records are of more than one concurrency.
    """
    samples = [s | {"rep": 1000 * k + s["rep"]} for k, run in enumerate(files) for s in run]
    levels = {s["level"] for s in samples}
    if len(levels) > 1:
        raise ValueError(f"records of several concurrencies ({', '.join(sorted(levels))})")
    # fbody's answers run to the budget (no one applies its stops): its loops say nothing
    # of the other variants' items.
    loops = looping_items(s for s in samples if s["arm"] != "fbody")
    rows = {r.arm: r for r in load_rows(samples, loops)}
    # The ratio's base: ``direct``, or ``keepalive`` (the SDK's client) in a run without it.
    base_name = "direct" if "direct" in rows else "keepalive"
    base = rows[base_name].tok_s_reps if base_name in rows else {}
    lines = [
        "| variant | blocks | tok/s | [lo, hi] | srv tok/s | p50 s | ttft s "
        f"| ÷ {base_name} | 95 % | ttft − {base_name}'s, ms [reps' lo, hi] |",
        "|---|---:|---:|---|---:|---:|---:|---:|---|---|",
    ]
    for name in VARIANTS:
        r = rows.get(name)
        if r is None:
            continue
        ratios = _paired(r.tok_s_reps, base)
        gm, lo, hi = _summary(ratios)
        paired = f"{gm:.2f}× ({len(ratios)})" if ratios else "–"
        ci = f"[{lo:.2f}, {hi:.2f}]" if ratios and not math.isnan(lo) else "–"
        lines.append(
            f"| {name} | {r.reps} | {r.tok_s:.0f} | [{r.tok_s_lo:.0f}, {r.tok_s_hi:.0f}] | "
            f"{r.server_tok_s} | {r.p50_s:.2f} | {r.ttft_s} | {paired} | {ci} | "
            f"{_ttft_delta(samples, name, base_name, set(loops))} |"
        )
    if "race" in rows and "other" in rows and base:
        other = rows["other"].tok_s_reps
        best = {k: max(v, other[k]) for k, v in base.items() if k in other}
        ratios = _paired(rows["race"].tok_s_reps, best)
        if ratios:
            gm, lo, hi = _summary(ratios)
            wins = Counter(s.get("winner") for s in samples if s["arm"] == "race" and s["ok"])
            lines.append(
                f"\nrace ÷ the better of direct and other in its repetition: "
                f"{gm:.2f}× [{lo:.2f}, {hi:.2f}] ({len(ratios)} pairs); "
                f"answers kept: {', '.join(f'{k} {n}' for k, n in wins.most_common())}"
            )
    lines.append(f"\nLeft out of tokens and latencies (looping in some block): {len(loops)} items.")
    return lines


def main() -> int:
    """Measure (``--out``) or re-read (``--report``); print the table either way."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--slots", type=int, default=32, help="-np (the load run's largest c)")
    ap.add_argument(
        "--skip-from", type=Path, default=None, help="a load.json: leave its looping items out"
    )
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--items", type=int, default=None, help="the mix's first N items")
    ap.add_argument("--variant", action="append", choices=VARIANTS, default=None)
    ap.add_argument("--server", choices=sorted(SERVERS), default="plain")
    ap.add_argument(
        "--partner", choices=sorted(SERVERS), default=None, help="the second server of race"
    )
    ap.add_argument("--out", type=Path, help="a new file: each block's records, as measured")
    ap.add_argument("--report", type=Path, nargs="+", help="re-read these runs' records")
    ap.add_argument("--budget-s", type=float, default=400.0, help="start no block after this")
    ap.add_argument("--whole", action="store_true", help="whole answers, not streams")
    args = ap.parse_args()
    if args.report:
        runs = [[json.loads(line) for line in _text(f).splitlines()] for f in args.report]
        print("\n".join(table(runs)))
        return 0
    if args.out is None:
        ap.error("--out or --report is needed")
    if args.out.exists() and args.out.stat().st_size:
        # repetitions restart at 0 in every run: two runs in one file would pair wrongly
        ap.error(f"--out {args.out} exists; name a new file (--report reads several)")
    skip: tuple[str, ...] = ()
    if args.skip_from is not None:
        skip = tuple(str(i) for i in json.loads(args.skip_from.read_text())["looping"])
    if args.partner is not None and args.partner == args.server:
        ap.error("--partner must name another server than --server")
    setup = Setup(
        args.clients,
        max(args.slots, args.clients),
        args.max_tokens,
        args.items,
        skip,
        args.server,
        args.partner,
        args.whole,
    )
    variants: list[str] = args.variant or [
        v for v in VARIANTS if args.partner is not None or v not in PAIRED
    ]
    if args.partner is None and (needs := [v for v in variants if v in PAIRED]):
        ap.error(f"--variant {needs[0]} needs --partner")
    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for rep in range(args.reps):
        turn = rep % len(variants)
        for variant in variants[turn:] + variants[:turn]:
            if time.monotonic() - t0 > args.budget_s:
                break
            try:
                got = asyncio.run(block(variant, rep, setup))
            except FrondeError as exc:
                print(f"hop_probe.py: {exc}", file=sys.stderr)
                return 2
            samples += got
            with args.out.open("a") as f:  # a block at a time: what was measured survives
                f.writelines(json.dumps(s) + "\n" for s in got)
            print(f"{variant} rep {rep}: {sum(s['ok'] for s in got)} ok", flush=True)
    print("\n".join(table([samples])))
    return 0


def _text(path: Path) -> str:
    """A records file's text, gzipped or not."""
    raw = path.read_bytes()
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


if __name__ == "__main__":
    sys.exit(main())
