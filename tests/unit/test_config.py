"""Settings: defaults, the shipped example, env overrides, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from fronde.config import Settings, load_settings
from fronde.errors import ConfigError
from fronde.modes import Mode

EXAMPLE = Path(__file__).resolve().parents[2] / "config.example.toml"


def test_example_config_loads_and_equals_the_defaults() -> None:
    from_file = load_settings(EXAMPLE)
    defaults = load_settings()
    assert from_file.model_dump(exclude={"backend"}) == defaults.model_dump(exclude={"backend"})
    assert from_file.speculation.ngram_mod_n_match == 24
    assert (from_file.router.floor, from_file.router.probe) == ("auto", "auto")
    assert from_file.modes == list(Mode)


def test_environment_overrides_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "f.toml"
    cfg.write_text(
        '[server]\nport = 9000\nhost = "127.0.0.2"\n[router]\nedit_mode = "ngram-simple"\n'
    )
    monkeypatch.setenv("FRONDE_SERVER__PORT", "9100")
    monkeypatch.setenv("FRONDE_LLAMA_SERVER", "/opt/llama-server")
    s = load_settings(cfg)
    assert s.server.port == 9100  # env wins
    assert s.server.host == "127.0.0.2"  # file value kept beside it
    assert s.router.edit_mode is Mode.NGRAM_SIMPLE
    assert s.llama_server == Path("/opt/llama-server")


def test_cli_overrides_win_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRONDE_PROFILE", "gpu-qwen3-8b")
    assert load_settings(profile="cpu-gemma-270m").profile == "cpu-gemma-270m"


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        (
            "[backend]\nthreads = 0\n",
            "backend.threads: Input should be greater than or equal to 1 (got 0)",
        ),
        ('[router]\nedit_mode = "turbo"\n', "router.edit_mode: Input should be"),
        ("[server]\nport = 70000\n", "server.port"),
        ("nonsense = 1\n", "nonsense: Extra inputs are not permitted"),
        ("[backend\n", "cannot read"),
    ],
)
def test_bad_values_give_one_line_naming_the_field(tmp_path: Path, toml: str, needle: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    assert needle in info.value.message
    assert "\n" not in info.value.message


def test_a_bad_flag_is_blamed_on_the_flag_and_a_bad_setting_on_its_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FRONDE_BACKEND__THREADS", "0")
    with pytest.raises(ConfigError) as info:
        load_settings(flags={"server.port": "--port"}, server={"port": 0})
    assert info.value.message == (
        "--port 0: Input should be greater than or equal to 1; "
        "invalid setting in the FRONDE_* environment or the defaults: "
        "backend.threads: Input should be greater than or equal to 1 (got '0')"
    )


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(Path("/nonexistent/fronde.toml"))


def test_every_field_is_described() -> None:
    def check(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                check(annotation, f"{prefix}{name}.")
            else:
                assert field.description, f"{prefix}{name} has no description"

    check(Settings, "")


@pytest.mark.parametrize(
    ("section", "key"), [("swap", "max_resdent"), ("backend", "threadz"), ("speculation", "n_mach")]
)
def test_a_typo_inside_a_section_is_an_error_naming_it(
    tmp_path: Path, section: str, key: str
) -> None:
    cfg = tmp_path / "typo.toml"
    cfg.write_text(f"[{section}]\n{key} = 2\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    assert f"{section}.{key}: Extra inputs are not permitted" in err.value.message
    assert "\n" not in err.value.message


def test_remote_urls_are_checked(tmp_path: Path) -> None:
    cfg = tmp_path / "remote.toml"
    cfg.write_text('[remote]\nngram-mod = ["gpu1:8081"]\n')
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    assert "remote.ngram-mod: 'gpu1:8081' is not an http(s) URL" in err.value.message
