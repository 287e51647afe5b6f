"""Where the project's non-Python parts live (firmware/, boards/, examples/).

They sit beside the package in a checkout (the README installs it editable); QUARL_EDGE_HOME
points elsewhere when needed."""
from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    env = os.environ.get("QUARL_EDGE_HOME")
    root = Path(env) if env else Path(__file__).resolve().parents[1]
    if not (root / "firmware" / "core").is_dir():
        from .errors import QuarlError
        raise QuarlError(f"cannot find firmware/ under {root}; install quarl-edge from a checkout "
                         "(pip install -e .) or set QUARL_EDGE_HOME to the checkout")
    return root


def firmware_dir() -> Path:
    return project_root() / "firmware"


def boards_dir() -> Path:
    return project_root() / "boards"


def examples_dir() -> Path:
    return project_root() / "examples"
