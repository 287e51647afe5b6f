"""Package discovery, the one part of the build configuration pyproject.toml cannot say: the
quarl_edge packages, and converters/ with every subpackage it has (converters/ops/, ...) under the
name quarl_edge.converters.*, and the data "packages" that pyproject.toml maps into
quarl_edge/data/. Everything else is in pyproject.toml."""
from setuptools import find_packages, setup

CONVERTERS = "quarl_edge.converters"   # pyproject.toml's package-dir maps it to converters/
DATA = ["quarl_edge.data.firmware", "quarl_edge.data.boards",
        "quarl_edge.data.examples.cartpole_dqn", "quarl_edge.data.docs"]

# Some checkouts have quarl_edge/converters as a symlink to ../converters: left out here and
# found once, from converters/ itself, so such a checkout and a fresh clone build the same wheel.
packages = find_packages(include=["quarl_edge", "quarl_edge.*"],
                         exclude=[CONVERTERS, f"{CONVERTERS}.*",
                                  "quarl_edge.data", "quarl_edge.data.*"])
packages += [CONVERTERS, *(f"{CONVERTERS}.{p}" for p in find_packages("converters"))]
setup(packages=packages + DATA)
