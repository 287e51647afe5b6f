"""Files that several commands may write at once (two `hil` or `bench` on one run directory,
and the firmware both build into one build folder): every temporary name is unique to its
process (its pid), a file appears whole or not at all (written beside, then renamed), and what
reads then rewrites a shared file holds the folder's lock. A `*.PID.partial` or `*.PID.tmp`
whose process is gone (a killed run) is removed by the next run."""
from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from .errors import QuarlError


def own(path: Path, suffix: str) -> Path:
    """PATH.PID.SUFFIX: this process's temporary name for `path`."""
    return path.with_name(f"{path.name}.{os.getpid()}.{suffix}")


def write_atomic(path: Path, text: str) -> None:
    tmp = own(path, "tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def loads_json(text: str | bytes, what: str, error: type[QuarlError] = QuarlError):
    """json.loads for text from a file a user gave (or a board sent): malformed or nested past
    Python's recursion limit, it is one line naming `what`, not a traceback. The caller checks
    the types of what it reads."""
    try:
        return json.loads(text)
    except RecursionError:
        raise error(f"{what}: JSON nested too deeply to read") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise error(f"{what}: not valid JSON ({str(e)[:120]})") from None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(folder: Path) -> None:
    """Remove the temporary files of processes that no longer run, and the `*.jsonl.partial`
    episode logs of quarl-edge versions before per-process names (a run killed then; no
    version writes that name now)."""
    for p in Path(folder).glob("*.*.*"):
        m = re.fullmatch(r".+\.(\d+)\.(partial|tmp)", p.name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            p.unlink(missing_ok=True)
        elif not m and p.name.endswith(".jsonl.partial"):
            p.unlink(missing_ok=True)


@contextlib.contextmanager
def locked(folder: Path):
    """Hold FOLDER/.quarl-edge.lock (an advisory lock: other quarl-edge processes wait)."""
    with open(Path(folder) / ".quarl-edge.lock", "a") as f:
        try:
            import fcntl
        except ImportError:         # Windows: no fcntl, no lock
            yield
            return
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
