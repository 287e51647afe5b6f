"""A QuaRL-style study: a grid of (algo, env, seed, scheme) cells from a TOML file, run in
parallel, resumable, one JSON line per finished cell.

    quarl-edge study CONFIG.toml [--workers N] [--resume] [--json] [--out DIR] [--ray ADDRESS]

The config (see studies/smoke.toml, studies/classic.toml):

    [study]
    name = "classic"
    seeds = [0, 1, 2]                 # training seeds
    schemes = ["fp32", "int8", ...]   # quantize.SCHEMES, and remedies.RUNNERS (int8-i16head)
    episodes = 20                     # greedy evaluation on test seeds 0..episodes-1 ...
    # eval_seeds = [0, 5, 7]          # ... or on these seeds
    calib_size = 1000                 # calibration observations (integer schemes)
    qat_steps = 5000                  # qat-int8: env steps of fine-tuning in the RL loop
    distill_steps = 4000              # qat-distill-int8: env steps of student rollouts (QAT by
                                      # on-policy distillation; default qat.DistillConfig.steps)
    sweep_modes = ["weights+activations"]
    boards = ["host", "mps2-an386"]   # board cells: every scheme's model on each board
    board_episodes = 5                # HIL episodes: the first N evaluation seeds (default all)
    bench_n = 100                     # inferences per BENCH (cost per inference)
    validate_n = 200                  # calibration observations validated against TFLM

    [[task]]                          # one per (algo, env): the training budget and overrides
    algo = "dqn"
    env = "CartPole-v1"
    steps = 40000                     # default: train.DEFAULTS / the algo's config dataclass
    # seeds, schemes, episodes, eval_seeds, calib_size, qat_steps, distill_steps: override [study]
    [task.options]                    # other fields of the algo's config dataclass
    learning_starts = 1000
    [task.qat]                        # other fields of qat.QATConfig
    eval_episodes = 5
    [task.distill]                    # other fields of qat.DistillConfig
    eval_episodes = 5

    [[sweep]]                         # QuaRL's n-bit sweep on the runs of a task
    algo = "dqn"
    env = "CartPole-v1"
    bits = [2, 3, 4, 5, 6, 7, 8]
    # modes = ["weights+activations", "weights"]

qat-int8 runs for DQN only (the other algorithms' cells are "skipped"); qat-distill-int8 runs
for every algorithm, from the exported policy network alone.

Everything in the config is checked before anything runs (unknown algo, env, scheme, option,
an algo that cannot act in an env's action space); errors name the offending entry.

A *run* is one training of (algo, env, seed), cached in OUT/runs/<algo>-<env>-s<seed>/ and reused
by all its schemes and sweep points: the cells of one run form a group, and a group is the unit
of work of a worker, so the same run is never trained twice concurrently. A run directory is
reused when its run.json records the same training budget and options; a training killed before
it wrote run.json is redone. A run whose run.json hyperparameters differ from what the study
would train now (the tuned DEFAULTS of quarl_edge/rl/defaults.py changed since) is retrained, and
`--resume` redoes all its rows: rows of a policy that no longer exists are not kept as current.

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
                     (run_board_cell): measure/bench.py's row (cost_mean in the board's unit,
                     flash/ram/arena/stack bytes, the HIL episodes' returns, matches_reference
                     with TF Lite Micro, matches_tflite_ref with tflite-runtime's reference
                     kernels, agreement with fp32), us_per_inference, bit_exact and
                     validate (measure/validate.py's classes), and where it ran (node, host, pid)

`--resume` skips every row already in the file whose status is ok or skipped (errors are tried
again); a last line cut by a kill is dropped. `--redo ALGO/ENV` makes that task's rows again
(after a change to the evaluation), reusing its trained runs. Without --resume an existing
non-empty results file is refused. The report (quarl_edge/study/report.py) keeps the last row per key.

With --ray ADDRESS the groups are Ray tasks (training and host rows, streamed back as made) and
each board cell is a task asking for the resource board:<id>, which only the nodes serving that
board advertise (quarl_edge/study/farm.py: `quarl-edge farm-node`); a task whose worker died is
retried, and the writer drops a row whose key it already wrote (see _run_ray).

Workers are spawned processes (multiprocessing "spawn" context) that die with the main process
(Linux PR_SET_PDEATHSIG), so a killed study leaves no process writing behind it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import QuarlError
from ..schema import Key, check, check_value, unknown_keys

# Algorithms whose RL loop qat.py can fine-tune in (qat.qat_finetune refuses the others).
QAT_ALGOS = ("dqn",)
SWEEP_MODES = ("weights+activations", "weights", "activations")
RAY_PIN = "ray==2.60.0"
# Rows --resume keeps; "does-not-fit": a board cell whose firmware the board cannot hold
STATUS_DONE = ("ok", "skipped", "does-not-fit")

# What each table of a study file may hold (quarl_edge/schema.py checks the types and ranges;
# load_study checks the names: algorithms, environments, schemes).
CONFIG_KEYS = {"study": Key(dict), "task": Key(list, items=dict), "sweep": Key(list, items=dict)}
_SEEDS = Key(list, items=int, min=0, nonempty=True)
_EVALUATION = {"seeds": _SEEDS, "episodes": Key(int), "eval_seeds": _SEEDS,
               "calib_size": Key(int, min=1)}
_SCHEMES = {"schemes": Key(list, items=str, nonempty=True), "qat_steps": Key(int, min=1),
            "distill_steps": Key(int, min=1)}
# Board cells (run_board_cell): the boards, BENCH's repeats, the calibration observations
# validated, the HIL episodes (the first N of the evaluation seeds; default all of them).
_BOARDS = {"boards": Key(list, items=str), "bench_n": Key(int, min=1, max=65535),
           "validate_n": Key(int, min=1), "board_episodes": Key(int, min=1)}
STUDY_KEYS = {"name": Key(str, nonempty=True), "description": Key(str), **_EVALUATION,
              **_SCHEMES, **_BOARDS, "sweep_modes": Key(list, items=str, nonempty=True)}
TASK_KEYS = {"algo": Key(str, required=True), "env": Key(str, required=True), "steps": Key(int),
             **_EVALUATION, **_SCHEMES, **_BOARDS, "options": Key(dict), "qat": Key(dict),
             "distill": Key(dict), "note": Key(str)}
SWEEP_KEYS = {"algo": Key(str, required=True), "env": Key(str, required=True),
              "bits": Key(list, items=int, nonempty=True),
              "modes": Key(list, items=str, nonempty=True), **_EVALUATION}


# ------------------------------------------------------------------------------------ config
@dataclass
class Task:
    algo: str
    env: str
    steps: int | None
    seeds: list[int]
    schemes: list[str]
    eval_seeds: list[int]
    calib_size: int
    qat_steps: int
    options: dict = field(default_factory=dict)
    qat: dict = field(default_factory=dict)
    distill_steps: int | None = None   # None: qat.DistillConfig's default
    distill: dict = field(default_factory=dict)
    boards: list[str] = field(default_factory=list)   # board cells: every scheme on each
    bench_n: int = 100
    validate_n: int = 200
    board_episodes: int | None = None                 # None: every evaluation seed


@dataclass
class Sweep:
    algo: str
    env: str
    bits: list[int]
    modes: list[str]
    seeds: list[int]
    eval_seeds: list[int]
    calib_size: int


@dataclass
class Study:
    name: str
    tasks: list[Task]
    sweeps: list[Sweep]
    path: Path | None = None


def _eval_seeds(d: dict, default: list[int], where: str) -> list[int]:
    if "eval_seeds" in d and "episodes" in d:
        raise QuarlError(f"{where}: give either episodes or eval_seeds, not both")
    if "eval_seeds" in d:
        seeds = [int(s) for s in d["eval_seeds"]]
    elif "episodes" in d:
        n = int(d["episodes"])
        if n <= 0:
            raise QuarlError(f"{where}: episodes must be positive, got {n}")
        seeds = list(range(n))
    else:
        seeds = list(default)
    if not seeds:
        raise QuarlError(f"{where}: no evaluation seeds")
    return seeds


def _known_options(given: dict, config_cls, what: str, where: str) -> dict:
    """A task's option table as a dict, every key a field of `config_cls` (steps is set apart),
    each value of the type of the field's default when that is a number, bool or string."""
    known = {f.name for f in fields(config_cls)} - {"steps"}
    unknown_keys(given, known, where, what=f"{what} option")
    defaults = {f.name: f.default for f in fields(config_cls)}
    for key, value in given.items():
        default = defaults[key]
        if isinstance(default, (bool, int, float, str)):
            check_value(key, value, Key(float if isinstance(default, float) else type(default)),
                        f"{where} {what} options")
    return dict(given)


