"""Fixtures shared by the test modules (helpers without fixtures live in helpers_models.py)."""
from __future__ import annotations

import pytest
from helpers_models import copy_example_tree


@pytest.fixture(autouse=True, scope="session")
def object_cache(tmp_path_factory, worker_id):
    """Firmware objects are cached in a directory of this test session, not in ~/.cache: the
    tests share it (a second build of a board compiles only model.c), and leave nothing behind.
    Under pytest-xdist the workers share one (the base temp folder's parent is the run's; an
    object is written under a temporary name and renamed, so two workers never see half of one).
    Set in os.environ, so the CLIs the tests start use it too."""
    with pytest.MonkeyPatch.context() as mp:
        if worker_id == "master":
            path = tmp_path_factory.mktemp("object-cache")
        else:
            path = tmp_path_factory.getbasetemp().parent / "object-cache"
            path.mkdir(exist_ok=True)
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


# The tests that train with TF-Agents (or fine-tune with QAT in the RL loop), marked `train`:
# `make test-core` (CI's second Python) leaves them out. Whole modules where their fixtures train.
TRAIN_MODULES = {"test_algos.py", "test_train.py", "test_qat_distill.py", "test_minatar.py",
                 "test_mujoco.py", "test_recurrent.py", "test_schemes.py", "test_study.py"}
TRAIN_TESTS = {"test_e2e_host.py::test_train_then_quantize_through_the_cli"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.nodeid.split("/")[-1]
        if name.split("::")[0] in TRAIN_MODULES or name.split("[")[0] in TRAIN_TESTS:
            item.add_marker(pytest.mark.train)
