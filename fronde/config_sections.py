"""The sections of Fronde's settings tree: server, backend, upstream, router, swap, shared.

Each section is a pydantic model with a description and bounds on every field; an
unknown key (a typo) is an error. :class:`fronde.config.Settings` holds one of each;
the router reads its constants from :data:`ROUTER_DEFAULTS`, their one source.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from fronde.modes import Mode

__all__ = [
    "ROUTER_DEFAULTS",
    "BackendSettings",
    "ProbePolicy",
    "RouterSettings",
    "ServerSettings",
    "SharedSettings",
    "SwapSettings",
    "Topology",
    "UpstreamSettings",
]


def _default_threads() -> int:
    # llama.cpp decodes fastest with one thread per physical core; 2 cores here.
    return max(1, min(os.cpu_count() or 1, 8))


class _Section(BaseModel):
    """A settings section: an unknown key (a typo) is an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class ServerSettings(_Section):
    """Where `fronde serve` listens."""

    host: str = Field(
        default="127.0.0.1", description="bind address; loopback unless told otherwise"
    )
    port: int = Field(default=8080, ge=1, le=65535, description="TCP port of the OpenAI API")
    api_keys: list[SecretStr] = Field(
        default_factory=list[SecretStr],
        description="accepted `Authorization: Bearer` keys; empty = no authentication",
    )
    cors_origins: list[str] = Field(
        default_factory=list[str],
        description="origins allowed by CORS (e.g. http://localhost:3000, or *); empty = off",
    )
    max_body_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        le=1024**3,
        description="largest request body accepted, bytes (larger: HTTP 413)",
    )
    default_max_tokens: int = Field(
        default=2048,
        ge=1,
        le=1_048_576,
        description="max_tokens applied when a request names none (never unbounded)",
    )
    sse_keepalive_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="an SSE comment is sent after this many silent seconds (prefill, probe)",
    )
    drain_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="on SIGTERM, in-flight requests get this long to finish, seconds",
    )
    stamps: bool = Field(default=False, description="debug: log each request's time stamps")

    @property
    def url(self) -> str:
        """The server's root URL, ``http://HOST:PORT`` (an IPv6 host in brackets).

        An OpenAI client's base URL is this plus ``/v1``; the live page is ``/ui``.
        """
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


Topology = Literal["auto", "single", "per-mode"]
"""How the modes are served (``backend.topology``; :mod:`fronde.backends.single`)."""


class BackendSettings(_Section):
    """How each llama-server backend process is started and supervised."""

    # auto by default: one llama-server for every mode wherever the binary honours the
    # per-request fields (fronde install's patched build) and the settings allow it.
    topology: Topology = Field(
        default="auto",
        description="single: one llama-server serves every mode, chosen per request "
        "(speculative.n_max / speculative.types in the body; needs a binary that honours "
        "them, fronde install's patch set); per-mode: one llama-server per mode; auto = "
        "single when the binary honours the fields (checked at start) and the settings allow "
        "it (no swap residency, no per-mode remote, plain_args only --backend-sampling), else "
        "per-mode",
    )
    ctx_size: int = Field(
        default=4096, ge=256, le=1_048_576, description="-c: context size in tokens"
    )
    threads: int = Field(
        default_factory=_default_threads, ge=1, le=256, description="-t: decode threads"
    )
    parallel: int = Field(default=1, ge=1, le=64, description="-np: slots (concurrent requests)")
    n_gpu_layers: int | None = Field(
        default=None,
        ge=0,
        le=999,
        description="-ngl: layers offloaded to the GPU; None = llama default",
    )
    extra_args: list[str] = Field(
        default_factory=list, description="extra argv appended to every llama-server"
    )
    plain_args: list[str] = Field(
        default_factory=list,
        description="extra argv for the baseline backend only, e.g. --backend-sampling on "
        "a GPU (H200, 32 slots: gemma's plain server 836 -> 2563 tok/s at c = 32, but "
        "speculative servers halved; results/serving-probe-gpu-h200-20261203); when set, "
        "fronde serve times each backend's pass before routing and predicts baseline at "
        "its own pass time",
    )
    pin_slots: bool = Field(
        default=True,
        description="send each generation to a free slot next to the busy ones (id_slot) of a "
        "llama-server Fronde started with parallel > 1, so that the busy slots stay "
        "consecutive: with one KV stream per slot b11434 splits a step at every gap in "
        "the busy ids; a request to an idle server goes without, placed as by the server "
        "alone (the same answers at c = 1) (fronde/backends/slots.py)",
    )
    start_timeout_s: float = Field(
        default=180.0, gt=0, le=3600, description="deadline for /health to answer 200, seconds"
    )
    stop_grace_s: float = Field(
        default=5.0, gt=0, le=120, description="SIGTERM to SIGKILL grace period, seconds"
    )
    max_restarts: int = Field(
        default=5, ge=0, le=1000, description="restarts allowed per backend within restart_window_s"
    )
    restart_window_s: float = Field(
        default=300.0,
        gt=0,
        le=86_400,
        description="window over which restarts are counted, seconds",
    )


