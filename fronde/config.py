"""Fronde's settings tree: defaults, then a TOML file, then ``FRONDE_*`` environment.

Precedence, highest first: explicit keyword arguments (the CLI's flags), environment
variables (``FRONDE_PORT``, ``FRONDE_BACKEND__THREADS`` with ``__`` between levels,
and ``FRONDE_LLAMA_SERVER`` for a user's own binary), the TOML file given with
``--config``, then the defaults below. ``config.example.toml`` at the repository root
shows every field and is loaded by a test.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from fronde.errors import ConfigError
from fronde.modes import Mode, SpeculationSettings

__all__ = [
    "DEFAULT_PROFILE",
    "ROUTER_DEFAULTS",
    "BackendSettings",
    "ProbePolicy",
    "RouterSettings",
    "ServerSettings",
    "Settings",
    "SharedSettings",
    "SwapSettings",
    "UpstreamSettings",
    "default_models_dir",
    "load_settings",
]

DEFAULT_PROFILE = "cpu-smollm2-135m"

_CONFIG_FILE: ContextVar[Path | None] = ContextVar("fronde_config_file", default=None)


def default_models_dir() -> Path:
    """Return the folder holding profile manifests and fetched GGUF files.

    A source checkout (the supported install, ``pip install -e .``) keeps them in
    ``models/`` at the repository root; otherwise the per-user data folder.
    """
    checkout = Path(__file__).resolve().parent.parent / "models"
    if checkout.is_dir():
        return checkout
    return Path(platformdirs.user_data_dir("fronde")) / "models"


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

    @property
    def url(self) -> str:
        """The server's root URL, ``http://HOST:PORT`` (an IPv6 host in brackets).

        An OpenAI client's base URL is this plus ``/v1``; the live page is ``/ui``.
        """
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


class BackendSettings(_Section):
    """How each llama-server backend process is started and supervised."""

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


class Settings(BaseSettings):
    """The whole settings tree of Fronde.

    Raises:
        pydantic.ValidationError: on construction, when a value is out of bounds;
            :func:`load_settings` turns it into a one-line :class:`ConfigError`.
    """

    model_config = SettingsConfigDict(
        env_prefix="FRONDE_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    profile: str = Field(
        default=DEFAULT_PROFILE,
        min_length=1,
        description="model profile: a manifest models/<profile>.toml",
    )
    model: Path | None = Field(
        default=None,
        description="a local GGUF to serve with no manifest (--model); replaces `profile`",
    )
    draft: Path | None = Field(
        default=None,
        description="a local draft GGUF sharing the model's vocabulary (--draft); with `model`",
    )
    chat_template: str | None = Field(
        default=None,
        min_length=1,
        description="with `model`: a llama.cpp built-in template name or a .jinja file; "
        "default: the GGUF's own",
    )
    models_dir: Path = Field(
        default_factory=default_models_dir, description="folder of manifests and GGUF files"
    )
    cache_dir: Path = Field(
        default_factory=lambda: Path(platformdirs.user_cache_dir("fronde")),
        description="per-user cache: llama-server builds, downloads",
    )
    llama_server: Path | None = Field(
        default=None,
        description="a llama-server binary of your own (env FRONDE_LLAMA_SERVER); "
        "default: the one `fronde install` built",
    )
    modes: list[Mode] = Field(
        default_factory=lambda: list(Mode),
        min_length=1,
        description="modes to run; one whose model is missing is left out and reported",
    )
    public_model: str = Field(
        default="fronde", min_length=1, description="model name advertised in /v1/models"
    )
    log_format: Literal["auto", "json", "console"] = Field(
        default="auto", description="auto = console on a TTY, JSON otherwise"
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="minimum level logged"
    )
    remote: dict[Mode, list[str]] = Field(
        default_factory=dict[Mode, list[str]],
        description="mode → URLs of llama-servers run elsewhere (replicas, balanced by "
        "least in flight); such a mode starts no local process",
    )

    @field_validator("remote")
    @classmethod
    def _remote_urls(cls, remote: dict[Mode, list[str]]) -> dict[Mode, list[str]]:
        for mode, urls in remote.items():
            if not urls:
                raise ValueError(f"remote.{mode}: give at least one URL")
            for url in urls:
                if not url.startswith(("http://", "https://")) or len(url) > 2048:
                    raise ValueError(f"remote.{mode}: {url!r} is not an http(s) URL")
        return remote

    @model_validator(mode="after")
    def _local_model(self) -> Settings:
        given = [
            flag
            for flag, value in (("--draft", self.draft), ("--chat-template", self.chat_template))
            if value is not None
        ]
        if self.model is None and given:
            verb = "needs" if len(given) == 1 else "need"
            raise ValueError(f"{' and '.join(given)} {verb} --model PATH.gguf")
        return self

    residency: Literal["resident", "swap"] = Field(
        default="resident",
        description="resident: every mode's llama-server stays up; swap: at most "
        "swap.max_resident are up, and mode changes are batched into epochs",
    )
    server: ServerSettings = Field(default_factory=ServerSettings)
    swap: SwapSettings = Field(default_factory=SwapSettings)
    shared: SharedSettings = Field(default_factory=SharedSettings)
    backend: BackendSettings = Field(default_factory=BackendSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    speculation: SpeculationSettings = Field(default_factory=SpeculationSettings)
    router: RouterSettings = Field(default_factory=RouterSettings)

    def effective_load_rule(self) -> Literal["serialize", "spread", "measured", "off"]:
        """``router.load_rule`` with ``auto`` resolved.

        ``auto`` is ``measured`` when every backend has parallel slots
        (``backend.parallel > 1``: a GPU serving several requests at once) and the
        backends are resident, else ``serialize`` (a CPU, or swap residency).
        """
        rule = self.router.load_rule
        if rule != "auto":
            return rule
        parallel = self.backend.parallel > 1 and self.residency == "resident"
        return "measured" if parallel else "serialize"

    def effective_max_parallel_decodes(self) -> int:
        """``router.max_parallel_decodes``, or its default.

        The default is 1 without parallel slots, else every slot of every mode (no gate).
        """
        given = self.router.max_parallel_decodes
        if given is not None:
            return given
        return 1 if self.backend.parallel == 1 else self.backend.parallel * len(self.modes)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Order the sources: init kwargs, environment, then the TOML file if any."""
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = _CONFIG_FILE.get()
        if config_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=config_file))
        return tuple(sources)


