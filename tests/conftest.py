"""Fixtures shared by the test modules (helpers without fixtures live in helpers_models.py)."""
from __future__ import annotations

import pytest
from helpers_models import copy_example_tree


@pytest.fixture(autouse=True, scope="session")
def object_cache(tmp_path_factory):
    """Firmware objects are cached in a directory of this test session, not in ~/.cache: the
    tests share it (a second build of a board compiles only model.c), and leave nothing behind.
    Set in os.environ, so the CLIs the tests start use it too."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("object-cache")
        mp.setenv("QUARL_EDGE_CACHE_DIR", str(path))
        yield path


@pytest.fixture(autouse=True)
def no_user_boards(tmp_path_factory, monkeypatch):
    """Board files come from the checkout only: a developer's ~/.config/quarl-edge/boards or
    $QUARL_EDGE_BOARDS would change what the tests see (also in the CLIs they start)."""
    monkeypatch.delenv("QUARL_EDGE_BOARDS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))


@pytest.fixture(scope="module")
def run_copy(tmp_path_factory):
    """A copy of the shipped example run, per test module: boards build and write results there."""
    return copy_example_tree(tmp_path_factory.mktemp("run") / "cartpole_dqn")
