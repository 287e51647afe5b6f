"""A group's work: train (or reuse) one run and make its rows, the run row, one cell per scheme,
the n-bit sweep points, the board cells (run_board_cell) and the per-op cells (run_perop_cell).

A *run* is one training of (algo, env, seed), cached in OUT/runs/<algo>-<env>-s<seed>/ and reused
by all its schemes and sweep points: the cells of one run form a group, and a group is the unit
of work of a worker, so the same run is never trained twice concurrently. A run directory is
reused when its run.json records the same training budget and options; a training killed before
it wrote run.json is redone. A run whose run.json hyperparameters differ from what the study
would train now (the tuned DEFAULTS of quarl_edge/rl/defaults.py changed since) is retrained, and
`--resume` redoes all its rows: rows of a policy that no longer exists are not kept as current.

The functions here run in whichever process does the work (the study's own, a pool worker, a Ray
task); they hand each row to `emit` and never write the results file.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .. import pipeline
from ..core.errors import QuarlError
from ..core.files import write_npy
from ..measure.episodes import Fp32Episodes
from ..measure.reference import tflite_runner
from ..core.noise import quiet_third_party
from ..quant import remedies
from ..quant.nbit import nbit_sweep
from ..core.envs import default_head, make_gym, play_batched
from ..rl.qat import distill_log_name
from ..rl.train import config_changes, resolve_config
from ..core.nets import keras_runner, ppo_action_std, weighted_layers
from ..core.run import Run, load_keras, load_run
from ..targets.boards import get_board
from .analysis import (batch_runner, evaluate_runner, gaussian_policy_kl, policy_kl,
                       random_policy_return, weight_quantiles, weight_stats)
from .plan import BOARD_KINDS, DISTILL_SCHEMES, QAT_SCHEMES, Group, family, not_applicable, run_dir_name
from .results import jsonable, latest_rows, read_results, results_file, us_per_inference


STUDY_TRAIN = "study-train.json"    # RUN/study-train.json: the training budget a study asked for


def _train_matches(run_dir: Path, group: Group) -> bool:
    if not Run(run_dir).is_run() or not (run_dir / STUDY_TRAIN).is_file():
        return False
    try:
        want = json.loads((run_dir / STUDY_TRAIN).read_text())
    except json.JSONDecodeError:
        return False
    return want == _train_spec(group) and not stale_hyperparameters(run_dir, group)


def stale_hyperparameters(run_dir: Path, group: Group) -> dict[str, tuple]:
    """{field: (trained with, would train now)} for a run directory that has a run.json; empty
    when it matches the group's resolved training config or has no run.json."""
    try:
        saved = json.loads(Run(run_dir).meta_path.read_text())["hyperparameters"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return {}
    return config_changes(saved, resolve_config(group.algo, group.env, group.task.steps,
                                                **group.task.options))


def _train_spec(group: Group) -> dict:
    return jsonable({"algo": group.algo, "env": group.env, "seed": group.seed,
                     "steps": group.task.steps, "options": group.task.options})


def limit_threads(threads: int) -> None:
    import tensorflow as tf   # heavy: only in a process that trains or quantizes
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # TF already initialised in this process
        pass


def quiet() -> None:
    """A worker's (or the single-process study's) third-party output: errors only; the rows
    and the study's own log are what it reports."""
    quiet_third_party()
    warnings.filterwarnings("ignore")


def error_reason(e: Exception) -> str:
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return first if isinstance(e, QuarlError) else f"{type(e).__name__}: {first}"


def run_group(group: Group, out: Path, done: set, emit: Callable[[dict], None],
              log: Callable[[str], None] = lambda s: None, boards: bool = True) -> None:
    """Train (or reuse) one run and produce its pending rows, calling emit(row) per row.
    `boards`: also its board and per-op cells, after every other row (on Ray they are tasks of
    their own, scheduled onto the nodes that have the board: see farm.run_ray)."""
    algo, env_id, seed = group.algo, group.env, group.seed
    base = {"study": group.study, "algo": algo, "env": env_id, "seed": seed}
    pending = [k for k in map(tuple, group.keys) if k not in done]
    board_keys = [k for k in pending if k[0] in BOARD_KINDS]
    pending = [k for k in pending if k[0] not in BOARD_KINDS]
    run_dir = Path(out) / "runs" / run_dir_name(algo, env_id, seed)
    if pending:
        run = _train_or_reuse(group, run_dir, log)
        if ("run", algo, env_id, seed) in pending:
            emit(_run_row(group, run, base))
        elif not run.cached:
            _check_retrained(group, run, out, log)
        _scheme_cells(group, run, pending, base, emit)
        _sweep_points(group, run, pending, base, emit)
    if boards:
        for k in board_keys:
            emit(run_on_board(group, k, out))


def _check_retrained(group: Group, run: "_Run", out: Path, log: Callable[[str], None]) -> None:
    """A run trained again whose run row was done before (its directory was gone): say so when
    the policy is not the recorded one (its best validation return or its weights' statistics
    differ: training that is not deterministic, e.g. SAC's or a CNN's on TensorFlow's CPU
    kernels), since the run's earlier rows are then of another policy than its new ones."""
    prior = latest_rows(read_results(results_file(out))).get(
        ("run", group.algo, group.env, group.seed))
    if prior is None:
        return
    same = (prior.get("best_validation_return") == run.info.get("best_greedy_return")
            and prior.get("weights") == json.loads(json.dumps(jsonable(run.stats))))
    if not same:
        log(f"{group.algo} {group.env} seed {group.seed}: retrained, and not the recorded policy "
            f"(best validation return {run.info.get('best_greedy_return')} against "
            f"{prior.get('best_validation_return')}): its earlier rows are of the other one; "
            f"make them again with --redo {group.algo}/{group.env}/s{group.seed}")


def run_on_board(group: Group, key: tuple, out: Path) -> dict:
    """The row of one of a group's board keys (plan.BOARD_KINDS): a board cell or a per-op
    cell. Never raises (the two functions' rule)."""
    kind, _, _, _, scheme, board_id = key
    cell = run_perop_cell if kind == "perop" else run_board_cell
    return cell(group, scheme, board_id, out)


@dataclass
class _Run:
    """What a group's rows share: the trained run and its fp32 network, played greedily on the
    evaluation seeds (returns, and the states it visited)."""
    dir: Path
    cached: bool             # reused, not trained by this study run
    info: dict               # run.json
    train_wall: float
    layers: list             # the weighted layers (MLPs and CNNs: the kernels' statistics)
    reference: Callable      # the fp32 Keras network, as a batch runner
    argmax_head: bool        # discrete actions
    logits: bool             # discrete PPO exports logits
    action_std: np.ndarray | None   # continuous PPO: the std the network does not compute
    ref_returns: list
    states: np.ndarray
    stats: dict              # weight_stats of the layers

    @property
    def ref_mean(self) -> float:
        return float(np.mean(self.ref_returns))


def _train_or_reuse(group: Group, run_dir: Path, log: Callable[[str], None]) -> _Run:
    algo, env_id, seed = group.algo, group.env, group.seed
    t0 = time.perf_counter()
    cached = _train_matches(run_dir, group)
    if not cached:
        log(f"train {algo} {env_id} seed {seed} ({group.task.steps or 'default'} steps)")
        if run_dir.exists():
            shutil.rmtree(run_dir)
        pipeline.train(env_id, algo, run_dir, steps=group.task.steps, seed=seed,
                       progress=False, **group.task.options)
        Run(run_dir).write(STUDY_TRAIN, json.dumps(_train_spec(group)) + "\n")
    info = load_run(run_dir)
    train_wall = time.perf_counter() - t0
    model = load_keras(run_dir)
    layers = weighted_layers(model)
    reference = keras_runner(model)
    argmax_head = hasattr(make_gym(env_id).action_space, "n")
    logits = algo == "ppo" and argmax_head
    action_std = None if logits or algo != "ppo" else ppo_action_std(run_dir)
    ref_returns, states = play_batched(env_id, reference, group.task.eval_seeds, record=True)
    return _Run(run_dir, cached, info, train_wall, layers, reference, argmax_head, logits,
                action_std, ref_returns, states, weight_stats(layers))


def _run_row(group: Group, run: _Run, base: dict) -> dict:
    """The run row: training, the fp32 network's return, its weights."""
    algo, eval_seeds, info = group.algo, group.task.eval_seeds, run.info
    return {"kind": "run", **base, "status": "ok", "steps": info.get("steps"),
            "cached": run.cached, "train_seconds": info.get("train_seconds"),
            "wall_seconds": round(run.train_wall, 2),
            "best_validation_return": info.get("best_greedy_return"),
            "eval_seeds": list(eval_seeds), "fp32_return": run.ref_mean,
            "fp32_std_return": float(np.std(run.ref_returns)),
            "returns": [float(r) for r in run.ref_returns],
            "random_return": random_policy_return(group.env, eval_seeds),
            "n_params": int(sum(k.size + b.size for k, b, _ in run.layers)),
            "output": "logits" if run.logits else ("q_values" if algo == "dqn" else "action"),
            "weights": run.stats, "weight_quantiles": weight_quantiles(run.layers),
            "hyperparameters": info.get("hyperparameters"), "run_dir": str(run.dir)}


def _scheme_cells(group: Group, run: _Run, pending: list, base: dict,
                  emit: Callable[[dict], None]) -> None:
    """One cell row per pending scheme: skipped where the scheme does not apply, an error row
    where it failed (the run's other cells go on)."""
    algo, env_id, seed = group.algo, group.env, group.seed
    summary = {"weight_range": run.stats["all"]["range"], "weight_std": run.stats["all"]["std"],
               "weight_kurtosis": run.stats["all"]["kurtosis"]}
    for scheme in group.task.schemes:
        if ("cell", algo, env_id, seed, scheme) not in pending:
            continue
        row = {"kind": "cell", **base, "scheme": scheme}
        reason = not_applicable(scheme, algo, env_id, run.argmax_head)
        if reason:
            emit({**row, "status": "skipped", "reason": reason})
            continue
        t1 = time.perf_counter()
        try:
            res, size = _scheme_cell(group, run, scheme)
            emit({**row, "status": "ok", **res, "fp32_return": run.ref_mean,
                  "eval_seeds": list(group.task.eval_seeds), "size_bytes": size,
                  **summary, "seconds": round(time.perf_counter() - t1, 2),
                  "run_dir": str(run.dir)})
        except Exception as e:  # this scheme failed; the run's other cells go on
            emit({**row, "status": "error", "reason": error_reason(e)})


def _scheme_cell(group: Group, run: _Run, scheme: str) -> tuple[dict, int]:
    """Quantize the run with `scheme` and play it on the evaluation seeds: (the cell's numbers,
    the model's size in bytes)."""
    task = group.task
    path = _quantize(group, run.dir, scheme)
    if remedies.readout_metadata(path) == remedies.READOUT_ACCUMULATORS:   # int8-acc
        runner = batch_runner(remedies.accumulator_runner(path))
    elif scheme == "int8-i16head":
        calibration = Run(run.dir).load_calibration()
        runner = batch_runner(remedies.int16_head_runner(path, calibration))
    else:
        runner = batch_runner(tflite_runner(path))
    res = evaluate_runner(group.env, runner, task.eval_seeds, run.reference, run.states)
    kl = None
    if run.logits:
        kl = policy_kl(run.reference(run.states), runner(run.states))
    elif run.action_std is not None:
        kl = gaussian_policy_kl(run.reference(run.states), runner(run.states), run.action_std)
    if scheme in DISTILL_SCHEMES:   # the distillation's log, in brief
        log_ = json.loads((run.dir / distill_log_name(DISTILL_SCHEMES[scheme])).read_text())
        res["distill"] = {k: log_[k] for k in (
            "loss", "env_steps", "rounds", "seconds", "best_round",
            "best_validation_return", "teacher_validation_return")}
    return {**res, "kl": kl}, path.stat().st_size


def _quantize(group: Group, run_dir: Path, scheme: str) -> Path:
    """Quantize the run with `scheme` as its cell does (the task's calibration size, QAT and
    distillation options); the readout remedies run the int8 model with another readout of its
    head, so they make that. The model's path."""
    task = group.task
    qat = ({"steps": task.qat_steps, **task.qat} if scheme in QAT_SCHEMES
           else None)
    distill = None
    if scheme in DISTILL_SCHEMES:
        distill = dict(task.distill)
        if task.distill_steps is not None:
            distill["steps"] = task.distill_steps
    return pipeline.quantize(run_dir, "int8" if scheme in remedies.RUNNERS else scheme,
                             calib_size=task.calib_size, seed=0, qat=qat, distill=distill)


def board_model(group: Group, run_dir: Path, scheme: str) -> None:
    """Make the run's `scheme` model if it is not there. The scheme's cell makes it, but a board
    or per-op cell can come without its cell: a board added to a study, or a run trained again
    whose cells' rows were done before (`--resume`)."""
    if not Run(run_dir).has_model("int8" if scheme in remedies.RUNNERS else scheme):
        _quantize(group, run_dir, scheme)


def _sweep_points(group: Group, run: _Run, pending: list, base: dict,
                  emit: Callable[[dict], None]) -> None:
    """The pending points of each n-bit sweep on the run (quant/nbit.py), one row each."""
    algo, env_id, seed = group.algo, group.env, group.seed
    for sw in group.sweeps:
        want = [("fp32", 32)] + [(m, b) for m in sw.modes for b in sw.bits]
        todo = [(m, b) for m, b in want if ("sweep", algo, env_id, seed, m, b) in pending]
        if not todo:
            continue
        t1 = time.perf_counter()
        bits = sorted({b for m, b in todo if m != "fp32"}) or sw.bits[:1]
        modes = [m for m in sw.modes if any(mm == m for mm, _ in todo)] or sw.modes[:1]
        try:
            rows = nbit_sweep(run.dir, bits=bits, seeds=sw.eval_seeds,
                              calib_size=sw.calib_size, modes=modes)
        except Exception as e:
            for m, b in todo:
                emit({"kind": "sweep", **base, "mode": m, "bits": b, "status": "error",
                      "reason": error_reason(e)})
            continue
        secs = round(time.perf_counter() - t1, 2)
        for r in rows:
            if (r["mode"], r["bits"]) not in todo:
                continue
            todo.remove((r["mode"], r["bits"]))
            emit({"kind": "sweep", **base, "status": "ok", **r,
                  "eval_seeds": list(sw.eval_seeds), "fp32_return": run.ref_mean,
                  "seconds": secs})


# ---------------------------------------------------------------------------- board cells
# Schemes the firmware cannot run (quarl_edge/converters/cgen.py refuses float16-weight and dynamic-range
# models; int8-i16head is a numpy readout on the host): their board cells are "skipped".
NOT_DEPLOYABLE = {
    "fp16": "float16-weight models are not deployable (TF Lite Micro and the code generator "
            "refuse them)",
    "dyn-int8": "dynamic-range (hybrid) models are not deployable (TF Lite Micro and the code "
                "generator refuse them)",
    "int8-i16head": "int8-i16head's int16 head is a numpy readout on the host, not a model "
                    "a board runs",
}
_NO_FIT = re.compile(r"does not fit the board's memory|needs (\d+) B of (flash|RAM)")


def where_row() -> dict:
    """Where a row was made: the Ray node (when it ran in a Ray task), host name and process."""
    node = None
    if "ray" in sys.modules:
        try:
            import ray   # optional (the ray extra): loaded already when this runs in a Ray task
            if ray.is_initialized():
                node = ray.get_runtime_context().get_node_id()
        except Exception:  # not in a Ray worker
            node = None
    return {"node": node, "host": socket.gethostname(), "pid": os.getpid()}


def run_board_cell(group: Group, scheme: str, board_id: str, out: Path) -> dict:
    """One board cell: the run's `scheme` model on board `board_id` (measure/bench.py's
    bench_cell: cost per inference over BENCH n, flash, static RAM, arena, stack, and the HIL
    episodes on the study's test seeds with the check against TF Lite Micro and the agreement
    with the fp32 network; then measure/validate.py on the run's calibration observations).
    Returns its row; never raises: a model that does not fit the board is a row with status
    "does-not-fit" and the numbers, any other failure an "error" row."""
    algo, env_id, seed = group.algo, group.env, group.seed
    row = {"kind": "board", "study": group.study, "algo": algo, "env": env_id,
           "seed": seed, "scheme": scheme, "board": board_id, **where_row()}
    if scheme in NOT_DEPLOYABLE:
        return {**row, "status": "skipped", "reason": NOT_DEPLOYABLE[scheme]}
    t0 = time.perf_counter()
    run_dir = Path(out) / "runs" / run_dir_name(algo, env_id, seed)
    build_dir = Run(run_dir).build_dir(board_id, scheme, make=False)
    try:
        board = get_board(board_id)
        space = make_gym(env_id).action_space
        reason = not_applicable(scheme, algo, env_id, hasattr(space, "n"))
        if reason:     # as its scheme cell
            return {**row, "status": "skipped", "reason": reason}
        board_model(group, run_dir, scheme)
        return {**row, **_measure_board(run_dir, build_dir, board, scheme, group),
                "seconds": round(time.perf_counter() - t0, 2), "run_dir": str(run_dir)}
    except QuarlError as e:
        text = str(e)
        if _NO_FIT.search(text):
            return {**row, "status": "does-not-fit", "reason": text.splitlines()[0],
                    **_no_fit_numbers(text, build_dir, board_id),
                    "seconds": round(time.perf_counter() - t0, 2)}
        return {**row, "status": "error", "reason": error_reason(e)}
    except Exception as e:
        return {**row, "status": "error", "reason": error_reason(e)}


def _no_fit_numbers(text: str, build_dir: Path, board_id: str) -> dict:
    """What a refused build needed and what the board has, from the message and the generated
    model's model.json (arena and weight bytes)."""
    board = get_board(board_id)
    nums = {"board_flash_bytes": board.flash_bytes, "board_ram_bytes": board.ram_bytes}
    for m in re.finditer(r"needs (\d+) B of (flash|RAM)", text):
        nums[f"needs_{m.group(2).lower()}_bytes"] = int(m.group(1))
    info = build_dir / "gen" / "model.json"
    if info.is_file():
        try:
            meta = json.loads(info.read_text())
            nums["arena_bytes"] = int(meta["arena_bytes"])
            nums["weight_bytes"] = int(meta["weight_bytes"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            pass
    return nums


def _bench_observation(run_dir: Path, group: Group) -> np.ndarray:
    """The observation BENCH (and PEROP) time: the run's first calibration observation, else
    the env's first one on the first board seed."""
    calib = Run(run_dir).load_calibration()
    obs = calib[0] if calib is not None else make_gym(group.env).reset(
        seed=group.board_seeds[0])[0]
    return np.asarray(obs, np.float32)


def _measure_board(run_dir: Path, build_dir: Path, board, scheme: str, group: Group) -> dict:
    meta = load_run(run_dir)
    model = Run(run_dir).tflite(scheme)    # made by the scheme's cell, or board_model
    env_id, seeds = group.env, list(group.board_seeds)
    head = meta.get("action_head") or default_head(make_gym(env_id).action_space)
    calib = Run(run_dir).load_calibration()
    fp32 = Fp32Episodes.for_run(run_dir, env_id, head, seeds)
    bench = pipeline.bench_cell(run_dir, board, scheme, group.task.bench_n,
                                _bench_observation(run_dir, group),
                                episodes=(env_id, seeds, fp32))
    build_dir.mkdir(parents=True, exist_ok=True)
    n_val = group.task.validate_n
    if calib is not None:
        inputs = build_dir / "validate_inputs.npy"
        write_npy(inputs, np.asarray(calib[:n_val], np.float32))
        v = pipeline.validate(model, board, build_dir / "validate", inputs=inputs)
    else:   # no calibration set (no integer scheme in the study): random inputs over the range
        v = pipeline.validate(model, board, build_dir / "validate", random_n=n_val)
    us, basis = us_per_inference(bench.get("cost_mean"), bench.get("unit"), board.clock_hz)
    return {"status": "ok", **bench, "us_per_inference": us, "us_basis": basis,
            "model_bytes": model.stat().st_size,
            "bit_exact": v["bit_exact"],
            "validate": {"n": v["n"], "inputs": "calibration" if calib is not None else "random",
                         "bit_exact": v["bit_exact"], "mismatches": v["mismatches"],
                         "differing": v["differing"], "classes": v["classes"],
                         "max_abs_diff": v["max_abs_diff"]}}


# ---------------------------------------------------------------------------- per-op cells
# A per-op cell's "op" row keys (measure/perop.py) kept in the row's "ops" list; the others
# (board, scheme, unit, kind) are the row's own. Its "total" row's numbers go in the row.
_OP_KEYS = ("slot", "op", "type", "inputs", "outputs", "macs", "cost", "share", "cost_per_mac")
_TOTAL_KEYS = ("sum", "whole", "overhead", "noise", "gap", "tolerance", "within", "runs",
               "repeats")


def run_perop_cell(group: Group, scheme: str, board_id: str, out: Path) -> dict:
    """One per-op cell (plan.perop_plan): the run's `scheme` model on board `board_id` timed op
    by op (measure/perop.py's perop_cell, `bench_n` runs, the board cells' BENCH observation).
    Returns its row; never raises: a model the board cannot hold is a "does-not-fit" row, any
    other failure an "error" row."""
    algo, env_id, seed = group.algo, group.env, group.seed
    row = {"kind": "perop", "study": group.study, "algo": algo, "env": env_id, "seed": seed,
           "scheme": scheme, "board": board_id, "family": family(group.task), **where_row()}
    t0 = time.perf_counter()
    run_dir = Path(out) / "runs" / run_dir_name(algo, env_id, seed)
    try:
        board_model(group, run_dir, scheme)
        rows = pipeline.perop_cell(run_dir, get_board(board_id), scheme, group.task.bench_n,
                                   _bench_observation(run_dir, group))
    except QuarlError as e:
        status = "does-not-fit" if _NO_FIT.search(str(e)) else "error"
        return {**row, "status": status, "reason": error_reason(e),
                "seconds": round(time.perf_counter() - t0, 2)}
    except Exception as e:
        return {**row, "status": "error", "reason": error_reason(e)}
    total = next(r for r in rows if r["kind"] == "total")
    return {**row, "status": "ok", "unit": total["unit"],
            "ops": [{k: r[k] for k in _OP_KEYS} for r in rows if r["kind"] == "op"],
            **{k: total[k] for k in _TOTAL_KEYS},
            "seconds": round(time.perf_counter() - t0, 2), "run_dir": str(run_dir)}
