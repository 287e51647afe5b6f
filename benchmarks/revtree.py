"""The files of another revision of this repository, for the benchmarks that run it side by side
with the working tree (train_speed.py and hil_speed.py, `--against REV`)."""
from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tree_of(rev: str, into: Path) -> Path:
    """The files of revision `rev` of this repository, extracted into `into`."""
    tar = into / "rev.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(tar), rev], check=True)
    with tarfile.open(tar) as t:
        t.extractall(into / "tree", filter="data")
    tree = into / "tree"
    link = tree / "quarl_edge" / "converters"   # the package's converters (a link in a checkout)
    if not link.exists() and (tree / "converters").is_dir():
        link.symlink_to("../converters")
    return tree
