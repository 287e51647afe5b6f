"""The results file: one JSON line per finished row, its keys, reading it back, appending to it;
and Results, the rows of a file as the report reads them (the last row per key, grouped).

OUT/results.jsonl gets one JSON object per line, written by the main process only, flushed and
fsync'ed per row, with plain strings and numbers:

    {"kind": "run",  "algo": "dqn", "env": "CartPole-v1", "seed": 0, ...}  training + fp32 Keras
                     return, per-layer weight statistics, weight quantiles (for histograms)
    {"kind": "cell", "algo": "dqn", "env": "CartPole-v1", "seed": 0, "scheme": "int8",
                     "status": "ok" | "skipped" | "error", ...}  return over the eval seeds
                     (tflite-runtime), agreement with fp32, ties, KL (discrete PPO), model size
    {"kind": "sweep", ..., "mode": "weights+activations", "bits": 4, ...}
    {"kind": "board", ..., "scheme": "int8", "board": "mps2-an386",
                     "status": "ok" | "skipped" | "does-not-fit" | "error", ...}  a board cell
                     (run_board_cell): measure/rows.py's BoardCellRow, a bench row (cost_mean
                     in the board's unit, flash/ram/arena/stack bytes, the HIL episodes'
                     returns, matches_reference with TF Lite Micro, matches_tflite_ref with
                     tflite-runtime's reference kernels, agreement with fp32), us_per_inference,
                     bit_exact and validate (measure/validate.py's classes), and where it ran
                     (node, host, pid)
    {"kind": "perop", ..., "scheme": "int8", "board": "mps2-an386", "family": "mlp",
                     "status": "ok" | "does-not-fit" | "error", ...}  a per-op cell
                     (cells.run_perop_cell; plan.perop_plan picks one policy per network
                     family and its board): measure/perop.py's "op" rows as "ops" (slot, op,
                     type, inputs, outputs, macs, cost, share, cost_per_mac) and its "total"
                     row's numbers (sum, whole, overhead, noise, gap, tolerance, within, runs,
                     repeats), in the board's unit

Rows are read with today's keys (measure/rows.py's migrate): a file written before under older
names (a board row's "precision" beside its "scheme") reads as one written now.

A row's key (row_key) is what `--resume` and the report deduplicate on: the report keeps the last
row per key, `--resume` skips every key whose row's status is in STATUS_DONE.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ..core.errors import QuarlError
from ..core.files import check_inside, loads_json, open_append, open_lock, read_own, writing
from ..measure.rows import migrate
from .plan import BOARD_KINDS, Group
from .statistics import normalised_loss

# Rows --resume keeps; "does-not-fit": a board cell whose firmware the board cannot hold
STATUS_DONE = ("ok", "skipped", "does-not-fit")


def row_key(row: dict) -> tuple:
    """The identity of a results row: what --resume and the report deduplicate on."""
    kind = row.get("kind")
    base = (kind, row.get("algo"), row.get("env"), row.get("seed"))
    if kind == "cell":
        return base + (row.get("scheme"),)
    if kind == "sweep":
        return base + (row.get("mode"), row.get("bits"))
    if kind in BOARD_KINDS:
        return base + (row.get("scheme"), row.get("board"))
    return base


def results_file(out: Path) -> Path:
    """OUT/results.jsonl, a study's own file: a symlink there leading out of OUT is refused
    (a study appends to it; --status would show another file's rows)."""
    path = Path(out) / "results.jsonl"
    if path.is_symlink():
        check_inside(path, out, "a study's results file")
    return path


# A results row is a few kB (a board cell's, with its link counts); a line longer than this is
# not one of ours, and is refused before it is parsed.
MAX_LINE = 1 << 20
# The fields a row's key and the study's status read: plain values (a list or an object there
# would be no key), the seconds numbers.
KEY_FIELDS = ("kind", "algo", "env", "seed", "scheme", "mode", "bits", "board", "status")
SECONDS_FIELDS = ("seconds", "wall_seconds")


def read_results(path: Path) -> list[dict]:
    """Rows of a results file, with today's keys (rows.migrate); a last line cut by a kill (no
    newline, not JSON) is ignored. A line that is not a row (malformed or deep JSON, no object,
    a key field that is not a plain value, longer than MAX_LINE) is one QuarlError naming the
    file and the line."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    with path.open("rb") as f:
        for i, raw in enumerate(iter(lambda: f.readline(MAX_LINE + 1), b""), 1):
            where = f"{path}: line {i}"
            if len(raw) > MAX_LINE:
                raise QuarlError(f"{where} is longer than {MAX_LINE:,} bytes: not a results row")
            if not raw.strip():
                continue
            try:
                row = loads_json(raw, where)
            except QuarlError:
                if not raw.endswith(b"\n"):     # the unterminated last line
                    continue
                raise
            rows.append(_checked_row(row, where))
    return rows


def _checked_row(row, where: str) -> dict:
    """`row` with today's keys (rows.migrate), its key fields and seconds of their types."""
    if not isinstance(row, dict):
        raise QuarlError(f"{where} is not a results row (a JSON object), but "
                         f"{type(row).__name__}")
    row = migrate(row)
    for k in KEY_FIELDS:
        v = row.get(k)
        if v is not None and not isinstance(v, (str, int, float)):
            raise QuarlError(f"{where}: '{k}' must be a plain value, not {type(v).__name__}")
    for k in SECONDS_FIELDS:
        v = row.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise QuarlError(f"{where}: '{k}' must be a number, not {type(v).__name__}")
    return row


def latest_rows(rows: list[dict]) -> dict[tuple, dict]:
    """The last row per key (a retried error is replaced by its retry)."""
    out: dict[tuple, dict] = {}
    for r in rows:
        out[row_key(r)] = r
    return out


def _repair_tail(path: Path) -> None:
    """Cut an unterminated last line (a write interrupted by a kill) before appending."""
    data = read_own(path, binary=True)
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    with writing(path):
        os.truncate(path, cut)


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


class Writer:
    """The results file: one JSON line per row, flushed and fsync'ed. A row whose key is
    already finished (in `finished`: done before this run, or written by it with status ok,
    skipped or does-not-fit) is dropped, not written again: a Ray task retried after its worker
    died makes its rows again, and the file holds each once."""

    def __init__(self, path: Path, done: dict, echo: Callable[[dict], None],
                 on_row: Callable[[], None] = lambda: None, finished: set | None = None):
        self.path, self.done, self.echo, self.on_row = path, done, echo, on_row
        self.finished = set(finished or ())
        self.dropped = 0
        _repair_tail(path)
        self.f = open_append(path)

    def write(self, row: dict) -> bool:
        """Append `row`; False (and nothing written) when its key is already finished."""
        key = row_key(row)
        if key in self.finished:
            self.dropped += 1
            return False
        if row.get("status") in STATUS_DONE:
            self.finished.add(key)
        row = jsonable({**row, "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
        with writing(self.path):
            self.f.write(json.dumps(row, separators=(", ", ": ")) + "\n")
            self.f.flush()
            os.fsync(self.f.fileno())
        self.done[row_key(row)] = row
        self.echo(row)
        self.on_row()
        return True

    def fail_group(self, group: Group, reason: str) -> None:
        for key in map(tuple, group.keys):
            if key in self.finished:
                continue
            kind, algo, env_id, seed, *rest = key
            row = {"kind": kind, "study": group.study, "algo": algo, "env": env_id,
                   "seed": seed, "status": "error", "reason": reason}
            if kind == "cell":
                row["scheme"] = rest[0]
            elif kind in BOARD_KINDS:
                row["scheme"], row["board"] = rest
            elif kind == "sweep":
                row["mode"], row["bits"] = rest
            self.write(row)

    def close(self) -> None:
        self.f.close()


def lock(out: Path):
    """Hold OUT/.study.lock (closed: released): one study at a time writes into OUT."""
    import fcntl   # POSIX only: imported where a study runs, not where a report is read
    f = open_lock(out / ".study.lock")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise QuarlError(f"another study is running into {out} (lock {out / '.study.lock'})") from None
    return f


def us_per_inference(cost: float | None, unit: str | None, clock_hz: int | None
                     ) -> tuple[float | None, str | None]:
    """(µs per inference, how it was had): ns are measured (the host's wall clock); cycles and
    instructions become µs at the board's clock (instructions at one per cycle: an
    estimate); None without a clock."""
    if cost is None or unit is None:
        return None, None
    if unit == "ns":
        return cost / 1000.0, "measured"
    if clock_hz and unit in ("cycles", "instructions"):
        return cost / clock_hz * 1e6, ("at the board clock" if unit == "cycles" else
                                       "estimate: one instruction per cycle at the board clock")
    return None, None


# ------------------------------------------------------------------ the rows, for the report
SCHEME_ORDER = ["fp32", "fp16", "dyn-int8", "int8", "int16x8", "int8x4", "qat-int8",
                "qat-int8x4", "qat-distill-int8", "qat-distill-int8x4", "int8-centred", "int8-acc", "int8-centred-acc",
                "int8-i16head"]


def task_of(r: dict) -> tuple[str, str]:
    return r["algo"], r["env"]


def task_name(t: tuple[str, str]) -> str:
    return f"{t[0].upper()} {t[1]}"



def ordered_schemes(cells) -> list[str]:
    present = {r["scheme"] for r in cells}
    return [s for s in SCHEME_ORDER if s in present] + sorted(present - set(SCHEME_ORDER))



class Results:
    """The rows of a results file, deduplicated (last row per key), grouped for the report."""

    def __init__(self, rows: list[dict], bench: list[dict] = ()):
        self.bench = list(bench)      # board rows (bench --episodes JSON lines), as they are
        latest = latest_rows(rows)
        self.all = list(latest.values())
        self.runs = {(r["algo"], r["env"], r["seed"]): r for r in self.all
                     if r["kind"] == "run" and r.get("status") == "ok"}
        self.cells = [r for r in self.all if r["kind"] == "cell"]
        self.ok_cells = [r for r in self.cells if r.get("status") == "ok"]
        self.sweep = [r for r in self.all if r["kind"] == "sweep" and r.get("status") == "ok"]
        self.other = [r for r in self.all if r.get("status") not in ("ok",)
                      and not (r["kind"] in BOARD_KINDS
                               and r.get("status") in ("skipped", "does-not-fit"))]
        boards = [r for r in self.all if r["kind"] == "board"]
        self.board_ok = [r for r in boards if r.get("status") == "ok"]
        self.board_no_fit = [r for r in boards if r.get("status") == "does-not-fit"]
        self.board_skipped = [r for r in boards if r.get("status") == "skipped"]
        perop = [r for r in self.all if r["kind"] == "perop"]
        self.perop_ok = [r for r in perop if r.get("status") == "ok"]
        self.perop_no_fit = [r for r in perop if r.get("status") == "does-not-fit"]
        self.study = next((r.get("study") for r in self.all if r.get("study")), None)
        tasks = {task_of(r) for r in self.all if r["kind"] in ("run", "cell", "sweep")}
        self.tasks = sorted(tasks)

    def run_of(self, r: dict) -> dict | None:
        return self.runs.get((r["algo"], r["env"], r["seed"]))

    def loss(self, r: dict) -> float | None:
        run = self.run_of(r)
        if run is None or run.get("eval_seeds") != r.get("eval_seeds"):
            # a sweep may use other seeds: its own fp32 row is then the reference
            ref = r.get("fp32_return")
            if r["kind"] == "sweep":
                ref = self._sweep_fp32(r)
            return normalised_loss(ref, r.get("mean_return"), run and run.get("random_return"))
        return normalised_loss(run["fp32_return"], r.get("mean_return"), run.get("random_return"))

    def _sweep_fp32(self, r: dict) -> float | None:
        for s in self.sweep:
            if (s["algo"], s["env"], s["seed"], s["mode"]) == (r["algo"], r["env"], r["seed"], "fp32"):
                return s["mean_return"]
        return r.get("fp32_return")

    def learned(self, r: dict) -> bool:
        run = self.run_of(r)
        return bool(run and run.get("random_return") is not None
                    and run["fp32_return"] > run["random_return"])


def episodes_per_seed(res: "Results") -> str:
    """Evaluation episodes per training seed (the greedy policy's fixed test seeds), e.g. "20";
    "20/10" when runs differ, "?" without runs."""
    n = sorted({len(r.get("eval_seeds") or []) for r in res.runs.values()})
    return "/".join(map(str, n)) or "?"
