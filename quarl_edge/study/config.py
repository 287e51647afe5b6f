"""A study file: the TOML config of a grid of (algo, env, seed, scheme) cells, parsed and checked.

The config (see studies/smoke.toml, studies/classic.toml):

    [study]
    name = "classic"
    seeds = [0, 1, 2]                 # training seeds
    schemes = ["fp32", "int8", ...]   # quantize.SCHEMES, and remedies.RUNNERS (int8-i16head)
    episodes = 20                     # greedy evaluation on test seeds 0..episodes-1 ...
    # eval_seeds = [0, 5, 7]          # ... or on these seeds
    calib_size = 1000                 # calibration observations (integer schemes)
    qat_steps = 5000                  # qat-int8: env steps of fine-tuning in the RL loop
    distill_steps = 4000              # qat-distill-*: env steps of student rollouts (QAT by
                                      # on-policy distillation; default qat.DistillConfig.steps)
    sweep_modes = ["weights+activations"]
    boards = ["host", "mps2-an386"]   # board cells: every scheme's model on each board; the
                                      # first emulated board counting exactly also times one
                                      # policy per network family op by op (plan.perop_plan)
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

qat-int8 and qat-int8x4 run for DQN only (the other algorithms' cells are "skipped");
qat-distill-int8 and qat-distill-int8x4 run for every algorithm, from the exported policy
network alone.

Everything in the config is checked before anything runs (unknown algo, env, scheme, option,
an algo that cannot act in an env's action space); errors name the offending entry.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

import gymnasium as gym

from ..core.errors import QuarlError
from ..core.names import SWEEP_MODES
from ..quant.remedies import RUNNERS as REMEDY_RUNNERS
from ..quant.schemes import SCHEMES
from ..core.envs import KNOWN_ENVS, MUJOCO_ENVS, missing_dependency_error
from ..rl.qat import DistillConfig, QATConfig
from ..rl.train import ALGOS, DEFAULTS
from ..core.schema import Key, check, check_value, unknown_keys
from ..targets.boards import get_board


# Limits, checked when the file is read, before anything is allocated or planned (a study file
# is input: `episodes = 1000000000` must not build a billion seeds). Far above any real study
# (the shipped ones: 5 seeds, 20 episodes, 1,000 calibration observations, 500,000 steps).
MAX_SEEDS = 1_000          # training seeds of a task, evaluation seeds
MAX_SEED = 2**32 - 1       # a seed numpy and Gymnasium take
MAX_EPISODES = 10_000      # evaluation episodes, HIL episodes per board cell
MAX_CALIB = 1_000_000      # calibration observations
MAX_VALIDATE = 100_000     # validate_n (validate's own --random limit)
MAX_STEPS = 10**9          # training, QAT and distillation env steps
MAX_TASKS = 1_000          # [[task]] and [[sweep]] tables
MAX_ROWS = 100_000         # rows of the whole grid (runs, cells, board cells, sweep points)

# What each table of a study file may hold (quarl_edge/core/schema.py checks the types and ranges;
# load_study checks the names: algorithms, environments, schemes).
CONFIG_KEYS = {"study": Key(dict), "task": Key(list, items=dict), "sweep": Key(list, items=dict)}
_SEEDS = Key(list, items=int, min=0, max=MAX_SEED, nonempty=True)
_EVALUATION = {"seeds": _SEEDS, "episodes": Key(int, min=1, max=MAX_EPISODES),
               "eval_seeds": _SEEDS, "calib_size": Key(int, min=1, max=MAX_CALIB)}
_SCHEMES = {"schemes": Key(list, items=str, nonempty=True),
            "qat_steps": Key(int, min=1, max=MAX_STEPS),
            "distill_steps": Key(int, min=1, max=MAX_STEPS)}
# Board cells (run_board_cell): the boards, BENCH's repeats, the calibration observations
# validated, the HIL episodes (the first N of the evaluation seeds; default all of them).
_BOARDS = {"boards": Key(list, items=str), "bench_n": Key(int, min=1, max=65535),
           "validate_n": Key(int, min=1, max=MAX_VALIDATE),
           "board_episodes": Key(int, min=1, max=MAX_EPISODES)}
STUDY_KEYS = {"name": Key(str, nonempty=True), "description": Key(str), **_EVALUATION,
              **_SCHEMES, **_BOARDS, "sweep_modes": Key(list, items=str, nonempty=True)}
TASK_KEYS = {"algo": Key(str, required=True), "env": Key(str, required=True),
             "steps": Key(int, min=1, max=MAX_STEPS),
             **_EVALUATION, **_SCHEMES, **_BOARDS, "options": Key(dict), "qat": Key(dict),
             "distill": Key(dict), "note": Key(str)}
SWEEP_KEYS = {"algo": Key(str, required=True), "env": Key(str, required=True),
              "bits": Key(list, items=int, nonempty=True),
              "modes": Key(list, items=str, nonempty=True), **_EVALUATION}
# The most items a list may hold (each item is checked by the keys above; a list longer than
# the choices it draws from repeats one, which the loaders refuse by name).
LIST_LIMITS = {"seeds": MAX_SEEDS, "eval_seeds": MAX_SEEDS, "schemes": 100, "boards": 100,
               "sweep_modes": 10, "modes": 10, "bits": 15}


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


def _checked(table, keys: dict, where: str) -> dict:
    """schema.check, and no list longer than LIST_LIMITS says (before its items are read)."""
    if isinstance(table, dict):
        for key, limit in LIST_LIMITS.items():
            value = table.get(key)
            if key in keys and isinstance(value, list) and len(value) > limit:
                raise QuarlError(f"{where}: '{key}' holds {len(value):,} items; at most "
                                 f"{limit:,}")
    return check(table, keys, where)


def _eval_seeds(d: dict, default: list[int], where: str) -> list[int]:
    if "eval_seeds" in d and "episodes" in d:
        raise QuarlError(f"{where}: give either episodes or eval_seeds, not both")
    if "eval_seeds" in d:
        seeds = [int(s) for s in d["eval_seeds"]]
    elif "episodes" in d:
        seeds = list(range(d["episodes"]))    # (1..MAX_EPISODES: the keys' check)
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
    try:
        env = gym.make(env_id)
    except (gym.error.DependencyNotInstalled, ImportError) as e:
        raise QuarlError(f"{where}: {missing_dependency_error(env_id, e)}") from None
    except gym.error.Error as e:
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
    path = Path(path)
    raw = _read_toml(path)
    check(raw, CONFIG_KEYS, str(path))
    for table in ("task", "sweep"):
        if len(raw.get(table, [])) > MAX_TASKS:
            raise QuarlError(f"{path}: {len(raw[table]):,} [[{table}]] tables; at most "
                             f"{MAX_TASKS:,}")
    top = _checked(raw.get("study", {}), STUDY_KEYS, f"{path} [study]")
    name = str(top.get("name", path.stem))
    defaults = _study_defaults(top, f"{path} [study]")
    tasks: list[Task] = []
    seen: set = set()
    for i, t in enumerate(raw.get("task", [])):
        tasks.append(_load_task(t, defaults, seen, f"{path} [[task]] #{i + 1}"))
    if not tasks:
        raise QuarlError(f"{path}: no [[task]] entries")
    by_task = {(t.algo, t.env): t for t in tasks}
    sweeps = [_load_sweep(s, by_task, defaults["sweep_modes"], f"{path} [[sweep]] #{i + 1}")
              for i, s in enumerate(raw.get("sweep", []))]
    _check_size(tasks, sweeps, path)
    return Study(name, tasks, sweeps, path)


def _check_size(tasks: list[Task], sweeps: list[Sweep], path: Path) -> None:
    """The grid's rows (as study/plan.py lays them out), counted without listing them: at most
    MAX_ROWS."""
    rows = sum(len(t.seeds) * (1 + len(t.schemes) * (1 + len(t.boards))) for t in tasks)
    rows += sum(len(s.seeds) * len(s.modes) * len(s.bits) for s in sweeps)
    if rows > MAX_ROWS:
        raise QuarlError(f"{path}: the grid has {rows:,} rows (tasks x seeds x schemes x "
                         f"boards, and sweeps); at most {MAX_ROWS:,}")


def _read_toml(path: Path) -> dict:
    if not path.is_file():
        raise QuarlError(f"study config {path} not found")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise QuarlError(f"{path}: invalid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise QuarlError(f"{path}: not UTF-8 text (TOML is UTF-8): byte {e.start}") from None


def _study_defaults(top: dict, where: str) -> dict:
    """The [study] table's values a [[task]] (or [[sweep]]) falls back on."""
    return {"seeds": [int(s) for s in top.get("seeds", [0])],
            "schemes": list(top.get("schemes", ["fp32", "int8"])),
            "eval_seeds": _eval_seeds(top, list(range(20)), where),
            "calib_size": int(top.get("calib_size", 1000)),
            "qat_steps": int(top.get("qat_steps", 5000)),
            "distill_steps": top.get("distill_steps"),
            "sweep_modes": list(top.get("sweep_modes", ["weights+activations"])),
            "boards": _board_ids(top.get("boards", []), where),
            "board_episodes": top.get("board_episodes"),
            "bench_n": top.get("bench_n", Task.bench_n),
            "validate_n": top.get("validate_n", Task.validate_n)}


