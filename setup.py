"""Package discovery, the one part of the build configuration pyproject.toml cannot say: the
Python packages are the folders under quarl_edge/ (every one has an __init__.py), and the data
"packages" that pyproject.toml maps into quarl_edge/data/ (firmware/, boards/, the example run,
docs/protocol.md) are named here. Everything else is in pyproject.toml."""
from setuptools import find_packages, setup

DATA = ["quarl_edge.data.firmware", "quarl_edge.data.boards",
        "quarl_edge.data.examples.cartpole_dqn", "quarl_edge.data.docs"]

packages = find_packages(include=["quarl_edge", "quarl_edge.*"],
                         exclude=["quarl_edge.data", "quarl_edge.data.*"])
setup(packages=packages + DATA)
