"""The study's plan: which rows each (algo, env, seed) yields, and which schemes do not apply.

A *run* is one training of (algo, env, seed), cached in OUT/runs/<algo>-<env>-s<seed>/ and reused
by all its schemes and sweep points: the cells of one run form a group, and a group is the unit
of work of a worker, so the same run is never trained twice concurrently.
"""
from __future__ import annotations

from .config import Study

# Algorithms whose RL loop qat.py can fine-tune in (qat.qat_finetune refuses the others).
QAT_ALGOS = ("dqn",)


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