def _check_env(algo: str, env_id: str, where: str) -> None:
    """Unknown env ids, missing optional dependencies (box2d, mujoco) and action spaces the algo
    cannot act in, without importing TensorFlow."""
    import gymnasium as gym
    try:
        env = gym.make(env_id)
    except (gym.error.DependencyNotInstalled, ImportError) as e:
        from ..rl.envs import missing_dependency_error
        raise QuarlError(f"{where}: {missing_dependency_error(env_id, e)}") from None
    except gym.error.Error as e:
        from ..rl.envs import KNOWN_ENVS, MUJOCO_ENVS
        raise QuarlError(f"{where}: unknown Gymnasium environment {env_id!r} ({e}); known (with "
                         f"tuned defaults): {', '.join(KNOWN_ENVS + MUJOCO_ENVS)}") from None
    space = env.action_space
    env.close()
    discrete = isinstance(space, gym.spaces.Discrete)
    if algo == "dqn" and not discrete:
        raise QuarlError(f"{where}: dqn needs a Discrete action space; {env_id} has {space}")
    if algo in ("sac", "td3", "ddpg") and discrete:
        raise QuarlError(f"{where}: {algo} needs a Box (continuous) action space; {env_id} has "
                         f"{space}")


def _board_ids(ids: list[str], where: str) -> list[str]:
    """The study's board ids, each a board file quarl-edge knows (`quarl-edge boards`)."""
    from ..targets.boards import get_board
    if len(set(ids)) != len(ids):
        raise QuarlError(f"{where}: a board is listed twice in {ids}")
    for b in ids:
        try:
            get_board(b)
        except QuarlError as e:
            raise QuarlError(f"{where}: 'boards': {e}") from None
    return list(ids)


