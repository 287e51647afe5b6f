"""Writing into run, build and results folders: the one way every stage writes a file there.

- A file appears whole or not at all: it is written to a temporary name beside it, unique to
  its process (PATH.PID.tmp; own()), then renamed over PATH (write_atomic, atomic_open for a
  writer that wants a file object, atomic_path for one that wants a path: a compiler's -o).
  The rename replaces whatever stood at PATH, a symlink someone planted included: no write
  follows a link quarl-edge did not make. Temporary and partial files are created with
  O_CREAT|O_EXCL|O_NOFOLLOW (open_new), so a link planted at a temporary name is not
  followed either.
- A full or read-only disk (ENOSPC, EDQUOT, EFBIG, EROFS, EACCES) is one line naming the path
  and the free space on its file system (DiskError, exit 2); the previous file is kept and
  the temporary one removed.
- What reads then rewrites a shared file holds the folder's lock (locked; two `hil` or
  `bench` on one run directory, two builds into one build folder); the files quarl-edge reads
  back from its own folders (read_own) and the lock file are refused when they are symlinks
  that lead out of their folder.
- A `*.PID.partial` or `*.PID.tmp` whose process is gone (a killed run) is removed by the next
  run (remove_stale)."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import threading
from pathlib import Path

from .errors import QuarlError

# What a write may meet on a full, over-quota, too-small or read-only file system.
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}


class DiskError(QuarlError):
    """A file could not be written: the disk is full or read-only (the previous file is kept)."""


def own(path: Path, suffix: str, thread: bool = False) -> Path:
    """PATH.PID.SUFFIX: this process's temporary name for `path` (PATH.TID.PID.SUFFIX with
    `thread`, for writers in several threads of one process)."""
    tid = f"{threading.get_ident()}." if thread else ""
    return path.with_name(f"{path.name}.{tid}{os.getpid()}.{suffix}")


def _free(path: Path) -> str:
    """The free space of the file system holding `path` (or of its nearest existing folder)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        free = shutil.disk_usage(p).free
    except OSError:
        return "free space unknown"
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if free >= size:
            return f"{free / size:.1f} {unit} free"
    return f"{free} B free"


def disk_error(path: Path | None, e: OSError, writing: bool = True) -> DiskError:
    """The one line for an OSError of DISK_ERRNOS while writing `path` (None: unknown, then
    the free space is the current folder's; `writing` False: it may have been a read too)."""
    why = e.strerror or os.strerror(e.errno or 0)
    if not writing:
        return DiskError(f"{path or 'a file'}: {why} ({_free(Path(path or '.'))} on its file "
                         "system)")
    what = f"cannot write {path}" if path else "a write failed"
    return DiskError(f"{what}: {why} ({_free(Path(path or '.'))} on its file system); "
                     "the previous file is kept")


@contextlib.contextmanager
def writing(path: Path):
    """Turns an OSError of DISK_ERRNOS inside the block into DiskError naming `path`; a
    symlink met where none may be (ELOOP) into a QuarlError."""
    try:
        yield
    except OSError as e:
        if e.errno in DISK_ERRNOS:
            raise disk_error(path, e) from None
        if e.errno == errno.ELOOP:
            raise QuarlError(f"{path}: a symlink where quarl-edge writes its own file: "
                             "refused (remove it)") from None
        raise


def open_new(path: Path, mode: str = "w"):
    """A new file at `path` for writing (mode "w" or "wb"), created by this call: a file or
    link already there (a stale temporary, a planted symlink) is removed first, never
    followed (O_EXCL|O_NOFOLLOW)."""
    path = Path(path)
    with writing(path):
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o666)
        return os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))


def fresh(path: Path) -> Path:
    """`path` made free for a writer that creates it by name (Keras's save, TF's SavedModel
    writer): a file or a symlink there is removed (a link planted there is not written
    through), a folder there with what is in it. Returns `path`."""
    import shutil
    path = Path(path)
    with writing(path):
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
    return path


def open_append(path: Path):
    """`path` opened to append text (created if missing); a symlink there is refused."""
    path = Path(path)
    with writing(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                     | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o666)
        return os.fdopen(fd, "a", encoding="utf-8")


