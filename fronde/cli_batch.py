"""``fronde batch``: a JSONL file of requests through a running Fronde's batch API.

A client of ``POST /fronde/v1/batch``: it reads the file, sends it in one request
and prints one result line per input line; it starts no backend itself.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from fronde.cli_options import ConfigOpt, err, settings_from
from fronde.errors import FrondeError

__all__ = ["batch_cmd"]


def batch_cmd(
    prompts: Annotated[
        Path,
        typer.Argument(help="JSONL: one OpenAI request body per line (messages or prompt)"),
    ],
    url: Annotated[
        str | None,
        typer.Option(help="a running Fronde [default: the configured host and port]"),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="FRONDE_API_KEY", help="sent as Authorization: Bearer"),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Run PROMPTS.jsonl through a running Fronde's batch API; print results as JSONL.

    Everything is routed first, then run grouped by mode (one swap per group with
    swap residency). One result line per input line, in input order:
    ``{"index", "status", "mode", "body"}``.
    """
    import json

    import httpx

    from fronde.request import MAX_BATCH

    items: list[Any] = []
    try:
        lines = prompts.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise FrondeError(f"cannot read {prompts}: {exc.strerror}") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except ValueError as exc:
            raise FrondeError(f"{prompts} line {n} is not JSON: {exc}") from exc
    if not items or len(items) > MAX_BATCH:
        raise FrondeError(f"{prompts}: give 1 to {MAX_BATCH} requests, one per line")
    if url is None:
        s = settings_from(config)
        url = f"http://{s.server.host}:{s.server.port}"
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.post(
            f"{url}/fronde/v1/batch",
            json={"requests": items},
            headers=headers,
            # A batch on a CPU, with swaps, runs for many minutes: no read deadline.
            timeout=httpx.Timeout(None, connect=10.0),
        )
    except httpx.HTTPError as exc:
        raise FrondeError(
            f"no Fronde answers at {url} ({exc}): start it with `fronde serve`"
        ) from exc
    if resp.status_code != 200:
        raise FrondeError(f"{url} answered {resp.status_code}: {resp.text[:300]}")
    answer = resp.json()
    for row in answer["data"]:
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    groups = ", ".join(f"{g['mode']} ×{g['requests']} ({g['seconds']} s)" for g in answer["groups"])
    refused = sum(1 for row in answer["data"] if row["status"] != 200)
    err.print(
        f"batch: {len(items)} request{'s' if len(items) != 1 else ''}, {refused} refused; "
        f"groups in order: {groups or 'none'}",
        highlight=False,
        markup=False,
    )
