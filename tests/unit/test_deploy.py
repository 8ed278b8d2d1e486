"""deploy/: every file parses, and its names, ports and probes agree with the config.

The Fronde configs inside deploy/ are loaded with Fronde's own settings loader, so a
field that does not exist or is out of bounds fails here; the llama-server command
lines are checked against :func:`fronde.modes.mode_args`, so a flag renamed in Fronde
must be renamed in deploy/ too.
"""

from __future__ import annotations

import configparser
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from fronde.api.app import build_pool
from fronde.backends.remote import RemoteMode
from fronde.config import Settings, load_settings
from fronde.modes import Mode, SpeculationSettings, mode_args

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DRAFT_GGUF = Path("/models/Qwen3-0.6B-Q8_0.gguf")


def yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def settings_from(text: str, tmp_path: Path) -> Settings:
    cfg = tmp_path / "fronde.toml"
    cfg.write_text(text)
    return load_settings(cfg, models_dir=ROOT / "models", cache_dir=tmp_path)


def spec_args(mode: Mode) -> list[str]:
    return mode_args(mode, SpeculationSettings(), DRAFT_GGUF if mode is Mode.DRAFT else None)


def contains_run(seq: list[str], run: list[str]) -> bool:
    """``run`` appears in ``seq`` as consecutive items."""
    return any(seq[i : i + len(run)] == run for i in range(len(seq) - len(run) + 1))


def check_backend_command(cmd: list[str], mode: Mode, port: int) -> None:
    assert cmd[0] == "llama-server"
    assert contains_run(cmd, ["--port", str(port)]), cmd
    assert contains_run(cmd, spec_args(mode)), (mode, cmd)
    assert contains_run(cmd, ["--alias", "fronde"])  # answers carry the public model name


def remote_targets(settings: Settings) -> dict[Mode, tuple[str, int]]:
    out: dict[Mode, tuple[str, int]] = {}
    for mode, urls in settings.remote_modes.items():
        [url] = urls
        parsed = urlparse(url)
        assert parsed.hostname is not None and parsed.port is not None, url
        out[mode] = (parsed.hostname, parsed.port)
    return out


def test_every_deploy_file_parses() -> None:
    files = sorted(p for p in DEPLOY.rglob("*") if p.is_file())
    assert {p.suffix for p in files} >= {".yaml", ".service", ".toml", ".env"}
    for path in files:
        if path.suffix == ".yaml":
            assert yaml_docs(path), path
        elif path.suffix == ".service":
            unit = configparser.ConfigParser(interpolation=None, strict=False)
            unit.read_string(path.read_text())
            assert unit["Service"]["ExecStart"], path


