"""The agent loop: five successive edits of one file, each output the next input.

This is what an agent tool does to a file over a session. Each edit is a
completion-style prompt (the instruction, the file in a fence, then the heading of
the corrected file) and generation stops at the closing fence. It runs on warm
servers for baseline, ngram-mod (n_match 12, Fronde's setting) and the router.

Reported per mode: wall clock for the five edits, sustained tok/s (tokens ÷ wall
seconds, prefill and probes included) and the final file's sha256, so one can see
whether the modes ended with the same file (at temperature 0 on CPU they need not:
greedy output is not bit-identical across modes here).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from pydantic import BaseModel

from fronde.bench.battery import INVENTORY_PY
from fronde.bench.runner import Config, backends, bench_client, direct_run, routed_run
from fronde.bench.serve import RunInfo, run_info
from fronde.config import Settings

__all__ = ["EDITS", "AgentLoopReport", "AgentRun", "run_agent_loop"]

EDITS = (
    "Rename the method total to count_all.",
    "Add a one-line docstring to the class.",
    "Change the error message in remove to 'not enough stock of ' + name.",
    "Rename the parameter limit of low to threshold.",
    "Make save write the JSON with indent=4.",
)
"""The five successive edit instructions."""


def edit_prompt(instruction: str, source: str) -> str:
    """The completion-style prompt for one edit of ``source``."""
    return (
        f"{instruction}\n```python\n{source}```\n"
        "Here is the whole file again, with the change made:\n```python\n"
    )


class AgentRun(BaseModel):
    """One mode's five edits.

    Attributes:
        mode: baseline, ngram-mod-12 or router.
        wall_s: seconds for the five edits, end to end.
        tokens: tokens generated over the five edits.
        sustained_tok_s: tokens ÷ wall_s (prefill, probes and hand-overs included).
        final_sha256: sha256 of the file after the fifth edit.
        final_file: the file after the fifth edit.
        per_edit_tokens: tokens generated per edit.
    """

    mode: str
    wall_s: float
    tokens: int
    sustained_tok_s: float
    final_sha256: str
    final_file: str
    per_edit_tokens: list[int]


class AgentLoopReport(RunInfo):
    """A versioned record of one agent-loop run."""

    llama_build: str
    max_tokens: int
    runs: list[AgentRun]
    identical_final_files: bool


async def run_agent_loop(
    settings: Settings, config_file: Path | None, log_dir: Path, max_tokens: int = 512
) -> AgentLoopReport:
    """Run the five edits for baseline, ngram-mod-12 and the router.

    Args:
        settings: binary, model and backend settings.
        config_file: for the `fronde serve` that runs the router.
        log_dir: where the backends' logs go.
        max_tokens: budget per edit (the file is about 250 tokens).

    Raises:
        FrondeError: a backend or `fronde serve` could not start, or a request failed.
    """
    info = run_info()
    configs = [
        Config("baseline"),
        Config("ngram-mod-12", ("--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "12")),
        Config("router", router=True),
    ]
    runs: list[AgentRun] = []
    async with (
        backends(settings, config_file, configs, log_dir) as (procs, serve, build),
        bench_client() as http,
    ):
        base = procs["baseline"].url
        for cfg in configs:
            source, tokens = INVENTORY_PY, 0
            per_edit: list[int] = []
            t0 = time.perf_counter()
            for k, instruction in enumerate(EDITS):
                prompt = edit_prompt(instruction, source)
                if cfg.router and serve is not None:
                    run = await routed_run(
                        http, serve.base_url, prompt, max_tokens, "```", 5000 + k
                    )
                else:
                    r = await http.post(
                        f"{base}/tokenize",
                        json={"content": prompt, "add_special": True, "parse_special": True},
                    )
                    ids = [int(t) for t in r.json()["tokens"]]
                    run = await direct_run(http, procs[cfg.name].url, ids, max_tokens, "```")
                tokens += run.tokens
                per_edit.append(run.tokens)
                if run.text.strip():
                    source = run.text if run.text.endswith("\n") else run.text + "\n"
            wall = time.perf_counter() - t0
            runs.append(
                AgentRun(
                    mode=cfg.name,
                    wall_s=round(wall, 2),
                    tokens=tokens,
                    sustained_tok_s=round(tokens / wall, 2) if wall else 0.0,
                    final_sha256=hashlib.sha256(source.encode()).hexdigest(),
                    final_file=source,
                    per_edit_tokens=per_edit,
                )
            )
    return AgentLoopReport(
        **info,
        llama_build=build,
        max_tokens=max_tokens,
        runs=runs,
        identical_final_files=len({r.final_sha256 for r in runs}) == 1,
    )
