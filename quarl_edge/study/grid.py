"""A QuaRL-style study: a grid of (algo, env, seed, scheme) cells from a TOML file, run in
parallel, resumable, one JSON line per finished cell.

    quarl-edge study CONFIG.toml [--workers N] [--resume] [--json] [--out DIR] [--ray ADDRESS]
    quarl-edge study CONFIG.toml --status [--out DIR] [--workers N] [--json]

run_study is the driver; each step is a module of this package:

    config.py    the TOML file, parsed and checked (its format is there): load_study
    plan.py      the groups of work, one per (algo, env, seed), and the rows each yields
    status.py    --status: how far the grid has come, and an estimate of the time left
    results.py   OUT/results.jsonl: the row format, row keys, reading, appending (Writer)
    cells.py     a group's work in whichever process runs it: training, cells, sweep, boards,
                 per-op cells (one policy per network family: plan.perop_plan)
    pool.py      --workers N: spawned worker processes
    farm.py      --ray ADDRESS: Ray tasks, board cells on the nodes that have the board

`--resume` skips every row already in the file whose status is ok or skipped (errors are tried
again); a last line cut by a kill is dropped. `--redo ALGO/ENV` makes that task's rows again
(after a change to the evaluation), reusing its trained runs; `--redo ALGO/ENV/sSEED` one run's. Without --resume an existing
non-empty results file is refused. The report (report.py) keeps the last row per key.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from ..core.errors import QuarlError
from ..core.files import write_atomic
from .cells import error_reason, quiet, run_group, stale_hyperparameters
from .config import load_study
from .farm import RAY_PIN, check_ray_address, run_ray
from .plan import Group, plan, run_dir_name
from .pool import run_pool
from .results import STATUS_DONE, Writer, latest_rows, lock, read_results, results_file


def _describe(row: dict) -> str:
    what = {"run": "run", "cell": row.get("scheme"),
            "sweep": f"sweep {row.get('mode')} {row.get('bits')} bits",
            "board": f"{row.get('scheme')} on {row.get('board')}",
            "perop": f"per-op {row.get('scheme')} on {row.get('board')}"}.get(row["kind"])
    head = f"{row['algo']:4s} {row['env']:24s} seed {row['seed']}  {what}"
    if row.get("status") != "ok":
        return f"{head}: {row.get('status')} ({row.get('reason')})"
    if row["kind"] == "board":
        us = row.get("us_per_inference")
        return (f"{head}: return {row['mean_return']:.1f} (= TFLM: "
                f"{'yes' if row.get('matches_reference') else 'NO'}, = tflite-runtime ref. "
                f"kernels: {'yes' if row.get('matches_tflite_ref') else 'NO'}), agree "
                f"{row['agreement']:.3f}, {row['cost_mean']:,.0f} {row['unit']}"
                + (f" (~{us:,.1f} µs)" if us is not None else "")
                + f", flash {row.get('flash_bytes') or 0:,} B, bit-exact "
                f"{'yes' if row.get('bit_exact') else 'NO'}")
    if row["kind"] == "perop":
        top = max(row["ops"], key=lambda o: o["cost"])
        return (f"{head}: {len(row['ops']) - 1} ops, whole {row['whole']:,} {row['unit']}, "
                f"largest #{top['slot']} {top['type']} {100 * (top['share'] or 0):.1f} %, "
                f"sum {'within' if row['within'] else 'NOT within'} the timer's tolerance")
    if row["kind"] == "run":
        return f"{head}: fp32 return {row['fp32_return']:.1f} (validation {row.get('best_validation_return')})"
    extra = f", agree {row['agreement']:.3f}" if row.get("agreement") is not None else ""
    if row.get("kl") is not None:
        extra += f", KL {row['kl']:.2e}"
    if row.get("size_bytes"):
        extra += f", {row['size_bytes']:,} B"
    return f"{head}: return {row['mean_return']:.1f}{extra}"


def run_study(config: Path, out: Path | None = None, workers: int = 1, resume: bool = False,
              ray_address: str | None = None, echo: Callable[[str], None] | None = None,
              redo: list[str] = (), progress: bool = False) -> dict:
    """Run (or resume) the study in `config`; returns a summary dict. `redo` names tasks
    ("algo/env") whose rows are made again; their trained runs are reused. `echo` gets one
    line per event and finished row; `progress` draws a bar over the rows on stderr."""
    study = load_study(config)
    tasks = {f"{t.algo}/{t.env}" for t in study.tasks}
    runs = {f"{t.algo}/{t.env}/s{seed}" for t in study.tasks for seed in t.seeds}
    unknown = sorted(set(redo) - tasks - runs)
    if unknown:
        raise QuarlError(f"--redo {', '.join(unknown)}: not a task (or task/sSEED run) of "
                         f"{study.name}; its tasks: "
                         f"{', '.join(sorted(tasks))}")
    out = Path(out) if out else Path("results") / study.name
    if workers < 1:
        raise QuarlError(f"--workers must be >= 1, got {workers}")
    ray = _import_ray(ray_address) if ray_address else None
    out.mkdir(parents=True, exist_ok=True)
    results = results_file(out)
    prior = read_results(results)
    if prior and not resume:
        raise QuarlError(f"{results} already holds {len(prior)} rows: use --resume to continue "
                         "it, or another --out")
    held = lock(out)
    try:
        if study.path.resolve() != (out / "study.toml").resolve():
            # what the results were made with
            write_atomic(out / "study.toml", study.path.read_bytes())
        groups = plan(study)
        say = echo or (lambda s: None)
        if redo:
            say(f"redo: the rows of {', '.join(sorted(set(redo)))} are made again")
        done = rows_done(latest_rows(prior), groups, out, redo, say)
        todo = [g for g in groups if any(tuple(k) not in done for k in g.keys)]
        keys = [tuple(k) for g in groups for k in g.keys]
        say(f"study {study.name}: {len(groups)} runs, {len(keys)} rows; "
            f"{sum(k in done for k in keys)} done, {len(todo)} runs to do; results in {results}")
        bar = tqdm(total=sum(k not in done for k in keys), desc=f"study {study.name}",
                   unit="row", disable=not progress, leave=False)
        if progress and echo is not None:    # lines above the bar, not through it
            say = lambda s: bar.write(s, file=sys.stdout)  # noqa: E731
        writer = Writer(results, dict(latest_rows(prior)), lambda r: say(_describe(r)),
                        on_row=lambda: bar.update(1), finished=set(done))
        t0 = time.perf_counter()
        try:
            _run_groups(todo, out, set(done), workers, ray, ray_address, writer, say)
        finally:
            writer.close()
            bar.close()
        return _summary(study.name, results, groups, t0)
    finally:
        held.close()


def _import_ray(address: str):
    """The ray module for --ray ADDRESS (the optional `ray` extra), once the address answers."""
    try:
        import ray   # optional: the ray extra, only for --ray
    except ImportError:
        raise QuarlError(f"install {RAY_PIN} to use --ray (pip install {RAY_PIN}, or "
                         "pip install -e '.[ray]')") from None
    check_ray_address(address)
    return ray


def _run_groups(todo: list[Group], out: Path, done: set, workers: int, ray, ray_address,
                writer: Writer, say: Callable[[str], None]) -> None:
    """The groups to do on Ray, in this process (one worker) or on a pool of processes."""
    if not todo:
        return
    if ray is not None:
        run_ray(ray, ray_address, todo, out, done, writer, say)
    elif workers == 1:
        quiet()
        for g in todo:
            try:
                run_group(g, out, done, writer.write, say)
            except Exception as e:  # as in the workers: the run's rows become errors
                writer.fail_group(g, error_reason(e))
    else:
        run_pool(todo, out, done, workers, writer, say)


def _summary(name: str, results: Path, groups: list[Group], t0: float) -> dict:
    """What run_study returns: the number of rows the plan wants, by status, as in the file,
    and the seconds since `t0`."""
    rows = latest_rows(read_results(results))
    want = {tuple(k) for g in groups for k in g.keys}
    status = {}
    for k in want:
        s = rows.get(k, {}).get("status", "missing")
        status[s] = status.get(s, 0) + 1
    return {"study": name, "results": str(results), "rows": len(want),
            "status": status, "seconds": round(time.perf_counter() - t0, 1)}


def rows_done(rows: dict, groups: list[Group], out: Path, redo, say: Callable[[str], None]
              ) -> dict:
    """The rows (key -> latest row) a run of the study skips: status ok, skipped or
    does-not-fit, less those forget_rows makes again. `study` and `study --status` both ask."""
    done = {k: r for k, r in rows.items() if r.get("status") in STATUS_DONE}
    forget_rows(groups, out, done, redo, say)
    return done


def forget_rows(groups: list[Group], out: Path, done: dict, redo, say: Callable[[str], None]
                ) -> None:
    """Drop from `done` the rows to make again: those of the tasks and runs named in `redo`
    ("algo/env", "algo/env/sSEED"), and those of every run trained with other hyperparameters
    than its group would train now (the run is then retrained)."""
    for g in groups:
        if f"{g.algo}/{g.env}" not in redo and f"{g.algo}/{g.env}/s{g.seed}" not in redo:
            changed = stale_hyperparameters(out / "runs" / run_dir_name(g.algo, g.env, g.seed), g)
            if not changed or not any(tuple(k) in done for k in g.keys):
                continue
            diffs = ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items())
            say(f"{g.algo} {g.env} seed {g.seed}: trained with other hyperparameters "
                f"({diffs}): retrained, its rows redone")
        for k in g.keys:
            done.pop(tuple(k), None)