@contextlib.contextmanager
def atomic_path(path: Path, thread: bool = False):
    """A temporary path beside `path` (nothing there) for a writer that takes a path; renamed
    to `path` when the block ends without an error, removed in any case."""
    path = Path(path)
    tmp = own(path, "tmp", thread)
    try:
        with writing(path):
            tmp.unlink(missing_ok=True)
            yield tmp
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "w"):
    """A file object for writing `path` whole (np.save, savefig, a zip): it goes to a
    temporary file, renamed to `path` when the block ends without an error."""
    path = Path(path)
    with atomic_path(path) as tmp:
        with writing(path), open_new(tmp, mode) as f:
            yield f


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` whole (see the module's docstring)."""
    with atomic_open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def write_npy(path: Path, array=None, /, **arrays) -> None:
    """numpy's .npy of `array` (or .npz of `arrays`) written whole: made in memory first, as
    numpy's own file writer loses the error (errno) of a full disk."""
    import io

    import numpy as np
    buf = io.BytesIO()
    if array is not None:
        np.save(buf, array)
    else:
        np.savez(buf, **arrays)
    write_atomic(path, buf.getvalue())


def check_inside(path: Path, folder: Path, what: str) -> Path:
    """`path`, when it resolves (after symlinks) inside `folder`; else a QuarlError: a file a
    run or a download names must not lead out of its folder."""
    real, home = os.path.realpath(path), os.path.realpath(folder)
    if os.path.commonpath([real, home]) != home:
        raise QuarlError(f"{what}: {path} leads outside {folder} (to {real}): refused")
    return Path(path)


def subdir(home: Path, *parts: str) -> Path:
    """HOME/PARTS..., made if missing: a folder quarl-edge writes in inside a run directory
    (models/, build/..., results/), refused when a symlink there leads out of HOME."""
    path = Path(home)
    for part in parts:      # one level at a time: a link is checked before anything is made
        path = path / part
        if path.is_symlink():
            check_inside(path, home, "a folder quarl-edge writes in")
        with writing(path):
            if not path.is_symlink():      # (mkdir would create a dangling link's target)
                path.mkdir(exist_ok=True)
        if not path.is_dir():
            raise QuarlError(f"{path}: not a folder (quarl-edge writes its files there)")
    return path


def read_own(path: Path, binary: bool = False) -> str | bytes | None:
    """The text (bytes) of a file quarl-edge wrote in its folder, None when there is none; a
    symlink there that leads out of the folder is refused, not followed."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    if path.is_symlink():
        check_inside(path, path.parent, "a file quarl-edge writes")
    if not path.is_file():
        return None
    return path.read_bytes() if binary else path.read_text()


def loads_json(text: str | bytes, what: str, error: type[QuarlError] = QuarlError):
    """json.loads for text from a file a user gave (or a board sent): malformed or nested past
    Python's recursion limit, it is one line naming `what`, not a traceback. The caller checks
    the types of what it reads."""
    try:
        return json.loads(text)
    except RecursionError:
        raise error(f"{what}: JSON nested too deeply to read") from None
    except UnicodeDecodeError as e:
        raise error(f"{what}: not UTF-8 text (byte {e.start})") from None
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
        if p.is_dir() and not p.is_symlink():
            continue
        m = re.fullmatch(r".+\.(\d+)\.(partial|tmp)", p.name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            p.unlink(missing_ok=True)
        elif not m and p.name.endswith(".jsonl.partial"):
            p.unlink(missing_ok=True)


LOCK_NAME = ".quarl-edge.lock"


def open_lock(path: Path):
    """A lock file opened (created if missing) without following a symlink (one that stays in
    its folder is followed; one that leads out is refused)."""
    path = Path(path)
    if path.is_symlink():
        check_inside(path, path.parent, "a lock file")
        return open_append(path.resolve())
    return open_append(path)


@contextlib.contextmanager
def locked(folder: Path):
    """Hold FOLDER/.quarl-edge.lock (an advisory lock: other quarl-edge processes wait)."""
    with open_lock(Path(folder) / LOCK_NAME) as f:
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
