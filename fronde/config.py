"""Fronde's settings tree: defaults, then a TOML file, then ``FRONDE_*`` environment.

Precedence, highest first: explicit keyword arguments (the CLI's flags), environment
variables (``FRONDE_PORT``, ``FRONDE_BACKEND__THREADS`` with ``__`` between levels,
and ``FRONDE_LLAMA_SERVER`` for a user's own binary), the TOML file given with
``--config``, then the defaults below. ``config.example.toml`` at the repository root
shows every field and is loaded by a test.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import (
    Field,
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

from fronde.config_router import RouterSettings
from fronde.config_sections import (
    BackendSettings,
    ServerSettings,
    SharedSettings,
    SwapSettings,
    UpstreamSettings,
)
from fronde.errors import ConfigError
from fronde.modes import BACKEND_SAMPLING_FLAGS, Mode, SpeculationSettings

__all__ = ["DEFAULT_PROFILE", "REMOTE_ALL", "Settings", "default_models_dir", "load_settings"]

DEFAULT_PROFILE = "cpu-smollm2-135m"

REMOTE_ALL = "all"
"""The ``remote`` key whose hosts serve every mode, the mode chosen per request."""

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
    remote: dict[Mode | Literal["all"], list[str]] = Field(
        default_factory=dict[Mode | Literal["all"], list[str]],
        description="mode → URLs of llama-servers run elsewhere (replicas, balanced by "
        "least in flight); such a mode starts no local process. `all` → hosts whose "
        "llama-server honours the per-request fields (Fronde's patch set) and serves "
        "every mode, each request carrying its mode (alone: no per-mode entry beside it)",
    )

    @field_validator("remote")
    @classmethod
    def _remote_urls(
        cls, remote: dict[Mode | Literal["all"], list[str]]
    ) -> dict[Mode | Literal["all"], list[str]]:
        for mode, urls in remote.items():
            if not urls:
                raise ValueError(f"remote.{mode}: give at least one URL")
            for url in urls:
                if not url.startswith(("http://", "https://")) or len(url) > 2048:
                    raise ValueError(f"remote.{mode}: {url!r} is not an http(s) URL")
        if REMOTE_ALL in remote and len(remote) > 1:
            others = ", ".join(str(m) for m in remote if m != REMOTE_ALL)
            raise ValueError(
                f"remote.all serves every mode from each host, so remote.{others} cannot "
                "stand beside it: list the hosts under `all` (their llama-server honours "
                "the per-request fields) or every remote mode under its own name (one "
                "stock llama-server per mode, each with its own --spec-type)"
            )
        return remote

    @property
    def remote_modes(self) -> dict[Mode, list[str]]:
        """The modes served by their own llama-servers elsewhere (``remote.<mode>``)."""
        return {m: urls for m, urls in self.remote.items() if isinstance(m, Mode)}

    @property
    def remote_hosts(self) -> list[str]:
        """The hosts that serve every mode per request (``remote.all``); [] when none."""
        return self.remote.get(REMOTE_ALL, [])

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

    def single_conflict(self) -> str | None:
        """Why these settings need one llama-server per mode, or None (``single`` serves them).

        Swap residency starts and stops a server per mode; a remote mode is its own
        servers elsewhere; and ``backend.plain_args`` go to baseline's server alone, which
        a shared server has no per-request field for, but for backend sampling
        (``backend_sampling``, sent on baseline's requests instead).
        """
        if self.residency == "swap":
            return "residency = swap starts and stops one llama-server per mode"
        if self.remote_hosts:
            return None  # no local server: the hosts' own flags are theirs
        remote = [str(m) for m in self.modes if m in self.remote]
        if remote:
            return f"remote modes ({', '.join(remote)}) are served per mode"
        other = [a for a in self.backend.plain_args if a not in BACKEND_SAMPLING_FLAGS]
        if other:
            return (
                f"backend.plain_args {other} have no per-request field (of the plain "
                "server's flags only --backend-sampling has one)"
            )
        return None

    @model_validator(mode="after")
    def _topology(self) -> Settings:
        if self.remote_hosts:
            # Fronde starts no llama-server there: one per mode is not its to start.
            why = self.single_conflict()
            if self.backend.topology == "per-mode":
                why = "backend.topology = per-mode"
            if why is not None:
                raise ValueError(
                    f"remote.all serves every mode from one llama-server per host, but {why}: "
                    "use backend.topology = auto or single, or list one stock llama-server "
                    "per mode under remote.<mode>"
                )
            return self
        why = self.single_conflict() if self.backend.topology == "single" else None
        if why is not None:
            raise ValueError(f"backend.topology = single, but {why}: use per-mode or auto")
        return self

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
