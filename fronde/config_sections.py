"""The sections of Fronde's settings tree: server, backend, upstream, swap, shared.

Each section is a pydantic model with a description and bounds on every field; an
unknown key (a typo) is an error. :class:`fronde.config.Settings` holds one of each and
the router's (:mod:`fronde.config_router`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = [
    "BackendSettings",
    "Section",
    "ServerSettings",
    "SharedSettings",
    "SwapSettings",
    "Topology",
    "UpstreamSettings",
    "physical_cores",
]


SYSFS_CPU = Path("/sys/devices/system/cpu")
"""Where Linux describes each CPU's topology (``cpuN/topology/thread_siblings``)."""


def physical_cores(root: Path = SYSFS_CPU, cpus: Iterable[int] | None = None) -> int | None:
    """How many physical cores the CPUs ``cpus`` (default: this process's) belong to.

    Counted as llama.cpp b11434 counts them for its default ``-t``
    (``common_cpu_get_num_physical_cores``, ``common/common.cpp``): one core per distinct
    ``thread_siblings`` mask, so the two hardware threads of a core count once; unlike
    llama.cpp, only the CPUs this process may run on (a container's share). None where
    sysfs does not say (not Linux, or a CPU without its topology file).
    """
    if cpus is None:
        cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ()
    masks: set[str] = set()
    for cpu in cpus:
        try:
            masks.add((root / f"cpu{cpu}" / "topology" / "thread_siblings").read_text().strip())
        except OSError:
            return None
    return len(masks) or None


def _default_threads() -> int:
    # One thread per physical core, llama.cpp's own default. One per hardware thread would
    # hold every CPU, and where llama-server's threads do, Fronde's own CPU costs the
    # server 2-3 % of its decode rate (2 cores, results/server-decode-cpu-smollm2-20261207/).
    # At most 8.
    return max(1, min(physical_cores() or os.cpu_count() or 1, 8))


class Section(BaseModel):
    """A settings section: an unknown key (a typo) is an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class ServerSettings(Section):
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
    push: bool = Field(
        default=True,
        description="write a relayed stream to the client from the upstream's reads "
        "(uvicorn with httptools; off: through ASGI send, a task a read)",
    )

    @property
    def url(self) -> str:
        """The server's root URL, ``http://HOST:PORT`` (an IPv6 host in brackets).

        An OpenAI client's base URL is this plus ``/v1``; the live page is ``/ui``.
        """
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


Topology = Literal["auto", "single", "per-mode"]
"""How the modes are served (``backend.topology``; :mod:`fronde.backends.single`)."""


class BackendSettings(Section):
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
        default_factory=_default_threads,
        ge=1,
        le=256,
        description="-t: decode threads (default: the physical cores, at most 8)",
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
    cache_idle_slots: bool = Field(
        default=False,
        description="llama-server's --cache-idle-slots: on every new task, save each idle "
        "slot's KV state to the prompt cache in host memory, before the step that starts "
        "the task (b11434's default). Off (Fronde's default) passes --no-cache-idle-slots: "
        "a slot's state is still saved when a request is about to overwrite it. On an H100 "
        "(gemma, 32 slots) a start waited 6-8 ms with 24-31 idle slots holding a prompt, "
        "0.3 ms with none (fronde/backends/process.py); turn it on for a llama-server "
        "that does not know the flag, or with --kv-unified in extra_args (there it also "
        "clears the idle slots' cells)",
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


class UpstreamSettings(Section):
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


class SwapSettings(Section):
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


class SharedSettings(Section):
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
