"""How far a study's grid has come, read from OUT/results.jsonl without running anything:

    quarl-edge study CONFIG.toml --status [--out DIR] [--workers N] [--json]

Per task: the runs whose rows are all done, the rows done, and the worker time a finished run
took (its training's wall time plus the seconds of each of its cells). A run trained with other
hyperparameters than the study would use now counts as not done, as `--resume` would redo it.

The time left is an estimate from those figures: each unfinished run costs its task's mean
worker time per finished run, less what its finished cells already took, and `workers`
processes share the work evenly. A task without a finished run has no figure, and is named
instead of guessed. A grid of several hours spread over `--resume` runs is what this is for.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core.files import open_lock
from .config import load_study
from .grid import rows_done
from .plan import Group, plan
from .results import latest_rows, read_results, results_file


@dataclass
class TaskStatus:
    """One task of the study: (algo, env) over its seeds."""
    algo: str
    env: str
    runs: int                       # training seeds in the study
    runs_done: int                  # of them, with every row done
    rows: int
    rows_done: int
    errors: int                     # error rows, tried again by --resume
    run_seconds: float | None       # mean worker seconds of a finished run (None: none yet)
    seconds_left: float | None      # worker seconds its unfinished runs still need (None: unknown)


@dataclass
class StudyStatus:
    study: str
    results: str
    workers: int
    rows: int
    rows_done: int
    runs: int
    runs_done: int
    running: bool                   # a study holds OUT's lock now
    tasks: list[TaskStatus] = field(default_factory=list)
    redone: list[str] = field(default_factory=list)   # why done rows will be made again

    @property
    def seconds_left(self) -> float | None:
        """Wall seconds left on `workers` processes, for the tasks with a figure (None: no
        task has one)."""
        known = [t.seconds_left for t in self.tasks if t.seconds_left is not None]
        return sum(known) / self.workers if known else None

    @property
    def unknown(self) -> list[str]:
        """The unfinished tasks without a finished run, so without a time figure."""
        return [f"{t.algo} {t.env}" for t in self.tasks
                if t.seconds_left is None and t.runs_done < t.runs]


def _worker_seconds(group: Group, rows: dict) -> float:
    """The worker seconds a run's finished rows took: the training's wall time (run row) plus
    each cell's seconds."""
    total = 0.0
    for k in group.keys:
        r = rows.get(tuple(k), {})
        total += float(r.get("wall_seconds") or r.get("seconds") or 0.0)
    return total


def study_status(config: Path, out: Path | None = None, workers: int = 1) -> StudyStatus:
    """The progress of the study in `config` in `out` (default results/<study name>)."""
    study = load_study(config)
    out = Path(out) if out else Path("results") / study.name
    results = results_file(out)
    rows = latest_rows(read_results(results))
    groups = plan(study)
    redone: list[str] = []
    done = rows_done(rows, groups, out, (), redone.append)
    tasks = []
    for t in study.tasks:
        mine = [g for g in groups if (g.algo, g.env) == (t.algo, t.env)]
        keys = [tuple(k) for g in mine for k in g.keys]
        # per run: (worker seconds of its done rows, whether all its rows are done)
        spent = [(_worker_seconds(g, done), all(tuple(k) in done for k in g.keys)) for g in mine]
        finished = [sec for sec, whole in spent if whole]
        per_run = sum(finished) / len(finished) if finished else None
        left = (None if per_run is None else
                sum(max(per_run - sec, 0.0) for sec, whole in spent if not whole))
        tasks.append(TaskStatus(
            t.algo, t.env, len(mine), len(finished), len(keys), sum(k in done for k in keys),
            sum(rows.get(k, {}).get("status") == "error" for k in keys),
            None if per_run is None else round(per_run, 1),
            None if left is None else round(left, 1)))
    return StudyStatus(
        study.name, str(results), workers, sum(t.rows for t in tasks),
        sum(t.rows_done for t in tasks), sum(t.runs for t in tasks),
        sum(t.runs_done for t in tasks), _running(out), tasks, redone)


def _running(out: Path) -> bool:
    """Whether a study holds OUT/.study.lock: a shared lock, taken and let go at once, fails
    only while a study's exclusive one is held. (A study starting in that instant would be told
    another one is running; the window is the two calls below.)"""
    import fcntl   # POSIX only, as the study's lock
    path = out / ".study.lock"
    if not path.is_file():
        return False
    with open_lock(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False