def _flag_of(where: str, flags: Mapping[str, str]) -> str | None:
    """The command-line flag that set the field at dotted path ``where``, if one did."""
    for field, flag in flags.items():
        if where == field or where.startswith(field + "."):
            return flag
    return None


def _one_line(exc: ValidationError, origin: str, flags: Mapping[str, str]) -> str:
    """One line for a validation error: a bad flag is named as typed, other fields by path."""
    if all(not err["loc"] for err in exc.errors()):
        # Whole-settings rules (model validators) name their flags themselves.
        return "; ".join(err["msg"].removeprefix("Value error, ") for err in exc.errors())
    given: list[str] = []
    other: list[str] = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        got = err.get("input")
        plain = not isinstance(got, dict | list)
        msg = err["msg"].removeprefix("Value error, ")
        flag = _flag_of(where, flags)
        if flag is not None:
            given.append(f"{flag} {got}: {msg}" if plain else f"{flag}: {msg}")
        else:
            shown = f" (got {got!r})" if plain else ""
            other.append(f"{where}: {msg}{shown}" if where else msg)
    if other:
        given.append(f"invalid setting in {origin}: " + "; ".join(other))
    return "; ".join(given)


def load_settings(
    config_file: Path | None = None,
    *,
    flags: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build :class:`Settings` from defaults, ``config_file``, the environment and overrides.

    Args:
        config_file: a TOML file shaped like ``config.example.toml``, or None.
        flags: the command-line flag of each override, by dotted field path
            (``{"server.port": "--port"}``): a bad value is blamed on the flag as typed,
            ``--port 99999: ...``, not on the file or the environment.
        **overrides: field values that win over every other source (CLI flags).

    Returns:
        Validated settings.

    Raises:
        ConfigError: the file is missing or unreadable, or a value is invalid; the
            message is one line naming the flag or the field, and why.
    """
    if config_file is not None and not config_file.is_file():
        raise ConfigError(f"config file not found: {config_file}")
    origin = (
        f"{config_file} or the FRONDE_* environment"
        if config_file is not None
        else "the FRONDE_* environment or the defaults"
    )
    if overrides and not flags:
        origin = "the command line, " + origin
    token = _CONFIG_FILE.set(config_file)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, origin, flags or {})) from exc
    except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError(f"cannot read {origin}: {exc}") from exc
    finally:
        _CONFIG_FILE.reset(token)
