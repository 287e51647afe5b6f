"""Training speed: env steps per second and wall time per (algo, task), with the return reached.
Optionally side by side with another revision of quarl-edge (`--against REV`, extracted with
`git archive`): the two trees train in turn, task after task and round after round, so that a
busy machine slows both alike; medians over the rounds are printed, and their ratio.

    .venv/bin/python benchmarks/train_speed.py [--tasks dqn:CartPole-v1:10000,...]
                                               [--rounds 1] [--seeds 0] [--against REV]

Per task and tree (medians over the rounds):
  steps/s    env steps per second of the training loop: steps / run.json's train_seconds (the
             loop, validations and DQN's int8 checkpoint judge included; imports, agent set-up
             and the export after it not)
  train s    run.json's train_seconds
  process s  the whole `train` call in its own process (TensorFlow's import, the export too)
  best       best greedy validation return (seeds 10_000 + k), its mean over the training
             seeds (--seeds 0,1,2,...) and each seed's (step): where a change keeps a seed's
             random draws, the same seed reaches the same return in both trees; where it draws
             other numbers (SAC's and PPO's numpy collect policies), compare the means
DQN trains as `quarl-edge demo` does (with the int8 judge); each task with its tuned defaults
(quarl_edge/rl/defaults.py) but the number of steps.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from revtree import tree_of

ROOT = Path(__file__).resolve().parents[1]
TASKS = "dqn:CartPole-v1:10000,ppo:CartPole-v1:8192,sac:Pendulum-v1:5000"


def measure(algo: str, env_id: str, steps: int, seed: int) -> dict:
    """Train once into a temporary run directory (in this process); its figures."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from quarl_edge.rl.train import train
    judge = None
    if algo == "dqn":
        from quarl_edge.measure.selection import int8_judge
        judge = int8_judge
    with tempfile.TemporaryDirectory() as tmp:
        info = train(env_id, algo, steps, seed, Path(tmp) / "run", progress=False, judge=judge)
    return {"train_seconds": info["train_seconds"], "best": info["best_greedy_return"],
            "best_step": info["best_step"], "steps": steps}


def _one(tree: Path, task: str, seed: int) -> dict:
    """One training of `task` with the quarl_edge of `tree`, in a child process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one", task,
                          "--seeds", str(seed)], env=env, capture_output=True, text=True, cwd=tree)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{task} on {tree}: {out.stderr.strip()[-2000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "process_seconds": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=TASKS, help=f"algo:env:steps,... (default {TASKS})")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seeds", default="0", help="training seeds, comma separated (default 0)")
    ap.add_argument("--against", metavar="REV", help="also measure this git revision, in turn")
    ap.add_argument("--one", metavar="TASK", help=argparse.SUPPRESS)   # a child: one training
    a = ap.parse_args()
    if a.one:
        algo, env_id, steps = a.one.split(":")
        print(json.dumps(measure(algo, env_id, int(steps), int(a.seeds))))
        return
    tasks = a.tasks.split(",")
    seeds = [int(x) for x in a.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this": ROOT}
        if a.against:
            trees[a.against[:10]] = tree_of(a.against, Path(tmp))
        results: dict[tuple[str, str], list[dict]] = {}
        for _ in range(a.rounds):
            for seed in seeds:
                for task in tasks:
                    for label, tree in trees.items():
                        results.setdefault((task, label), []).append(_one(tree, task, seed))
        load = os.getloadavg()
    print(f"Training speed, seeds {a.seeds}, {a.rounds} round(s) each (medians); load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, {os.cpu_count()} CPUs")
    print(f"{'algo':5s} {'task':14s} {'steps':>6s} {'tree':10s} {'steps/s':>8s} {'train s':>8s} "
          f"{'process s':>9s} {'speed-up':>8s}  best: mean: per seed (step)")
    for task in tasks:
        algo, env_id, steps = task.split(":")
        rates = {}
        for label in trees:
            rs = results[(task, label)]
            train_s = statistics.median(r["train_seconds"] for r in rs)
            rates[label] = int(steps) / train_s
            firsts = rs[:len(seeds)]   # the first round's seeds (a seed's best is the same)
            best = (f"{statistics.mean(r['best'] for r in firsts):.1f}: "
                    + ", ".join(f"{r['best']:.1f} ({r['best_step']})" for r in firsts))
            ratio = "" if label == "this" else f"{rates['this'] / rates[label]:7.2f}x"
            print(f"{algo:5s} {env_id:14s} {int(steps):6d} {label:10s} {rates[label]:8.0f} "
                  f"{train_s:8.1f} {statistics.median(r['process_seconds'] for r in rs):9.1f} "
                  f"{ratio:>8s}  {best}")
    if a.against:
        print(f"speed-up: steps/s of this tree over {a.against}'s, task by task")


if __name__ == "__main__":
    main()
