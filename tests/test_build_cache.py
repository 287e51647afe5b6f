"""The firmware object cache (quarl_edge/targets/build.py: _compile_objects): a second build of
another model for the same board compiles only its model.c and links the same firmware; a change
of any firmware file, of the flags or of the compiler key recompiles; objects appear whole
(written under a temporary name, then renamed), also when builds run in parallel."""
from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from quarl_edge.targets import build as B
from quarl_edge.targets.boards import get_board

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "examples" / "cartpole_dqn" / "models"


@pytest.fixture
def compiles(monkeypatch):
    """The sources each compiler call of the build compiled (-c), in a list per test."""
    seen: list[str] = []
    real_run = subprocess.run

    def run(cmd, *a, **kw):
        if "-c" in cmd:
            seen.append(Path(cmd[cmd.index("-c") + 1]).name)
        return real_run(cmd, *a, **kw)
    monkeypatch.setattr(B.subprocess, "run", run)
    return seen


def _build(model: str, tmp: Path, out: str, board="host", extra=()):
    shutil.copy(MODELS / model, tmp / model)
    return B.build(tmp / model, get_board(board), tmp / out, extra_flags=extra)


def test_cache_dir_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("QUARL_EDGE_CACHE_DIR", str(tmp_path / "c"))
    assert B.object_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("QUARL_EDGE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert B.object_cache_dir() == tmp_path / "xdg" / "quarl-edge" / "objects"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert B.object_cache_dir() == Path.home() / ".cache" / "quarl-edge" / "objects"


def test_a_second_model_compiles_only_its_model_c(monkeypatch, tmp_path, compiles):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    monkeypatch.setenv("QUARL_EDGE_CACHE_DIR", str(tmp_path / "cache"))
    n_sources = len(B.firmware_sources(get_board("host"))) + 1
    _build("int8.tflite", tmp_path, "a")
    assert len(compiles) == n_sources and "model.c" in compiles
    compiles.clear()
    fw = _build("fp32.tflite", tmp_path, "b")
    assert compiles == ["model.c"]
    compiles.clear()
    # another input size: QE_INPUT_COPY_BYTES differs, which only harness.c reads
    from helpers_models import fc_model
    (tmp_path / "wide.tflite").write_bytes(fc_model(np.ones((3, 40), np.int8), (0.05, 1), 0.01,
                                                    (0.1, 0), input_shape=[1, 40]))
    B.build(tmp_path / "wide.tflite", get_board("host"), tmp_path / "w")
    assert sorted(compiles) == ["harness.c", "model.c"]
    assert "-DQE_INPUT_COPY_BYTES=40u" in (tmp_path / "w" / "build.cmd").read_text()
    compiles.clear()
    again = _build("fp32.tflite", tmp_path, "b")            # the same build again: nothing
    assert compiles == [] and again.elf.read_bytes() == fw.elf.read_bytes()
    # the cached build links the same program as a build that compiled everything
    monkeypatch.setenv("QUARL_EDGE_CACHE_DIR", str(tmp_path / "fresh"))
    fresh = _build("fp32.tflite", tmp_path, "b")
    assert len(compiles) == n_sources and fresh.elf.read_bytes() == fw.elf.read_bytes()
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_flags_and_firmware_files_are_in_the_key(monkeypatch, tmp_path, compiles):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    monkeypatch.setenv("QUARL_EDGE_CACHE_DIR", str(tmp_path / "cache"))
    home = tmp_path / "home"                      # a checkout-like tree whose firmware we edit
    shutil.copytree(ROOT / "firmware", home / "firmware")
    shutil.copytree(ROOT / "boards", home / "boards")
    monkeypatch.setenv("QUARL_EDGE_HOME", str(home))
    assert B.firmware_dir() == home / "firmware"
    n_sources = len(B.firmware_sources(get_board("host"))) + 1
    _build("int8.tflite", tmp_path, "a")
    compiles.clear()
    _build("int8.tflite", tmp_path, "a", extra=("-DQE_UNUSED_TEST_FLAG=1",))
    assert len(compiles) == n_sources                   # other flags: other objects
    compiles.clear()
    # a header that only some sources include changes every key (one digest for the tree)
    h = home / "firmware" / "core" / "kernels" / "window.h"
    h.write_text(h.read_text() + "\n/* edited */\n")
    _build("int8.tflite", tmp_path, "a")
    assert len(compiles) == n_sources
    compiles.clear()
    _build("int8.tflite", tmp_path, "a")
    assert compiles == []
    monkeypatch.setattr(B, "_compiler_id", lambda cc: "another compiler")
    _build("int8.tflite", tmp_path, "a")
    assert len(compiles) == n_sources


def test_parallel_builds_share_the_cache(monkeypatch, tmp_path):
    """Two builds at once into one empty cache: all link, every object there is whole (the
    linker read them), and no temporary file is left."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    monkeypatch.setenv("QUARL_EDGE_CACHE_DIR", str(tmp_path / "cache"))
    errors, fws = [], []

    def one(k):
        try:
            d = tmp_path / f"p{k}"
            d.mkdir()
            fws.append(_build("int8.tflite", d, "out"))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=one, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(fws) == 2
    assert not list((tmp_path / "cache").glob("*.tmp"))
    n_sources = len(B.firmware_sources(get_board("host")))
    # the shared sources once, plus each build's own model.c (its path is in its key)
    assert len(list((tmp_path / "cache").glob("*.o"))) == n_sources + 2
    for fw in fws:
        assert subprocess.run(["nm", str(fw.elf)], capture_output=True, text=True).stdout.count(
            " T qe_model_invoke") == 1


def test_a_compile_error_names_the_board_and_leaves_no_object(monkeypatch, tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    monkeypatch.setenv("QUARL_EDGE_CACHE_DIR", str(tmp_path / "cache"))
    bad = tmp_path / "bad.c"
    bad.write_text("int f(void) { return undefined_name; }\n")
    from quarl_edge.core.errors import ToolchainError
    with pytest.raises(ToolchainError, match=r"(?s)building firmware for host failed: gcc exited with code 1:\n.*undefined_name"):
        B.compile_firmware(get_board("host"), [bad], tmp_path / "x.elf")
    assert not list((tmp_path / "cache").iterdir())


def test_two_builds_into_one_folder_take_turns_and_replace_the_elf_whole(monkeypatch, tmp_path):
    """Two `hil` on one run directory build into one folder at once (issue 24; CI once read the
    other build's half-written model.json): a build waits for the folder's lock, and the ELF is
    renamed into place, so a board started from the earlier build keeps a whole file."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    from quarl_edge.core.files import locked
    monkeypatch.setenv("QUARL_EDGE_CACHE_DIR", str(tmp_path / "cache"))
    first = _build("int8.tflite", tmp_path, "out")
    before = first.elf.stat().st_ino
    gen = tmp_path / "out" / "gen" / "model.json"
    gen_before = gen.stat().st_mtime_ns
    done: list = []
    with locked(tmp_path / "out"):
        t = threading.Thread(target=lambda: done.append(
            B.build(tmp_path / "int8.tflite", get_board("host"), tmp_path / "out")))
        t.start()
        t.join(1.0)
        assert t.is_alive() and not done          # waiting for the lock, nothing written yet
        assert first.elf.stat().st_ino == before and gen.stat().st_mtime_ns == gen_before
    t.join(120)
    assert done and done[0].elf == first.elf
    assert first.elf.stat().st_ino != before       # a new file, not the old one rewritten
    assert not [p.name for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]
