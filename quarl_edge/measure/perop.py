"""bench --per-op: where an inference's cost goes, op by op, on the board.

Per (board, scheme) cell, two builds of the same model:
- the normal build (what bench measures): INFER the bench observation, then BENCH `runs`
  times; `whole` is the smallest cost of one inference;
- a per-op build (-DQE_PER_OP, targets/build.py's PER_OP_FLAG: model.c with a mark after every
  kernel call, firmware/core/qe_model.h): INFER the same observation, then PEROP runs the model
  `runs` times and sends each op's smallest cost, counted with the same counter, started
  before qe_model_invoke() as always and read and restarted after each op, so the windows
  tile the run (slot 0 holds the schedule's entry, the "(return)" row its return); and the
  timer's own overhead: the smallest cost of an empty start/stop pair, measured as often.

Each window's cost is its reading less that overhead, so the ops' costs add up to the whole
inference less its one overhead (the whole is read around qe_model_invoke() with the same
pair). What is left (`gap`: code the compiler laid out differently around the marks) is
checked against the overhead, the timer's resolution here: |gap| <= (ops + 1) x overhead on a
board whose counts are exact (instructions, cycles: `noise` 0). Wall time (the host's ns) is
not repeatable: both sides are measured 3 times (`repeats`), each the smallest of `runs`, and
the tolerance adds their spread (`noise`: max - min of the whole's minima plus that of the
ops' sums), which is measured, not assumed.

Rows (OUT/perop.jsonl, one JSON line each): "op" rows (board, scheme, slot, op, type, inputs,
outputs, macs, cost, share, cost_per_mac, unit) and one "total" row per cell (ops, sum,
whole, overhead, gap, tolerance, within). The slots are quarl_edge/converters/perop.py's (perop.json).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..core.errors import QuarlError
from ..core.files import write_atomic
from ..link.session import BoardSession
from ..core.run import Run, tflite_path
from ..targets.boards import Board
from ..targets.build import PER_OP_FLAG
from .bench import _bench_observation, _bench_policy


def _session_costs(s: BoardSession, obs: np.ndarray, runs: int, per_op: bool, repeats: int):
    """INFER the observation, then `repeats` x (PEROP or BENCH of `runs`): a list of
    (overhead, each slot's smallest cost) or of BENCH minima."""
    spec = s.info.inputs[0]
    if spec.dtype != "float32":
        raise QuarlError("bench feeds float observations; the model's input must be float32")
    if obs.size != int(np.prod(spec.shape)):
        obs = np.zeros(spec.shape, np.float32)
    s.link.infer([obs.reshape(spec.shape)])
    return [s.link.perop(runs) if per_op else s.link.bench(runs).min for _ in range(repeats)]


def perop_cell(run_dir: Path, board: Board, scheme: str, runs: int, obs: np.ndarray) -> list[dict]:
    """The "op" rows and the "total" row of one (board, scheme) cell (the module docstring)."""
    bare = run_dir.suffix == ".tflite"
    model = run_dir if bare else tflite_path(run_dir, scheme)
    home = Run(run_dir.parent if bare else run_dir)
    repeats = 3 if board.cost_unit == "ns" else 1    # wall time: its spread is measured
    with BoardSession(model, board, home.build_dir(board.id, scheme, make=False)) as s:
        wholes = _session_costs(s, obs, runs, False, repeats)
        unit = s.info.cost_unit
    with BoardSession(model, board, home.build_dir(board.id, f"{scheme}-perop", make=False),
                      extra_flags=(PER_OP_FLAG,)) as s:
        per = _session_costs(s, obs, runs, True, repeats)
        slots = json.loads((s.out_dir / "gen" / "perop.json").read_text())["slots"] \
            if s.firmware is not None else []
    overhead = min(o for o, _, _ in per)
    raw = [min(c) for c in zip(*(r for _, _, r in per))]
    tail = max(min(t for _, t, _ in per) - overhead, 0)
    sums = [sum(max(c - o, 0) for c in r) + max(t - o, 0) for o, t, r in per]
    whole = min(wholes)
    noise = (max(wholes) - whole) + (max(sums) - min(sums))
    if len(slots) != len(raw):
        raise QuarlError(f"the per-op build of {model.name} on {board.id} timed {len(raw)} ops, "
                         f"its perop.json lists {len(slots)}")
    cost = [max(c - overhead, 0) for c in raw]
    total = sum(cost) + tail
    key = {"board": board.id, "scheme": scheme, "unit": unit}
    rows = [{**key, "kind": "op", **slot, "cost": c, "share": c / total if total else None,
             "cost_per_mac": c / slot["macs"] if slot["macs"] else None}
            for slot, c in zip(slots, cost)]
    rows.append({**key, "kind": "op", "slot": len(cost), "op": None, "type": "(return)",
                 "inputs": [], "outputs": [], "macs": 0, "cost": tail,
                 "share": tail / total if total else None, "cost_per_mac": None})
    gap = total - (whole - overhead)
    tol = (len(cost) + 1) * overhead + noise
    rows.append({**key, "kind": "total", "ops": len(cost), "sum": total, "whole": whole,
                 "overhead": overhead, "noise": noise, "gap": gap, "tolerance": tol,
                 "within": abs(gap) <= tol, "runs": runs, "repeats": repeats})
    return rows


def run_perop(run_dir: Path, boards: list[Board], runs: int = 20, out: Path | None = None,
              env_id: str | None = None) -> list[dict]:
    """Every (board, scheme) cell's per-op rows, written to OUT/perop.jsonl (default
    RUN/results; replaced whole: a per-op table is one bench's). A cell that cannot run is a
    "total" row with its error."""
    run_dir = Path(run_dir)
    meta, schemes, home = _bench_policy(run_dir, 0, env_id)
    obs = _bench_observation(run_dir, meta, home)
    rows: list[dict] = []
    for board in boards:
        for scheme in schemes:
            try:
                rows += perop_cell(run_dir, board, scheme, runs, obs)
            except QuarlError as e:
                rows.append({"board": board.id, "scheme": scheme, "kind": "total",
                             "error": str(e)})
    out = Path(out) if out else Run(home).results_dir(make=False)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "perop.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    return rows