def test_kubernetes_services_ports_and_probes_match_the_config(tmp_path: Path) -> None:
    docs = [d for f in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in yaml_docs(f)]
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    settings = settings_from(by_kind["ConfigMap"]["fronde-config"]["data"]["fronde.toml"], tmp_path)
    services, deployments = by_kind["Service"], by_kind["Deployment"]

    def deployment_behind(service: dict[str, Any]) -> dict[str, Any]:
        selector = service["spec"]["selector"]
        [dep] = [
            d
            for d in deployments.values()
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        return dep

    # Every remote mode is a Service in front of a llama-server Deployment for that mode.
    assert set(settings.remote) == set(settings.modes)
    for mode, (host, port) in remote_targets(settings).items():
        svc = services[host]
        assert [p["port"] for p in svc["spec"]["ports"]] == [port]
        [container] = deployment_behind(svc)["spec"]["template"]["spec"]["containers"]
        check_backend_command(container["command"], mode, port)
        assert container["ports"][0]["containerPort"] == svc["spec"]["ports"][0]["targetPort"]
        assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": port}
    # Fronde: its port, its readiness, its config file, its Redis.
    fronde = deployments["fronde"]
    assert fronde["spec"]["replicas"] >= 2  # replicas that share state
    [container] = fronde["spec"]["template"]["spec"]["containers"]
    port = settings.server.port
    assert container["ports"][0]["containerPort"] == port
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": port}
    # Liveness must not depend on the backends (an 8B model loads for minutes).
    assert container["livenessProbe"]["httpGet"] == {"path": "/health/live", "port": port}
    assert container["command"] == ["fronde", "serve", "--config", "/etc/fronde/fronde.toml"]
    assert container["volumeMounts"][0]["mountPath"] == "/etc/fronde"
    redis = urlparse(settings.shared.redis_url)
    assert [p["port"] for p in services[str(redis.hostname)]["spec"]["ports"]] == [redis.port]
    for dep in deployments.values():
        for c in dep["spec"]["template"]["spec"]["containers"]:
            assert "readinessProbe" in c, dep["metadata"]["name"]
    # A proxy-only Fronde plans no local process: it needs no binary, no model and
    # no profile manifest (the container has no models/ mounted).
    empty = tmp_path / "empty"
    empty.mkdir()
    pool = build_pool(settings.model_copy(update={"models_dir": empty, "cache_dir": empty}))
    assert set(pool.backends) == set(settings.modes)
    assert all(isinstance(b, RemoteMode) for b in pool.backends.values())


def test_gpu_compose_services_match_the_config(tmp_path: Path) -> None:
    compose = yaml_docs(DEPLOY / "compose" / "compose.gpu.yaml")[0]["services"]
    settings = settings_from((DEPLOY / "compose" / "fronde-gpu.toml").read_text(), tmp_path)
    assert set(settings.remote) == set(settings.modes) == set(Mode)  # every mode, a service each
    for mode, (host, port) in remote_targets(settings).items():
        svc = compose[host]
        check_backend_command(svc["command"], mode, port)
        assert f"http://127.0.0.1:{port}/health" in svc["healthcheck"]["test"]
        assert svc["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    frondes = [s for name, s in compose.items() if name.startswith("fronde-")]
    assert len(frondes) == 2
    for svc in frondes:
        assert "./fronde-gpu.toml:/etc/fronde/fronde.toml:ro" in svc["volumes"]
        assert svc["command"] == ["fronde", "serve", "--config", "/etc/fronde/fronde.toml"]
        assert svc["ports"][0].endswith(f":{settings.server.port}")
        assert set(svc["depends_on"]) >= {h for h, _ in remote_targets(settings).values()}
    assert urlparse(settings.shared.redis_url).hostname in compose


def test_cpu_compose_runs_fronde_with_its_own_backends() -> None:
    [svc] = yaml_docs(DEPLOY / "compose" / "compose.cpu.yaml")[0]["services"].values()
    assert svc["ports"] == ["8080:8080"]
    assert "http://127.0.0.1:8080/health" in svc["healthcheck"]["test"]
    assert svc["environment"]["FRONDE_MODELS_DIR"] == "/models"


def read_env(path: Path) -> dict[str, str]:
    pairs = (ln.split("=", 1) for ln in path.read_text().splitlines() if "=" in ln)
    return {k: v for k, v in pairs if not k.startswith("#")}


@pytest.mark.parametrize("mode", [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE])
def test_systemd_backend_units_match_the_remote_config(tmp_path: Path, mode: Mode) -> None:
    settings = settings_from((DEPLOY / "systemd" / "fronde-units.toml").read_text(), tmp_path)
    host, port = remote_targets(settings)[mode]
    env = read_env(DEPLOY / "systemd" / "llama" / f"{mode}.env")
    assert (host, env["PORT"]) == ("127.0.0.1", str(port))
    assert env["SPEC_ARGS"].split() == spec_args(mode)
    unit = (DEPLOY / "systemd" / "fronde-llama@.service").read_text()
    assert "EnvironmentFile=/etc/fronde/llama/%i.env" in unit
    assert "--port ${PORT} $SPEC_ARGS" in unit


def test_the_fronde_unit_waits_out_the_drain() -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.read_string((DEPLOY / "systemd" / "fronde.service").read_text())
    service = unit["Service"]
    assert "fronde serve --config /etc/fronde/config.toml" in service["ExecStart"]
    defaults = Settings()
    need = defaults.server.drain_s + defaults.backend.stop_grace_s
    assert int(service["TimeoutStopSec"]) > need
    assert service["KillMode"] == "mixed"
