"""Fixtures shared by the test modules (helpers without fixtures live in helpers_models.py)."""
from __future__ import annotations

import pytest
from helpers_models import copy_example_tree


@pytest.fixture(scope="module")
def run_copy(tmp_path_factory):
    """A copy of the shipped example run, per test module: boards build and write results there."""
    return copy_example_tree(tmp_path_factory.mktemp("run") / "cartpole_dqn")
