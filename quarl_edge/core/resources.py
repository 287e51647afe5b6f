"""Where quarl-edge's non-Python parts are: firmware/ (the C sources every build compiles), boards/
(the shipped board files), examples/ (the pretrained run of `quarl-edge demo --pretrained`),
docs/, the simavr bridge's C source; and the folders a user keeps board files of their own in.

firmware/, boards/, examples/ and docs/ are found under the first of these data roots that has
firmware/core/:

1. $QUARL_EDGE_HOME, a directory laid out like a checkout (firmware/, boards/, examples/): e.g. an
   installed quarl-edge building firmware sources of one's own;
2. the installed package data: quarl_edge/data/ inside the installed package, found with
   importlib.resources (a wheel, `pip install .`, carries firmware/, boards/*.toml,
   examples/cartpole_dqn and docs/protocol.md there; see pyproject.toml and setup.py);
3. the checkout the package is imported from (the directory above quarl_edge/: an editable
   install, or PYTHONPATH=checkout), where firmware/ and boards/ sit at the top.

The simavr bridge source is Python-side code (targets/simavr.py speaks its exit codes), so it
always comes with the imported package: quarl_edge/targets/simavr_bridge.c.

User board files (see targets/boards.py, which searches them before the shipped boards/):
$QUARL_EDGE_BOARDS, directories separated by os.pathsep, then
${XDG_CONFIG_HOME:-~/.config}/quarl-edge/boards/."""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from .errors import QuarlError

HOME_ENV = "QUARL_EDGE_HOME"
BOARDS_ENV = "QUARL_EDGE_BOARDS"
PACKAGE_DATA = "data"     # quarl_edge/data/ in an installed package


def _is_root(root: Path) -> bool:
    return (root / "firmware" / "core").is_dir()


def _package_dir(package: str) -> Path | None:
    """The package's directory on disk (None if it is not a plain directory, e.g. zipped)."""
    top = resources.files(package)
    return top if isinstance(top, Path) else None


def data_roots() -> list[tuple[str, Path]]:
    """(what, directory) candidates for the data root, in the order they are tried."""
    env = os.environ.get(HOME_ENV)
    if env:
        return [(f"${HOME_ENV}", Path(env).expanduser())]
    out = []
    pkg = _package_dir("quarl_edge")
    if pkg is not None:
        out.append(("the installed package data", pkg / PACKAGE_DATA))
    out.append(("the checkout", Path(__file__).resolve().parents[2]))
    return out


def project_root() -> Path:
    """The data root: the directory holding firmware/, boards/, examples/ (see the module doc)."""
    tried = data_roots()
    for _, root in tried:
        if _is_root(root):
            return root
    where = "; ".join(f"{what}: {root}" for what, root in tried)
    if os.environ.get(HOME_ENV):
        raise QuarlError(f"cannot find firmware/core under ${HOME_ENV} ({tried[0][1]}); point it "
                         "at a quarl-edge checkout or unset it")
    raise QuarlError(f"cannot find quarl-edge's firmware/ (looked in {where}); reinstall "
                     "quarl-edge (pip install quarl-edge, or pip install -e CHECKOUT) or set "
                     f"{HOME_ENV} to a checkout")


def firmware_dir() -> Path:
    return project_root() / "firmware"


def boards_dir() -> Path:
    """The shipped board files (user ones: user_boards_dirs())."""
    return project_root() / "boards"


def examples_dir() -> Path:
    return project_root() / "examples"


def docs_dir() -> Path:
    return project_root() / "docs"


def simavr_bridge_source() -> Path:
    """quarl_edge/targets/simavr_bridge.c of the imported package (package data in a wheel)."""
    pkg = _package_dir("quarl_edge.targets") or Path(__file__).resolve().parents[1] / "targets"
    return pkg / "simavr_bridge.c"


def config_home() -> Path | None:
    """${XDG_CONFIG_HOME:-~/.config} (a relative XDG_CONFIG_HOME is ignored, as the XDG base
    directory spec says); None when there is no home directory to fall back on."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg)
    try:
        return Path.home() / ".config"
    except RuntimeError:
        return None


def env_boards_dirs() -> list[Path]:
    """The directories of $QUARL_EDGE_BOARDS (os.pathsep-separated; empty entries are skipped)."""
    return [Path(p).expanduser() for p in os.environ.get(BOARDS_ENV, "").split(os.pathsep) if p]


def user_boards_dirs() -> list[Path]:
    """Where a user's own board files are looked for, in order: $QUARL_EDGE_BOARDS, then
    ${XDG_CONFIG_HOME:-~/.config}/quarl-edge/boards/ (which need not exist)."""
    dirs = env_boards_dirs()
    cfg = config_home()
    if cfg is not None:
        dirs.append(cfg / "quarl-edge" / "boards")
    return dirs
