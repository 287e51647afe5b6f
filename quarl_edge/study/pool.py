"""The process pool of `quarl-edge study --workers N`: one group at a time per worker process.

Workers are spawned processes (multiprocessing "spawn" context) that die with the main process
(Linux PR_SET_PDEATHSIG), so a killed study leaves no process writing behind it.
Only the main process writes the results file: the workers send their rows back on a queue.
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import sys
from pathlib import Path
from typing import Callable

from ..core.errors import QuarlError
from .cells import error_reason, limit_threads, quiet, run_group
from .plan import Group
from .results import Writer


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies (prctl PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except OSError:
            pass


def _worker(tasks, results, out: str, done: list, threads: int, parent: int) -> None:
    _die_with_parent()
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    quiet()
    limit_threads(threads)
    done_set = {tuple(k) for k in done}
    while True:
        group = tasks.get()
        if group is None:
            return
        gid = (group.algo, group.env, group.seed)
        try:
            run_group(group, Path(out), done_set, lambda row: results.put(("row", row)),
                      lambda msg: results.put(("log", msg)))
        except Exception as e:  # a failed training: its pending rows are errors
            results.put(("fail", gid, error_reason(e)))
        results.put(("done", gid))


def run_pool(todo: list[Group], out: Path, done: set, workers: int, writer: Writer,
             say: Callable[[str], None]) -> None:
    """The groups `todo` on `workers` spawned processes (at most one per group); their rows go
    through `writer`, a group whose training failed or whose worker died becomes error rows."""
    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    n = min(workers, len(todo))
    threads = max(1, (os.cpu_count() or 1) // n)
    for g in todo:  # in the config's order
        tasks.put(g)
    for _ in range(n):
        tasks.put(None)
    procs = [ctx.Process(target=_worker, args=(tasks, results, str(out), sorted(done, key=str),
                                               threads, os.getpid()), daemon=True)
             for _ in range(n)]
    for p in procs:
        p.start()
    by_id = {(g.algo, g.env, g.seed): g for g in todo}
    finished = 0
    try:
        while finished < len(todo):
            try:
                msg = results.get(timeout=2.0)
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs):
                    for gid, g in by_id.items():
                        writer.fail_group(g, "worker process died")
                    raise QuarlError("all study workers died; see the rows marked error")
                continue
            if msg[0] == "row":
                writer.write(msg[1])
            elif msg[0] == "log":
                say(msg[1])
            elif msg[0] == "fail":
                writer.fail_group(by_id[msg[1]], msg[2])
            elif msg[0] == "done":
                by_id.pop(msg[1], None)
                finished += 1
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