def load_study(path: Path) -> Study:
    """Parse and check a study TOML file; raises QuarlError naming the first bad entry."""
    from ..quant.remedies import RUNNERS as REMEDY_RUNNERS
    from ..quant.schemes import SCHEMES
    from ..rl.train import ALGOS

    path = Path(path)
    if not path.is_file():
        raise QuarlError(f"study config {path} not found")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise QuarlError(f"{path}: invalid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise QuarlError(f"{path}: not UTF-8 text (TOML is UTF-8): byte {e.start}") from None
    check(raw, CONFIG_KEYS, str(path))
    top = check(raw.get("study", {}), STUDY_KEYS, f"{path} [study]")
    name = str(top.get("name", path.stem))
    d_seeds = [int(s) for s in top.get("seeds", [0])]
    d_schemes = list(top.get("schemes", ["fp32", "int8"]))
    d_eval = _eval_seeds(top, list(range(20)), f"{path} [study]")
    d_calib = int(top.get("calib_size", 1000))
    d_qat = int(top.get("qat_steps", 5000))
    d_distill = top.get("distill_steps")
    d_modes = list(top.get("sweep_modes", ["weights+activations"]))
    d_boards = _board_ids(top.get("boards", []), f"{path} [study]")

    tasks: list[Task] = []
    seen = set()
    for i, t in enumerate(raw.get("task", [])):
        where = f"{path} [[task]] #{i + 1}"
        check(t, TASK_KEYS, where)
        algo, env_id = str(t["algo"]), str(t["env"])
        where = f"{where} ({algo}, {env_id})"
        if algo not in ALGOS:
            raise QuarlError(f"{where}: unknown algorithm {algo!r}; known: {', '.join(ALGOS)}")
        if (algo, env_id) in seen:
            raise QuarlError(f"{where}: ({algo}, {env_id}) appears twice")
        seen.add((algo, env_id))
        schemes = list(t.get("schemes", d_schemes))
        for s in schemes:
            if s not in SCHEMES and s not in REMEDY_RUNNERS:
                raise QuarlError(f"{where}: unknown quantization scheme {s!r}; known: "
                                 f"{', '.join([*SCHEMES, *REMEDY_RUNNERS])}")
        if len(set(schemes)) != len(schemes):
            raise QuarlError(f"{where}: a scheme is listed twice in {schemes}")
        from ..rl.qat import DistillConfig, QATConfig
        config_cls = ALGOS[algo][0]
        options = _known_options(t.get("options", {}), config_cls, algo, where)
        qat = _known_options(t.get("qat", {}), QATConfig, "qat", where)
        distill = _known_options(t.get("distill", {}), DistillConfig, "distill", where)
        distill_steps = t.get("distill_steps", d_distill)
        try:
            DistillConfig(**distill, **({} if distill_steps is None
                                         else {"steps": int(distill_steps)}))
        except (QuarlError, TypeError, ValueError) as e:
            raise QuarlError(f"{where}: invalid distill options: {e}") from None
        steps = t.get("steps")
        if steps is not None and int(steps) <= 0:
            raise QuarlError(f"{where}: steps must be positive, got {steps}")
        _check_env(algo, env_id, where)
        boards = _board_ids(t["boards"], where) if "boards" in t else d_boards
        b_episodes = t.get("board_episodes", top.get("board_episodes"))
        t_eval = _eval_seeds(t, d_eval, where)
        if b_episodes is not None and int(b_episodes) > len(t_eval):
            raise QuarlError(f"{where}: board_episodes = {b_episodes} but there are only "
                             f"{len(t_eval)} evaluation seeds")
        try:  # the algo's config dataclass checks the values too
            from ..rl.train import DEFAULTS
            config_cls(**{**DEFAULTS.get((algo, env_id), {}), **options,
                          **({"steps": int(steps)} if steps is not None else {})})
        except TypeError as e:
            raise QuarlError(f"{where}: invalid options: {e}") from None
        tasks.append(Task(algo, env_id, None if steps is None else int(steps),
                          [int(s) for s in t.get("seeds", d_seeds)], schemes,
                          t_eval, int(t.get("calib_size", d_calib)),
                          int(t.get("qat_steps", d_qat)), options, qat,
                          None if distill_steps is None else int(distill_steps), distill,
                          boards, int(t.get("bench_n", top.get("bench_n", 100))),
                          int(t.get("validate_n", top.get("validate_n", 200))),
                          None if b_episodes is None else int(b_episodes)))
    if not tasks:
        raise QuarlError(f"{path}: no [[task]] entries")

    sweeps: list[Sweep] = []
    by_task = {(t.algo, t.env): t for t in tasks}
    for i, s in enumerate(raw.get("sweep", [])):
        where = f"{path} [[sweep]] #{i + 1}"
        check(s, SWEEP_KEYS, where)
        key = (str(s.get("algo")), str(s.get("env")))
        if key not in by_task:
            raise QuarlError(f"{where}: ({key[0]}, {key[1]}) is not a [[task]] of this study")
        task = by_task[key]
        bits = [int(b) for b in s.get("bits", range(2, 9))]
        bad = [b for b in bits if not 2 <= b <= 16]
        if bad:
            raise QuarlError(f"{where}: bits must be in 2..16, got {bad}")
        modes = list(s.get("modes", d_modes))
        for m in modes:
            if m not in SWEEP_MODES:
                raise QuarlError(f"{where}: unknown sweep mode {m!r}; known: "
                                 f"{', '.join(SWEEP_MODES)}")
        seeds = [int(x) for x in s.get("seeds", task.seeds)]
        if not set(seeds) <= set(task.seeds):
            raise QuarlError(f"{where}: seeds {seeds} are not all trained by the task "
                             f"(seeds {task.seeds})")
        sweeps.append(Sweep(key[0], key[1], bits, modes, seeds,
                            _eval_seeds(s, task.eval_seeds, where),
                            int(s.get("calib_size", task.calib_size))))
    return Study(name, tasks, sweeps, path)


# ------------------------------------------------------------------------------ the grid
def row_key(row: dict) -> tuple:
    """The identity of a results row: what --resume and the report deduplicate on."""
    kind = row.get("kind")
    base = (kind, row.get("algo"), row.get("env"), row.get("seed"))
    if kind == "cell":
        return base + (row.get("scheme"),)
    if kind == "sweep":
        return base + (row.get("mode"), row.get("bits"))
    if kind == "board":
        return base + (row.get("scheme"), row.get("board"))
    return base


def scope(scheme: str) -> str | None:
    """What a task needs for `scheme` to apply, for the schemes that do not apply to every task
    (the rule of not_applicable, in words); None for the others."""
    from ..quant import remedies
    if scheme == "qat-int8":
        return (f"fine-tunes in the RL loop of {', '.join(a.upper() for a in QAT_ALGOS)} only "
                "(quarl_edge/rl/qat.py)")
    if scheme in remedies.NAMES:
        return "a tie remedy for argmax heads: discrete actions only (quarl_edge/quant/remedies.py)"
    return None


def not_applicable(scheme: str, algo: str, env_id: str, argmax_head: bool) -> str | None:
    """Why `scheme` does not apply to (algo, env): the reason its cell is recorded "skipped"
    with; None when it applies. `argmax_head`: the env's actions are discrete."""
    from ..quant import remedies
    if scheme == "qat-int8" and algo not in QAT_ALGOS:
        return (f"qat-int8 fine-tunes in the RL loop of {', '.join(QAT_ALGOS)} only "
                f"(quarl_edge/rl/qat.py); {algo} is not supported")
    if scheme in remedies.NAMES and not argmax_head:
        return (f"{scheme} is a remedy for argmax heads (quarl_edge/quant/remedies.py); "
                f"{env_id} has continuous actions")
    return None


def run_dir_name(algo: str, env_id: str, seed: int) -> str:
    return f"{algo}-{env_id}-s{seed}"


def plan(study: Study) -> list[dict]:
    """The groups of work, one per (algo, env, seed): what to train and which rows it yields."""
    groups = []
    for t in study.tasks:
        sweeps = [s for s in study.sweeps if (s.algo, s.env) == (t.algo, t.env)]
        for seed in t.seeds:
            keys = [("run", t.algo, t.env, seed)]
            keys += [("cell", t.algo, t.env, seed, s) for s in t.schemes]
            keys += [("board", t.algo, t.env, seed, s, b) for s in t.schemes for b in t.boards]
            sw = []
            for s in sweeps:
                if seed not in s.seeds:
                    continue
                sw.append({"bits": s.bits, "modes": s.modes, "eval_seeds": s.eval_seeds,
                           "calib_size": s.calib_size})
                keys.append(("sweep", t.algo, t.env, seed, "fp32", 32))
                keys += [("sweep", t.algo, t.env, seed, m, b) for m in s.modes for b in s.bits]
            groups.append({"algo": t.algo, "env": t.env, "seed": seed, "steps": t.steps,
                           "options": t.options, "schemes": t.schemes,
                           "eval_seeds": t.eval_seeds, "calib_size": t.calib_size,
                           "qat_steps": t.qat_steps, "qat": t.qat,
                           "distill_steps": t.distill_steps, "distill": t.distill, "sweeps": sw,
                           "boards": t.boards, "bench_n": t.bench_n, "validate_n": t.validate_n,
                           "board_seeds": t.eval_seeds[:t.board_episodes or len(t.eval_seeds)],
                           "keys": list(dict.fromkeys(keys))})
    return groups


def read_results(path: Path) -> list[dict]:
    """Rows of a results file; a last line cut by a kill (no newline, not JSON) is ignored."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # the unterminated last line
                continue
            raise QuarlError(f"{path}: line {i + 1} is not JSON") from None
    return rows


def latest_rows(rows: list[dict]) -> dict[tuple, dict]:
    """The last row per key (a retried error is replaced by its retry)."""
    out: dict[tuple, dict] = {}
    for r in rows:
        out[row_key(r)] = r
    return out


def _repair_tail(path: Path) -> None:
    """Cut an unterminated last line (a write interrupted by a kill) before appending."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    with path.open("r+b") as f:
        f.truncate(cut)


# ------------------------------------------------------------------------------ the work
def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def _train_matches(run_dir: Path, group: dict) -> bool:
    meta = run_dir / "run.json"
    if not meta.is_file() or not (run_dir / "study-train.json").is_file():
        return False
    try:
        want = json.loads((run_dir / "study-train.json").read_text())
    except json.JSONDecodeError:
        return False
    return want == _train_spec(group) and not stale_hyperparameters(run_dir, group)


def stale_hyperparameters(run_dir: Path, group: dict) -> dict[str, tuple]:
    """{field: (trained with, would train now)} for a run directory that has a run.json; empty
    when it matches the group's resolved training config or has no run.json."""
    from ..rl.train import config_changes, resolve_config
    try:
        saved = json.loads((run_dir / "run.json").read_text())["hyperparameters"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return {}
    return config_changes(saved, resolve_config(group["algo"], group["env"], group["steps"],
                                                **group["options"]))


def _train_spec(group: dict) -> dict:
    return _jsonable({"algo": group["algo"], "env": group["env"], "seed": group["seed"],
                      "steps": group["steps"], "options": group["options"]})


def _limit_threads(threads: int) -> None:
    import tensorflow as tf
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # TF already initialised in this process
        pass


def run_group(group: dict, out: Path, done: set, emit: Callable[[dict], None],
              log: Callable[[str], None] = lambda s: None, boards: bool = True) -> None:
    """Train (or reuse) one run and produce its pending rows, calling emit(row) per row.
    `boards`: also its board cells, after every other row (on Ray they are tasks of their own,
    scheduled onto the nodes that have the board: see _run_ray)."""
    from ..measure.reference import tflite_runner
    from ..measure.selection import int8_judge
    from ..quant import remedies
    from ..quant.nbit import nbit_sweep
    from ..quant.schemes import quantize
    from ..rl.envs import make_gym, play_batched
    from ..rl.train import train
    from ..run import keras_runner, load_keras, load_run, ppo_action_std, weighted_layers
    from .analysis import (batch_runner, evaluate_runner, gaussian_policy_kl, policy_kl,
                           random_policy_return, weight_quantiles, weight_stats)

    algo, env_id, seed = group["algo"], group["env"], group["seed"]
    base = {"study": group.get("study"), "algo": algo, "env": env_id, "seed": seed}
    pending = [k for k in map(tuple, group["keys"]) if k not in done]
    board_keys = [k for k in pending if k[0] == "board"]
    pending = [k for k in pending if k[0] != "board"]
    run_dir = Path(out) / "runs" / run_dir_name(algo, env_id, seed)
    if not pending:
        if boards:
            for k in board_keys:
                emit(run_board_cell(group, k[4], k[5], out))
        return
    t0 = time.perf_counter()
    cached = _train_matches(run_dir, group)
    if not cached:
        log(f"train {algo} {env_id} seed {seed} ({group['steps'] or 'default'} steps)")
        if run_dir.exists():
            shutil.rmtree(run_dir)
        train(env_id, algo, group["steps"], seed, run_dir, progress=False, judge=int8_judge,
              **group["options"])
        (run_dir / "study-train.json").write_text(json.dumps(_train_spec(group)) + "\n")
    info = load_run(run_dir)
    train_wall = time.perf_counter() - t0
    model = load_keras(run_dir)
    layers = weighted_layers(model)   # MLPs and CNNs: the kernels' statistics
    reference = keras_runner(model)
    space = make_gym(env_id).action_space
    argmax_head = hasattr(space, "n")
    logits = algo == "ppo" and argmax_head   # discrete PPO exports logits
    # continuous PPO: the Gaussian's mean, with a std the network does not compute
    action_std = None if logits or algo != "ppo" else ppo_action_std(run_dir)
    eval_seeds = group["eval_seeds"]
    ref_returns, states = play_batched(env_id, reference, eval_seeds, record=True)
    ref_mean = float(np.mean(ref_returns))
    stats = weight_stats(layers)

    if ("run", algo, env_id, seed) in pending:
        emit({"kind": "run", **base, "status": "ok", "steps": info.get("steps"),
              "cached": cached, "train_seconds": info.get("train_seconds"),
              "wall_seconds": round(train_wall, 2),
              "best_validation_return": info.get("best_greedy_return"),
              "eval_seeds": list(eval_seeds), "fp32_return": ref_mean,
              "fp32_std_return": float(np.std(ref_returns)),
              "returns": [float(r) for r in ref_returns],
              "random_return": random_policy_return(env_id, eval_seeds),
              "n_params": int(sum(k.size + b.size for k, b, _ in layers)),
              "output": "logits" if logits else ("q_values" if algo == "dqn" else "action"),
              "weights": stats, "weight_quantiles": weight_quantiles(layers),
              "hyperparameters": info.get("hyperparameters"), "run_dir": str(run_dir)})

    summary = {"weight_range": stats["all"]["range"], "weight_std": stats["all"]["std"],
               "weight_kurtosis": stats["all"]["kurtosis"]}
    for scheme in group["schemes"]:
        key = ("cell", algo, env_id, seed, scheme)
        if key not in pending:
            continue
        row = {"kind": "cell", **base, "scheme": scheme}
        reason = not_applicable(scheme, algo, env_id, argmax_head)
        if reason:
            emit({**row, "status": "skipped", "reason": reason})
            continue
        t1 = time.perf_counter()
        try:
            qat = {"steps": group["qat_steps"], **group["qat"]} if scheme == "qat-int8" else None
            distill = None
            if scheme == "qat-distill-int8":
                distill = dict(group.get("distill") or {})
                if group.get("distill_steps") is not None:
                    distill["steps"] = group["distill_steps"]
            # The readout remedies run the int8 model with another readout of its head.
            path = quantize(run_dir, "int8" if scheme in remedies.RUNNERS else scheme,
                            calib_size=group["calib_size"], seed=0, qat=qat,
                            distill=distill)
            if remedies.head_readout(path) == remedies.HEAD_ACCUMULATORS:   # int8-acc
                runner = batch_runner(remedies.accumulator_runner(path))
            elif scheme == "int8-i16head":
                calibration = np.load(run_dir / "calibration.npy")
                runner = batch_runner(remedies.int16_head_runner(path, calibration))
            else:
                runner = batch_runner(tflite_runner(path))
            res = evaluate_runner(env_id, runner, eval_seeds, reference, states)
            kl = None
            if logits:
                kl = policy_kl(reference(states), runner(states))
            elif action_std is not None:
                kl = gaussian_policy_kl(reference(states), runner(states), action_std)
            if scheme == "qat-distill-int8":   # the distillation's log, in brief
                log_ = json.loads((run_dir / "qat-distill.json").read_text())
                res["distill"] = {k: log_[k] for k in (
                    "loss", "env_steps", "rounds", "seconds", "best_round",
                    "best_validation_return", "teacher_validation_return")}
            emit({**row, "status": "ok", **res, "kl": kl, "fp32_return": ref_mean,
                  "eval_seeds": list(eval_seeds), "size_bytes": path.stat().st_size,
                  **summary, "seconds": round(time.perf_counter() - t1, 2),
                  "run_dir": str(run_dir)})
        except Exception as e:  # this scheme failed; the run's other cells go on
            emit({**row, "status": "error", "reason": _reason(e)})

    for sw in group["sweeps"]:
        want = [("fp32", 32)] + [(m, b) for m in sw["modes"] for b in sw["bits"]]
        todo = [(m, b) for m, b in want if ("sweep", algo, env_id, seed, m, b) in pending]
        if not todo:
            continue
        t1 = time.perf_counter()
        bits = sorted({b for m, b in todo if m != "fp32"}) or sw["bits"][:1]
        modes = [m for m in sw["modes"] if any(mm == m for mm, _ in todo)] or sw["modes"][:1]
        try:
            rows = nbit_sweep(run_dir, bits=bits, seeds=sw["eval_seeds"],
                              calib_size=sw["calib_size"], modes=modes)
        except Exception as e:
            for m, b in todo:
                emit({"kind": "sweep", **base, "mode": m, "bits": b, "status": "error",
                      "reason": _reason(e)})
            continue
        secs = round(time.perf_counter() - t1, 2)
        for r in rows:
            if (r["mode"], r["bits"]) not in todo:
                continue
            todo.remove((r["mode"], r["bits"]))
            emit({"kind": "sweep", **base, "status": "ok", **r,
                  "eval_seeds": list(sw["eval_seeds"]), "fp32_return": ref_mean,
                  "seconds": secs})

    if boards:
        for k in board_keys:
            emit(run_board_cell(group, k[4], k[5], out))


# ---------------------------------------------------------------------------- board cells
# Schemes the firmware cannot run (converters/cgen.py refuses float16-weight and dynamic-range
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
    import socket
    node = None
    if "ray" in sys.modules:
        try:
            import ray
            if ray.is_initialized():
                node = ray.get_runtime_context().get_node_id()
        except Exception:  # not in a Ray worker
            node = None
    return {"node": node, "host": socket.gethostname(), "pid": os.getpid()}


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


def run_board_cell(group: dict, scheme: str, board_id: str, out: Path) -> dict:
    """One board cell: the run's `scheme` model on board `board_id` (measure/bench.py's
    bench_cell: cost per inference over BENCH n, flash, static RAM, arena, stack, and the HIL
    episodes on the study's test seeds with the check against TF Lite Micro and the agreement
    with the fp32 network; then measure/validate.py on the run's calibration observations).
    Returns its row; never raises: a model that does not fit the board is a row with status
    "does-not-fit" and the numbers, any other failure an "error" row."""
    from ..targets.boards import get_board
    algo, env_id, seed = group["algo"], group["env"], group["seed"]
    row = {"kind": "board", "study": group.get("study"), "algo": algo, "env": env_id,
           "seed": seed, "scheme": scheme, "board": board_id, **where_row()}
    if scheme in NOT_DEPLOYABLE:
        return {**row, "status": "skipped", "reason": NOT_DEPLOYABLE[scheme]}
    t0 = time.perf_counter()
    run_dir = Path(out) / "runs" / run_dir_name(algo, env_id, seed)
    build_dir = run_dir / "build" / board_id / scheme
    try:
        board = get_board(board_id)
        from ..rl.envs import make_gym
        space = make_gym(env_id).action_space
        reason = not_applicable(scheme, algo, env_id, hasattr(space, "n"))
        if reason:     # as its scheme cell
            return {**row, "status": "skipped", "reason": reason}
        return {**row, **_measure_board(run_dir, build_dir, board, scheme, group),
                "seconds": round(time.perf_counter() - t0, 2), "run_dir": str(run_dir)}
    except QuarlError as e:
        text = str(e)
        if _NO_FIT.search(text):
            return {**row, "status": "does-not-fit", "reason": text.splitlines()[0],
                    **_no_fit_numbers(text, build_dir, board_id),
                    "seconds": round(time.perf_counter() - t0, 2)}
        return {**row, "status": "error", "reason": _reason(e)}
    except Exception as e:
        return {**row, "status": "error", "reason": _reason(e)}


def _no_fit_numbers(text: str, build_dir: Path, board_id: str) -> dict:
    """What a refused build needed and what the board has, from the message and the generated
    model's model.json (arena and weight bytes)."""
    from ..targets.boards import get_board
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


def _measure_board(run_dir: Path, build_dir: Path, board, scheme: str, group: dict) -> dict:
    from ..measure.bench import Fp32Episodes, bench_cell
    from ..measure.validate import validate
    from ..rl.envs import default_head, make_gym
    from ..run import load_run, tflite_path
    meta = load_run(run_dir)
    model = tflite_path(run_dir, scheme)    # made by the scheme's cell
    env_id, seeds = group["env"], list(group["board_seeds"])
    head = meta.get("action_head") or default_head(make_gym(env_id).action_space)
    calib_file = run_dir / "calibration.npy"
    calib = np.load(calib_file) if calib_file.is_file() else None
    obs = calib[0] if calib is not None else np.asarray(
        make_gym(env_id).reset(seed=seeds[0])[0], np.float32)
    fp32 = Fp32Episodes.for_run(run_dir, env_id, head, seeds)
    bench = bench_cell(run_dir, board, scheme, int(group.get("bench_n", 100)),
                       np.asarray(obs, np.float32), episodes=(env_id, seeds, fp32))
    build_dir.mkdir(parents=True, exist_ok=True)
    n_val = int(group.get("validate_n", 200))
    if calib is not None:
        inputs = build_dir / "validate_inputs.npy"
        np.save(inputs, np.asarray(calib[:n_val], np.float32))
        v = validate(model, board, build_dir / "validate", inputs=inputs)
    else:   # no calibration set (no integer scheme in the study): random inputs over the range
        v = validate(model, board, build_dir / "validate", random_n=n_val)
    us, basis = us_per_inference(bench.get("cost_mean"), bench.get("unit"), board.clock_hz)
    return {"status": "ok", **bench, "us_per_inference": us, "us_basis": basis,
            "model_bytes": model.stat().st_size,
            "bit_exact": v["bit_exact"],
            "validate": {"n": v["n"], "inputs": "calibration" if calib is not None else "random",
                         "bit_exact": v["bit_exact"], "mismatches": v["mismatches"],
                         "differing": v["differing"], "classes": v["classes"],
                         "max_abs_diff": v["max_abs_diff"]}}


def _reason(e: Exception) -> str:
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return first if isinstance(e, QuarlError) else f"{type(e).__name__}: {first}"


# --------------------------------------------------------------------------- the workers
def _die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies (prctl PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal
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
    _quiet()
    _limit_threads(threads)
    done_set = {tuple(k) for k in done}
    while True:
        group = tasks.get()
        if group is None:
            return
        gid = (group["algo"], group["env"], group["seed"])
        try:
            run_group(group, Path(out), done_set, lambda row: results.put(("row", row)),
                      lambda msg: results.put(("log", msg)))
        except Exception as e:  # a failed training: its pending rows are errors
            results.put(("fail", gid, _reason(e)))
        results.put(("done", gid))


def _quiet() -> None:
    """A worker's (or the single-process study's) third-party output: errors only; the rows
    and the study's own log are what it reports."""
    import warnings
    from ..noise import quiet_third_party
    quiet_third_party()
    warnings.filterwarnings("ignore")


class _Writer:
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
        self.f = path.open("a")

    def write(self, row: dict) -> bool:
        """Append `row`; False (and nothing written) when its key is already finished."""
        key = row_key(row)
        if key in self.finished:
            self.dropped += 1
            return False
        if row.get("status") in STATUS_DONE:
            self.finished.add(key)
        row = _jsonable({**row, "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
        self.f.write(json.dumps(row, separators=(", ", ": ")) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())
        self.done[row_key(row)] = row
        self.echo(row)
        self.on_row()
        return True

    def fail_group(self, group: dict, reason: str) -> None:
        for key in map(tuple, group["keys"]):
            if key in self.finished:
                continue
            kind, algo, env_id, seed, *rest = key
            row = {"kind": kind, "study": group.get("study"), "algo": algo, "env": env_id,
                   "seed": seed, "status": "error", "reason": reason}
            if kind == "cell":
                row["scheme"] = rest[0]
            elif kind == "board":
                row["scheme"], row["board"] = rest
            elif kind == "sweep":
                row["mode"], row["bits"] = rest
            self.write(row)

    def close(self) -> None:
        self.f.close()


def _describe(row: dict) -> str:
    what = {"run": "run", "cell": row.get("scheme"),
            "sweep": f"sweep {row.get('mode')} {row.get('bits')} bits",
            "board": f"{row.get('scheme')} on {row.get('board')}"}.get(row["kind"])
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
    unknown = sorted(set(redo) - tasks)
    if unknown:
        raise QuarlError(f"--redo {', '.join(unknown)}: not a task of {study.name}; its tasks: "
                         f"{', '.join(sorted(tasks))}")
    out = Path(out) if out else Path("results") / study.name
    if workers < 1:
        raise QuarlError(f"--workers must be >= 1, got {workers}")
    ray = None
    if ray_address:
        try:
            import ray  # noqa: F811
        except ImportError:
            raise QuarlError(f"install {RAY_PIN} to use --ray (pip install {RAY_PIN}, or "
                             "pip install -e '.[ray]')") from None
        check_ray_address(ray_address)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    prior = read_results(results)
    if prior and not resume:
        raise QuarlError(f"{results} already holds {len(prior)} rows: use --resume to continue "
                         "it, or another --out")
    lock = _lock(out)
    try:
        if study.path.resolve() != (out / "study.toml").resolve():
            shutil.copy(study.path, out / "study.toml")  # what the results were made with
        done = {k: r for k, r in latest_rows(prior).items() if r.get("status") in STATUS_DONE}
        groups = plan(study)
        for g in groups:
            g["study"] = study.name
        say = echo or (lambda s: None)
        if redo:
            say(f"redo: the rows of {', '.join(sorted(set(redo)))} are made again")
        _forget_rows(groups, out, done, redo, say)
        todo = [g for g in groups if any(tuple(k) not in done for k in g["keys"])]
        keys = [tuple(k) for g in groups for k in g["keys"]]
        say(f"study {study.name}: {len(groups)} runs, {len(keys)} rows; "
            f"{sum(k in done for k in keys)} done, {len(todo)} runs to do; results in {results}")
        from tqdm import tqdm
        bar = tqdm(total=sum(k not in done for k in keys), desc=f"study {study.name}",
                   unit="row", disable=not progress, leave=False)
        if progress and echo is not None:    # lines above the bar, not through it
            say = lambda s: bar.write(s, file=sys.stdout)  # noqa: E731
        writer = _Writer(results, dict(latest_rows(prior)), lambda r: say(_describe(r)),
                         on_row=lambda: bar.update(1), finished=set(done))
        t0 = time.perf_counter()
        try:
            if not todo:
                pass
            elif ray is not None:
                _run_ray(ray, ray_address, todo, out, set(done), writer, say)
            elif workers == 1:
                _quiet()
                for g in todo:
                    try:
                        run_group(g, out, set(done), writer.write, say)
                    except Exception as e:  # as in the workers: the run's rows become errors
                        writer.fail_group(g, _reason(e))
            else:
                _run_pool(todo, out, set(done), workers, writer, say)
        finally:
            writer.close()
            bar.close()
        rows = latest_rows(read_results(results))
        want = {tuple(k) for g in groups for k in g["keys"]}
        status = {}
        for k in want:
            s = rows.get(k, {}).get("status", "missing")
            status[s] = status.get(s, 0) + 1
        return {"study": study.name, "results": str(results), "rows": len(want),
                "status": status, "seconds": round(time.perf_counter() - t0, 1)}
    finally:
        lock.close()


def _forget_rows(groups: list[dict], out: Path, done: dict, redo, say: Callable[[str], None]
                 ) -> None:
    """Drop from `done` the rows to make again: those of the tasks named in `redo`, and those
    of every run trained with other hyperparameters than its group would train now (the run is
    then retrained)."""
    for g in groups:
        if f"{g['algo']}/{g['env']}" not in redo:
            changed = stale_hyperparameters(out / "runs" / run_dir_name(g["algo"], g["env"],
                                                                        g["seed"]), g)
            if not changed or not any(tuple(k) in done for k in g["keys"]):
                continue
            diffs = ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items())
            say(f"{g['algo']} {g['env']} seed {g['seed']}: trained with other hyperparameters "
                f"({diffs}): retrained, its rows redone")
        for k in g["keys"]:
            done.pop(tuple(k), None)


def _lock(out: Path):
    import fcntl
    f = (out / ".study.lock").open("w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise QuarlError(f"another study is running into {out} (lock {out / '.study.lock'})") from None
    return f


def _run_pool(todo: list[dict], out: Path, done: set, workers: int, writer: _Writer,
              say: Callable[[str], None]) -> None:
    import multiprocessing as mp
    import queue as queue_mod
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
    by_id = {(g["algo"], g["env"], g["seed"]): g for g in todo}
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


RAY_RETRIES = 3     # a Ray task whose worker process died is run again, up to this often


def _ray_group(group: dict, out_dir: str, done_keys: list):
    """A Ray task (a streaming generator): one run's training and host rows, each yielded as
    it is made, so the driver writes it at once. Board cells are tasks of their own. A failed
    training yields one {"kind": "_fail"} item."""
    import queue
    import threading
    _quiet()
    _limit_threads(1)     # the task's one CPU
    items: queue.Queue = queue.Queue()

    def work():
        try:
            run_group(group, Path(out_dir), {tuple(k) for k in done_keys},
                      lambda r: items.put(("row", r)), boards=False)
            items.put(("end", None))
        except BaseException as e:    # noqa: BLE001 (the driver gets the reason)
            items.put(("fail", _reason(e)))

    threading.Thread(target=work, daemon=True).start()
    where = where_row()
    while True:
        what, x = items.get()
        if what == "row":
            yield {**x, **where}
        elif what == "fail":
            yield {"kind": "_fail", "reason": x}
            return
        else:
            return


def _ray_board(group: dict, scheme: str, board_id: str, out_dir: str) -> dict:
    """A Ray task on a node that advertises board:<board_id>: one board cell's row."""
    _quiet()
    _limit_threads(1)
    return run_board_cell(group, scheme, board_id, Path(out_dir))


def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """A HOST:PORT --ray address must answer before ray.init, which would otherwise retry for
    minutes; "auto" and ray:// addresses are left to Ray."""
    import socket
    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise QuarlError(f"--ray takes the head's HOST:PORT (e.g. 127.0.0.1:6379) or 'auto', "
                         f"got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise QuarlError(f"no Ray cluster answers at {address} ({e.strerror or e}): start its "
                         "head with `quarl-edge farm-node --head` (docs/boards.md: Board "
                         "farm on Ray)") from None


def board_resource(board_id: str) -> str:
    """The Ray custom resource a node advertises for each instance of a board it can serve."""
    return f"board:{board_id}"


def _run_ray(ray, address: str, todo: list[dict], out: Path, done: set, writer: _Writer,
             say: Callable[[str], None]) -> None:
    """The groups as Ray tasks on an existing cluster: one per run (training and host cells,
    one CPU, any node), then one per board cell, which asks for {"board:<id>": 1} and so runs
    only on a node that advertises that board (quarl_edge/study/farm.py, `quarl-edge
    farm-node`). OUT must be on a filesystem every node sees (run directories are written and
    read there). Rows stream back as they are made and only this process writes them; a task
    whose worker died is retried (RAY_RETRIES) and the writer drops rows already written."""
    import contextlib
    real = sys.stdout

    def say_out(s: str) -> None:    # the study's own lines still go to its stdout
        with contextlib.redirect_stdout(real):
            say(s)

    # What Ray itself prints in this process (e.g. "(raylet) A worker died ...") goes to
    # stderr: stdout is the study's (--json prints only the summary there).
    echo = writer.echo

    def echo_out(row: dict) -> None:
        with contextlib.redirect_stdout(real):
            echo(row)

    writer.echo = echo_out
    with contextlib.redirect_stdout(sys.stderr):
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        try:
            _drive_ray(ray, todo, out, done, writer, say_out)
        finally:
            ray.shutdown()
            writer.echo = echo


def _drive_ray(ray, todo, out, done, writer, say) -> None:
    group_task = ray.remote(num_cpus=1, max_retries=RAY_RETRIES)(_ray_group)
    board_task = ray.remote(_ray_board)
    have = set(ray.cluster_resources())
    out_dir = str(out.resolve())
    done_keys = sorted(done, key=str)
    active: dict = {}     # ObjectRefGenerator or ObjectRef -> (what, group, key)
    failed: set = set()   # id() of the groups whose training failed

    def submit_boards(g):
        for k in map(tuple, g["keys"]):
            if k[0] != "board" or k in writer.finished:
                continue
            res = board_resource(k[5])
            if res not in have:
                writer.write({"kind": "board", "study": g.get("study"), "algo": k[1],
                              "env": k[2], "seed": k[3], "scheme": k[4], "board": k[5],
                              "status": "error",
                              "reason": f"no node of the Ray cluster advertises {res} "
                                        "(run `quarl-edge farm-node` on the machine that has "
                                        "the board)"})
                continue
            ref = board_task.options(num_cpus=1, resources={res: 1},
                                     max_retries=RAY_RETRIES).remote(g, k[4], k[5], out_dir)
            active[ref] = ("board", g, k)

    for g in todo:
        if any(k[0] != "board" and tuple(k) not in done for k in g["keys"]):
            active[group_task.remote(g, out_dir, done_keys)] = ("group", g, None)
        else:               # its run and host rows are done: only board cells to do
            submit_boards(g)
    say(f"ray: {len(active)} tasks on {len(ray.nodes())} nodes; boards advertised: "
        + (", ".join(sorted(r for r in have if r.startswith("board:"))) or "none"))
    while active:
        ready, _ = ray.wait(list(active), num_returns=1)
        handle = ready[0]
        what, g, key = active[handle]
        if what == "board":
            del active[handle]
            try:
                writer.write(ray.get(handle))
            except ray.exceptions.RayError as e:   # its worker died RAY_RETRIES + 1 times
                writer.write({"kind": "board", "study": g.get("study"), "algo": key[1],
                              "env": key[2], "seed": key[3], "scheme": key[4], "board": key[5],
                              "status": "error", "reason": _ray_reason(e)})
            continue
        try:
            row = ray.get(next(handle))
        except StopIteration:
            del active[handle]
            if id(g) not in failed:    # a failed training has no models for the boards
                submit_boards(g)
            continue
        except ray.exceptions.RayError as e:
            del active[handle]
            writer.fail_group(g, _ray_reason(e))
            continue
        if row.get("kind") == "_fail":
            failed.add(id(g))
            writer.fail_group(g, row["reason"])
        else:
            writer.write(row)


def _ray_reason(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"ray: {type(e).__name__}: {text[0] if text else ''}"[:300]
