"""Reproduce the shipped CartPole DQN example run and its table of returns.

    python examples/cartpole_dqn/reproduce.py            # train (seed 0), quantize, evaluate
    python examples/cartpole_dqn/reproduce.py --eval     # only evaluate the shipped models

Evaluation: the greedy policy of each .tflite model (tflite-runtime) on test seeds 0..19.
Agreement: on the states the fp32 policy visits on those seeds, the fraction where a model picks
the same action as fp32; ties: the fraction of those states where its two outputs are equal
(argmax then picks action 0).
"""
from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from quarl_edge.rl.tf_env import make_env, run_episode  # noqa: E402
from quarl_edge.measure.reference import tflite_runner  # noqa: E402
from quarl_edge.measure.selection import int8_judge  # noqa: E402
from quarl_edge.quant.schemes import quantize  # noqa: E402
from quarl_edge.rl.train import train  # noqa: E402
from quarl_edge.core.run import load_run  # noqa: E402

RUN = Path(__file__).resolve().parent
SCHEMES = ("fp32", "fp16", "int8")
TEST_SEEDS = range(20)


def evaluate(run_dir: Path) -> dict:
    env = make_env(load_run(run_dir)["env"])
    runners = {s: tflite_runner(run_dir / "models" / f"{s}.tflite") for s in SCHEMES}
    results, fp32_states = {}, []
    for scheme, run in runners.items():
        returns = []
        for seed in TEST_SEEDS:
            ret, states = run_episode(env, lambda o: int(np.argmax(run(o))), seed)
            returns.append(ret)
            if scheme == "fp32":
                fp32_states.append(states)
        results[scheme] = {"returns": returns, "mean": float(np.mean(returns))}
    states = np.concatenate(fp32_states)
    q32 = np.stack([runners["fp32"](s) for s in states])
    gap = np.abs(q32[:, 0] - q32[:, 1]) if q32.shape[1] == 2 else None
    for scheme, run in runners.items():
        q = np.stack([run(s) for s in states])
        results[scheme]["agreement"] = float(np.mean(q.argmax(1) == q32.argmax(1)))
        top2 = np.sort(q, axis=1)[:, -2:]
        results[scheme]["ties"] = float(np.mean(top2[:, 1] == top2[:, 0]))
        results[scheme]["size"] = (run_dir / "models" / f"{scheme}.tflite").stat().st_size
    results["states"] = len(states)
    if gap is not None:
        results["fp32_gap_median"] = float(np.median(gap))
        results["fp32_q_range"] = [float(q32.min()), float(q32.max())]
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval", action="store_true", help="only evaluate the existing models")
    ap.add_argument("--run", type=Path, default=RUN, help="run directory (default: this folder)")
    args = ap.parse_args()
    run_dir = args.run
    if not args.eval:
        for stale in ("policy", "models"):
            shutil.rmtree(run_dir / stale, ignore_errors=True)
        info = train("CartPole-v1", "dqn", None, 0, run_dir, judge=int8_judge)
        print(f"trained in {info['train_seconds']:.0f} s, best greedy validation return "
              f"{info['best_greedy_return']:.1f} at step {info['best_step']}")
        for scheme in SCHEMES:
            quantize(run_dir, scheme)
    res = evaluate(run_dir)
    print(f"\ngreedy return over test seeds 0..19 ({res['states']} fp32-visited states)")
    print("| model | size (B) | mean return | min | agreement with fp32 | output ties |")
    print("|---|---:|---:|---:|---:|---:|")
    for s in SCHEMES:
        r = res[s]
        print(f"| {s} | {r['size']:,} | {r['mean']:.1f} | {min(r['returns']):.0f} | "
              f"{r['agreement']:.3f} | {r['ties']:.3f} |")
    print(f"\nint8 / fp32 return: {res['int8']['mean'] / res['fp32']['mean']:.3f}")
    if "fp32_gap_median" in res:
        lo, hi = res["fp32_q_range"]
        print(f"fp32 Q-values on those states: {lo:.1f} .. {hi:.1f}; "
              f"median action gap {res['fp32_gap_median']:.3f}")


if __name__ == "__main__":
    main()