class UpstreamSettings(_Section):
    """Timeouts of the HTTP client from Fronde to the backends.

    httpx's default of 5 s is far too short for a long prefill on a CPU
    (516 tok/s prefill here: a 4096-token prompt alone takes ~8 s).
    """

    connect_timeout_s: float = Field(default=5.0, gt=0, le=600, description="TCP connect, seconds")
    read_timeout_s: float = Field(
        default=600.0, gt=0, le=86_400, description="gap between two bytes from a backend, seconds"
    )
    write_timeout_s: float = Field(
        default=60.0, gt=0, le=3600, description="request upload, seconds"
    )
    pool_timeout_s: float = Field(
        default=60.0, gt=0, le=3600, description="wait for a free pooled connection, seconds"
    )
    client: Literal["aiohttp", "httpx"] = Field(
        default="aiohttp",
        description=(
            "transport under the httpx client: aiohttp (httpx-aiohttp) or httpx's own "
            "httpcore; chosen by `fronde bench overhead` (results/overhead-*)"
        ),
    )


ProbePolicy = Literal["auto", "always", "never"]
"""When the router may probe (``router.probe``; :mod:`fronde.router.policy`, rule 5)."""


class RouterSettings(_Section):
    """The routing policy; defaults are the original FRONDE router's constants."""

    probe_tokens: int = Field(
        default=48, ge=1, le=4096, description="PROBE_TOKENS: tokens generated by a probe"
    )
    margin: float = Field(
        default=1.10, ge=1.0, le=10.0, description="aggressive mode must be this × the floor"
    )
    aggressive: list[Mode] = Field(
        default_factory=lambda: [Mode.NGRAM_MOD, Mode.CASCADE, Mode.NGRAM_SIMPLE],
        description="probe candidates, in order of preference",
    )
    floor_candidates: list[Mode] = Field(
        default_factory=lambda: [Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE, Mode.DRAFT],
        description="modes that become a class's floor once measured ≥ margin × the floor",
    )
    floor: Mode | Literal["auto"] = Field(
        default="auto",
        description="the mode every class starts from: auto = the fastest Fronde mode "
        "`fronde bench verdict` measured on this machine and profile, else ngram-mod",
    )
    probe: ProbePolicy = Field(
        default="auto",
        description="probe a candidate against the floor: auto = only for budgets of at "
        "least probe_min_tokens (or none) and a candidate unmeasured for the class",
    )
    probe_min_tokens: int = Field(
        default=512,
        ge=1,
        le=1_000_000,
        description="auto probes only with a token budget this large or open",
    )
    predict: bool = Field(
        default=True,
        description="route by counterfactual prediction: every answer is replayed for "
        "every n-gram mode, and a bucket with evidence goes to its best predicted mode",
    )
    hindsight: bool = Field(
        default=True,
        description="feed each answer to the counterfactual book (its token ids by /tokenize, "
        "replayed for every n-gram mode): what prediction and the savings view learn from; "
        "false saves those calls and that CPU, and leaves prediction without evidence",
    )
    predict_band: float = Field(
        default=0.03,
        ge=0,
        le=1,
        description="the floor is kept while its predicted speed-up is within this "
        "fraction of the best (ties keep ngram-mod's memory whole)",
    )
    speculate_structured: bool = Field(
        default=True,
        description="route requests with a grammar, a JSON schema or response_format like "
        "any other (the structured-output matrix found them valid under every spec mode), "
        "and tools too where the chat template ignores them; false keeps them on baseline",
    )
    feed_prediction: bool = Field(
        default=True,
        description="Predicted Outputs: feed a request's prediction into the n-gram pool of "
        "an ngram-mod or cascade server (a one-token /completion) before the request",
    )
    edit_mode: Mode = Field(
        default=Mode.NGRAM_MOD, description="mode for the EDIT class until its bucket has evidence"
    )
    edit_block_chars: int = Field(
        default=800, ge=1, le=1_000_000, description="smallest code/JSON block of an edit, chars"
    )
    ema_alpha: float = Field(
        default=0.30, gt=0, le=1, description="EMA_ALPHA: weight of the newest speed"
    )
    collapse: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="EMA_COLLAPSE: a step rate below this × its EMA collapses (judged only "
        "with a decode gate of 1: with parallel slots a request's speed is its batch's)",
    )
    quarantine_s: float = Field(
        default=120.0,
        ge=0,
        le=86_400,
        description="QUARANTINE_S: how long a collapsed mode is out (see collapse)",
    )
    draft_cost: float = Field(
        default=0.2,
        ge=0,
        le=10,
        description="verify cost of a drafted token in decode steps (collapse rule; 0.19 "
        "measured on 2 CPU cores; on an H200 llama-bench's pass gives 0.025 but the "
        "servers paid 0.18-0.21 (SmolLM2) and 0.27-0.45 (gemma), sampling included)",
    )
    load_rule: Literal["auto", "serialize", "spread", "measured", "off"] = Field(
        default="auto",
        description="concurrent requests: serialize on the decoding backend (CPU), "
        "spread to idle backends, measured (the backend whose calibrated throughput "
        "curve gains most, `fronde bench load`), or off; auto = measured with "
        "backend.parallel > 1, else serialize",
    )
    max_parallel_decodes: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="generations running at once across all backends; more wait in Fronde; "
        "default: 1 with backend.parallel = 1 (on a CPU two decoding llama-servers "
        "oversubscribe its cores), else no gate (parallel × modes)",
    )
    load_placement: Literal["marginal", "threshold", "best"] = Field(
        default="best",
        description="measured load rule: best = the mode whose server alone serves the "
        "load in flight best, joining the busiest server within load_band of it (one "
        "batch), or the less busy of the best two where fronde bench load measured two "
        "servers serving more than one at that load (plain2); threshold = plain decoding "
        "once the requests in flight reach the load from which its curve is the highest, "
        "else as planned (one server at a time); marginal = the backend whose curve gains "
        "most (several servers at once). best is the default: measured ahead of threshold on "
        "the H200 (README, Many agents at once on a GPU)",
    )
    draft_lengths: Literal["measured", "off"] = Field(
        default="measured",
        description="one server for every mode: each speculative request's speculative.n_max "
        "from the draft length by load that fronde bench load --draft-lengths saved; off = "
        "each mode drafts up to its configured n_max",
    )
    gather_ms: float = Field(
        default=10.0,
        ge=0,
        le=1000,
        description="measured load rule: a request that arrives within this many ms of "
        "the one before it waits, before it is placed, until none has arrived for as long "
        "(at most gather_max_ms), so that clients starting together are placed for the "
        "load they make; a client coming back within as long of an answer's end, a "
        "forced mode, or no load curves: no wait; 0 turns it off. The H200's bench "
        "clients started 22 requests in 14 ms; on 2 loaded CPU cores the proxy saw gaps "
        "up to 15 ms inside a burst (scripts/load_burst.py: 3 ms split it, 10 ms did not)",
    )
    gather_max_ms: float = Field(
        default=50.0,
        ge=0,
        le=10_000,
        description="measured load rule: the longest a request of a burst waits (gather_ms)",
    )
    load_band: float = Field(
        default=0.05,
        ge=0,
        lt=1,
        description="measured load rule: the planned mode is kept while its marginal "
        "throughput is within this fraction of the best backend's; `best` counts the "
        "servers whose curve is within it of the best as equal, and a request leaves the "
        "one busy server when that server's curve is not (router.placement.MOVE_FLOOR)",
    )
    cache_max_entries: int = Field(
        default=4096, ge=1, le=10_000_000, description="prompt-hash cache capacity, entries"
    )
    cache_ttl_s: float = Field(
        default=3600.0, gt=0, le=31_536_000, description="prompt-hash cache entry lifetime, s"
    )