def _load_task(t: dict, defaults: dict, seen: set, where: str) -> Task:
    """One [[task]] table, checked; `seen`: the (algo, env) pairs of the tasks before it."""
    _checked(t, TASK_KEYS, where)
    algo, env_id = str(t["algo"]), str(t["env"])
    where = f"{where} ({algo}, {env_id})"
    if algo not in ALGOS:
        raise QuarlError(f"{where}: unknown algorithm {algo!r}; known: {', '.join(ALGOS)}")
    if (algo, env_id) in seen:
        raise QuarlError(f"{where}: ({algo}, {env_id}) appears twice")
    seen.add((algo, env_id))
    schemes = _schemes(list(t.get("schemes", defaults["schemes"])), where)
    config_cls = ALGOS[algo][0]
    options = _known_options(t.get("options", {}), config_cls, algo, where)
    qat = _known_options(t.get("qat", {}), QATConfig, "qat", where)
    distill = _known_options(t.get("distill", {}), DistillConfig, "distill", where)
    distill_steps = t.get("distill_steps", defaults["distill_steps"])
    try:
        DistillConfig(**distill, **({} if distill_steps is None
                                     else {"steps": int(distill_steps)}))
    except (QuarlError, TypeError, ValueError) as e:
        raise QuarlError(f"{where}: invalid distill options: {e}") from None
    steps = t.get("steps")
    _check_env(algo, env_id, where)
    boards = _board_ids(t["boards"], where) if "boards" in t else defaults["boards"]
    b_episodes = t.get("board_episodes", defaults["board_episodes"])
    t_eval = _eval_seeds(t, defaults["eval_seeds"], where)
    if b_episodes is not None and int(b_episodes) > len(t_eval):
        raise QuarlError(f"{where}: board_episodes = {b_episodes} but there are only "
                         f"{len(t_eval)} evaluation seeds")
    try:  # the algo's config dataclass checks the values too
        config_cls(**{**DEFAULTS.get((algo, env_id), {}), **options,
                      **({"steps": int(steps)} if steps is not None else {})})
    except TypeError as e:
        raise QuarlError(f"{where}: invalid options: {e}") from None
    return Task(algo, env_id, None if steps is None else int(steps),
                [int(s) for s in t.get("seeds", defaults["seeds"])], schemes,
                t_eval, int(t.get("calib_size", defaults["calib_size"])),
                int(t.get("qat_steps", defaults["qat_steps"])), options, qat,
                None if distill_steps is None else int(distill_steps), distill,
                boards, int(t.get("bench_n", defaults["bench_n"])),
                int(t.get("validate_n", defaults["validate_n"])),
                None if b_episodes is None else int(b_episodes))


