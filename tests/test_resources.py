"""Where the non-Python parts are found (quarl_edge/core/resources.py): $QUARL_EDGE_HOME first, then
the installed package data, then the checkout; the version is written once. tests/test_wheel.py
installs a real wheel and runs it."""
import os
import re
import tomllib
from pathlib import Path

import pytest

import quarl_edge
from quarl_edge.core import resources
from quarl_edge.core.errors import QuarlError

ROOT = Path(__file__).resolve().parents[1]


def data_root(at: Path) -> Path:
    (at / "firmware" / "core").mkdir(parents=True)
    (at / "boards").mkdir()
    return at


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("QUARL_EDGE_HOME", raising=False)


def test_a_checkout_finds_its_own_firmware_and_boards(no_env):
    assert resources.project_root() == ROOT
    assert resources.firmware_dir() == ROOT / "firmware"
    assert resources.boards_dir() == ROOT / "boards"
    assert (resources.examples_dir() / "cartpole_dqn" / "models" / "int8.tflite").is_file()
    assert (resources.docs_dir() / "protocol.md").is_file()
    assert resources.simavr_bridge_source() == ROOT / "quarl_edge" / "targets" / "simavr_bridge.c"


def test_quarl_edge_home_comes_first(tmp_path, monkeypatch):
    home = data_root(tmp_path / "home")
    monkeypatch.setenv("QUARL_EDGE_HOME", str(home))
    assert resources.firmware_dir() == home / "firmware"
    assert resources.boards_dir() == home / "boards"


def test_a_quarl_edge_home_without_firmware_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARL_EDGE_HOME", str(tmp_path))
    with pytest.raises(QuarlError, match=r"firmware/core under \$QUARL_EDGE_HOME"):
        resources.firmware_dir()


def test_installed_package_data_comes_before_the_checkout(tmp_path, monkeypatch, no_env):
    pkg = tmp_path / "site-packages" / "quarl_edge"
    data_root(pkg / "data")
    real = resources._package_dir
    monkeypatch.setattr(resources, "_package_dir",
                        lambda name: pkg if name == "quarl_edge" else real(name))
    assert resources.firmware_dir() == pkg / "data" / "firmware"


def test_nothing_found_names_every_place_looked_in(tmp_path, monkeypatch, no_env):
    monkeypatch.setattr(resources, "_package_dir", lambda name: tmp_path / "pkg")
    monkeypatch.setattr(resources, "__file__", str(tmp_path / "pkg" / "core" / "resources.py"))
    with pytest.raises(QuarlError) as e:
        resources.firmware_dir()
    msg = str(e.value)
    assert str(tmp_path / "pkg" / "data") in msg and f"the checkout: {tmp_path}" in msg
    assert "QUARL_EDGE_HOME" in msg


def test_user_board_folders_come_from_the_env_and_xdg(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("QUARL_EDGE_BOARDS", f"{a}{os.pathsep}{b}{os.pathsep}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert resources.user_boards_dirs() == [a, b, tmp_path / "cfg" / "quarl-edge" / "boards"]
    monkeypatch.delenv("QUARL_EDGE_BOARDS")
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/cfg")          # ignored, as the spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resources.user_boards_dirs() == [tmp_path / "home" / ".config" / "quarl-edge" / "boards"]


def test_the_version_is_written_once():
    """pyproject.toml reads the version from quarl_edge.__version__, a plain string literal."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "quarl_edge.__version__"}
    init = (ROOT / "quarl_edge" / "__init__.py").read_text()
    assert re.search(r'^__version__ = "[^"]+"$', init, re.M)
    assert quarl_edge.__version__ in init
