"""The study's plan: which rows each (algo, env, seed) yields, and which schemes do not apply.

A *run* is one training of (algo, env, seed), cached in OUT/runs/<algo>-<env>-s<seed>/ and reused
by all its schemes and sweep points: the cells of one run form a group, and a group is the unit
of work of a worker, so the same run is never trained twice concurrently.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..quant import remedies
from ..rl.train import resolve_config
from ..targets.boards import get_board
from .config import Study, Sweep, Task

# Algorithms whose RL loop qat.py can fine-tune in (qat.qat_finetune refuses the others).
QAT_ALGOS = ("dqn",)
# The schemes made by fine-tuning in the RL loop (8-bit weights, and 4-bit: rl/qat_lowbit.py).
QAT_SCHEMES = ("qat-int8", "qat-int8x4")
# The schemes made by on-policy distillation (every algorithm), with their weights' bits.
DISTILL_SCHEMES = {"qat-distill-int8": 8, "qat-distill-int8x4": 4}


def scope(scheme: str) -> str | None:
    """What a task needs for `scheme` to apply, for the schemes that do not apply to every task
    (the rule of not_applicable, in words); None for the others."""
    if scheme in QAT_SCHEMES:
        return (f"fine-tunes in the RL loop of {', '.join(a.upper() for a in QAT_ALGOS)} only "
                "(quarl_edge/rl/qat.py)")
    if scheme in remedies.NAMES:
        return "a tie remedy for argmax heads: discrete actions only (quarl_edge/quant/remedies.py)"
    return None


def not_applicable(scheme: str, algo: str, env_id: str, argmax_head: bool) -> str | None:
    """Why `scheme` does not apply to (algo, env): the reason its cell is recorded "skipped"
    with; None when it applies. `argmax_head`: the env's actions are discrete."""
    if scheme in QAT_SCHEMES and algo not in QAT_ALGOS:
        return (f"{scheme} fine-tunes in the RL loop of {', '.join(QAT_ALGOS)} only "
                f"(quarl_edge/rl/qat.py); {algo} is not supported")
    if scheme in remedies.NAMES and not argmax_head:
        return (f"{scheme} is a remedy for argmax heads (quarl_edge/quant/remedies.py); "
                f"{env_id} has continuous actions")
    return None


# The per-op cells (kind "perop", cells.run_perop_cell): per network family one policy, its
# fp32 and int8 models, on one board. A board's counter is exact when it counts instructions
# (QEMU -icount) or cycles (simavr): the same op costs the same every time, so the ops add up
# to the whole inference within the timer's overhead alone; the host's wall clock does not.
PEROP_SCHEMES = ("fp32", "int8")
# The kinds of rows made on a board (key: kind, algo, env, seed, scheme, board): a group makes
# them after its other rows; on Ray each is a task of its own on a node that has the board.
BOARD_KINDS = ("board", "perop")
EXACT_UNITS = ("instructions", "cycles")


def family(task: Task) -> str:
    """The network family a task trains, from the config train would use: "lstm" (a recurrent
    PPO policy, net = "lstm"), "cnn" (conv layers: the MinAtar DQN) or "mlp"."""
    config = resolve_config(task.algo, task.env, task.steps, **task.options)
    if getattr(config, "net", "mlp") == "lstm":
        return "lstm"
    return "cnn" if getattr(config, "conv", ()) else "mlp"


def perop_board(task: Task) -> str | None:
    """The board a task's per-op cells run on: the first of its boards that is emulated and
    counts exactly (EXACT_UNITS); None when it has none."""
    for board_id in task.boards:
        board = get_board(board_id)
        if board.kind == "emulated" and board.cost_unit in EXACT_UNITS:
            return board_id
    return None


def perop_plan(study: Study) -> dict[tuple, tuple[str, str, list[str]]]:
    """{(algo, env, seed): (family, board, schemes)}: per network family in the grid, the first
    task (in the file's order) that has a per-op board and fp32 or int8 among its schemes, on
    its first training seed."""
    chosen, seen = {}, set()
    for t in study.tasks:
        fam = family(t)
        board = perop_board(t)
        schemes = [s for s in PEROP_SCHEMES if s in t.schemes]
        if fam in seen or board is None or not schemes:
            continue
        seen.add(fam)
        chosen[(t.algo, t.env, t.seeds[0])] = (fam, board, schemes)
    return chosen


def run_dir_name(algo: str, env_id: str, seed: int) -> str:
    return f"{algo}-{env_id}-s{seed}"


@dataclass
class Group:
    """The work of one (algo, env, seed): its task as the study file gave it (training budget,
    schemes, evaluation seeds, boards), the sweeps on it and the keys of the rows it yields. The
    unit of work of a worker, passed whole to the process or Ray task that runs it."""
    task: Task
    seed: int
    sweeps: list[Sweep]          # the task's [[sweep]]s that take this seed
    keys: list[tuple]            # the rows' keys (results.row_key), in the order they are made
    study: str | None = None     # the study's name, in every row

    @property
    def algo(self) -> str:
        return self.task.algo

    @property
    def env(self) -> str:
        return self.task.env

    @property
    def board_seeds(self) -> list[int]:
        """The seeds the board cells play: the first board_episodes evaluation seeds (all by
        default)."""
        t = self.task
        return t.eval_seeds[:t.board_episodes or len(t.eval_seeds)]


def plan(study: Study) -> list[Group]:
    """The groups of work, one per (algo, env, seed): what to train and which rows it yields
    (the per-op cells of perop_plan's policies last)."""
    groups = []
    perop = perop_plan(study)
    for t in study.tasks:
        sweeps = [s for s in study.sweeps if (s.algo, s.env) == (t.algo, t.env)]
        for seed in t.seeds:
            keys = [("run", t.algo, t.env, seed)]
            keys += [("cell", t.algo, t.env, seed, s) for s in t.schemes]
            keys += [("board", t.algo, t.env, seed, s, b) for s in t.schemes for b in t.boards]
            sw = [s for s in sweeps if seed in s.seeds]
            for s in sw:
                keys.append(("sweep", t.algo, t.env, seed, "fp32", 32))
                keys += [("sweep", t.algo, t.env, seed, m, b) for m in s.modes for b in s.bits]
            if (t.algo, t.env, seed) in perop:
                _, board, schemes = perop[(t.algo, t.env, seed)]
                keys += [("perop", t.algo, t.env, seed, s, board) for s in schemes]
            groups.append(Group(t, seed, sw, list(dict.fromkeys(keys)), study.name))
    return groups