def _schemes(schemes: list[str], where: str) -> list[str]:
    """A task's schemes, each a quantization scheme or a tie remedy, none twice."""
    for s in schemes:
        if s not in SCHEMES and s not in REMEDY_RUNNERS:
            raise QuarlError(f"{where}: unknown quantization scheme {s!r}; known: "
                             f"{', '.join([*SCHEMES, *REMEDY_RUNNERS])}")
    if len(set(schemes)) != len(schemes):
        raise QuarlError(f"{where}: a scheme is listed twice in {schemes}")
    return schemes


def _load_sweep(s: dict, by_task: dict, default_modes: list[str], where: str) -> Sweep:
    """One [[sweep]] table, checked against the task it sweeps (`by_task`: (algo, env) -> Task)."""
    _checked(s, SWEEP_KEYS, where)
    key = (str(s.get("algo")), str(s.get("env")))
    if key not in by_task:
        raise QuarlError(f"{where}: ({key[0]}, {key[1]}) is not a [[task]] of this study")
    task = by_task[key]
    bits = [int(b) for b in s.get("bits", range(2, 9))]
    bad = [b for b in bits if not 2 <= b <= 16]
    if bad:
        raise QuarlError(f"{where}: bits must be in 2..16, got {bad}")
    modes = list(s.get("modes", default_modes))
    for m in modes:
        if m not in SWEEP_MODES:
            raise QuarlError(f"{where}: unknown sweep mode {m!r}; known: "
                             f"{', '.join(SWEEP_MODES)}")
    seeds = [int(x) for x in s.get("seeds", task.seeds)]
    if not set(seeds) <= set(task.seeds):
        raise QuarlError(f"{where}: seeds {seeds} are not all trained by the task "
                         f"(seeds {task.seeds})")
    return Sweep(key[0], key[1], bits, modes, seeds, _eval_seeds(s, task.eval_seeds, where),
                 int(s.get("calib_size", task.calib_size)))
