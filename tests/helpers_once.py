"""Build something once per test run, even when several test modules need it and pytest-xdist
runs them on different workers (a module fixture builds once per module)."""
from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Callable


def once_per_run(tmp_path_factory, worker_id: str, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `name` of this test run, filled by `make(folder)` the first time it is asked
    for. Under pytest-xdist the workers share the run's base folder (as conftest.object_cache
    does), and a lock makes a second module or worker wait for the first one's `make` instead
    of making it again. If `make` fails (or skips), the next caller tries again."""
    base = tmp_path_factory.getbasetemp()
    d = (base if worker_id == "master" else base.parent) / name
    d.mkdir(exist_ok=True)
    with open(d / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (d / ".done").is_file():
            make(d)
            (d / ".done").touch()
    return d