ROUTER_DEFAULTS = RouterSettings()
"""The router's defaults, their one source: ``fronde.router`` reads its constants here."""


class SwapSettings(_Section):
    """How backends share a machine that cannot hold them all (``residency = "swap"``).

    The scheduler (:mod:`fronde.backends.swap`) keeps at most ``max_resident``
    llama-servers up and batches mode changes into epochs: it serves the resident
    modes' queues for up to ``max_epoch_s``, then swaps to the mode whose oldest
    request has waited longest. The seed's 8 GB GPU holds one Qwen3-8B copy, hence
    ``max_resident = 1``.
    """

    max_resident: int = Field(
        default=1, ge=1, le=16, description="llama-servers up at once; the others wait stopped"
    )
    max_epoch_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="an epoch serves its modes' queues this long, seconds, while others wait",
    )
    max_wait_s: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="no request waits longer for its mode, seconds; then fallback or 503",
    )
    fallback: bool = Field(
        default=True,
        description="past max_wait_s, serve from a resident mode (else 503 with Retry-After)",
    )
    policy: Literal["epoch", "fifo"] = Field(
        default="epoch",
        description="epoch: batch mode changes; fifo: strict arrival order, a swap at every "
        "mode change (the comparison point of `fronde bench swap`)",
    )


class SharedSettings(_Section):
    """Router state shared by Fronde replicas through Redis (:mod:`fronde.router.shared`)."""

    redis_url: str = Field(
        default="",
        max_length=2048,
        pattern=r"^(|rediss?://.+|unix://.+)$",
        description="redis://host:port/db shared by the replicas; empty = local state only",
    )
    namespace: str = Field(
        default="fronde",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="key prefix in Redis (several clusters can share one Redis)",
    )
    sync_s: float = Field(
        default=1.0, gt=0, le=60, description="seconds between two syncs of EMAs and quarantines"
    )
