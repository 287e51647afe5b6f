"""Policies trained elsewhere, on a board: each is imported (`quarl-edge import`), quantized to
fp32 and int8, and played for 20 episodes on seeds 0..19 with the board choosing every action
(`quarl-edge hil`), through the Python API. One row per policy:

    source return   the source framework's own greedy return on the same seeds (SB3's
                    predict, recorded beside the fixture by tests/fixtures/sb3/make_fixtures.py;
                    for the TF-Agents policy, its SavedModel's action signature played here)
    fp32            the imported fp32 network (Keras)
    int8 tflite-rt  the int8 model on tflite-runtime (its int8 TANH/LOGISTIC kernels round
                    differently from TF Lite Micro's, so tanh networks can differ)
    int8 TFLM       the int8 model on TF Lite Micro's reference kernels (host)
    int8 board      the int8 model on the board
    board = TFLM    every one of the board's 20 returns equal to TF Lite Micro's
    agreement       share of the board's actions equal to the fp32 network's on its states
                    (continuous actions: 1 - mean normalised distance)
    instructions    the board's cost per inference (QEMU -icount: instructions)
    flash, RAM      the int8 firmware's

    .venv/bin/python benchmarks/import_table.py [--board mps2-an386] [--episodes 20] [--md FILE]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "sb3"
SOURCES = [  # (label, file, env)
    ("SB3 DQN", "dqn_cartpole.zip", "CartPole-v1"),
    ("SB3 A2C", "a2c_cartpole.zip", "CartPole-v1"),
    ("SB3 PPO (discrete)", "ppo_lunar.zip", "LunarLander-v3"),
    ("SB3 SAC", "sac_pendulum.zip", "Pendulum-v1"),
    ("SB3 TD3", "td3_mountaincar.zip", "MountainCarContinuous-v0"),
    ("SB3 PPO + VecNormalize", "ppo_vecnorm_pendulum.zip", "Pendulum-v1"),
    ("SB3 DQN CnnPolicy (40x40 images)", "dqn_catch_cnn.zip", "QuarlEdge/Catch-v0"),
    ("ONNX Q-network (torch export)", "onnx_cartpole_q.onnx", "CartPole-v1"),
    ("ONNX actor (torch export)", "onnx_pendulum_actor.onnx", "Pendulum-v1"),
    ("ONNX CNN (torch export, NHWC images)", "onnx_catch_cnn.onnx", "QuarlEdge/Catch-v0"),
    ("TF-Agents SavedModel", ROOT / "examples" / "cartpole_dqn" / "policy", "CartPole-v1"),
]


def source_return(path: Path, env_id: str, episodes: int) -> float:
    exp = path.parent / (path.stem + ".expected.npz")
    if exp.is_file():
        r = np.load(exp)["returns"][:episodes]
        return float(np.mean(r))
    # a SavedModel: play its own action signature
    import tensorflow as tf
    import tf_agents.policies  # noqa: F401
    from quarl_edge.measure.episodes import play
    policy = tf.saved_model.load(str(path))
    act = policy.signatures["action"]
    spec = act.structured_input_signature[1]
    key = next(k for k in spec if k.endswith("observation"))

    def f(o):
        out = act(**{key: tf.constant(o[None].astype(np.float32)),
                     **{k: tf.zeros((1,), s.dtype) for k, s in spec.items() if k != key}})
        return int(out["action"].numpy()[0])
    returns, _, _ = play(env_id, f, list(range(episodes)))
    return float(np.mean(returns))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--board", default="mps2-an386")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--md", type=Path, default=None, help="also write the table here")
    a = p.parse_args(argv)
    import quarl_edge as qe
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, name, env_id in SOURCES:
            src = FIX / name if isinstance(name, str) else name
            t0 = time.time()
            run = Path(tmp) / src.stem
            imp = qe.import_policy(src, out=run, env=env_id)
            qe.quantize(run, ["fp32", "int8"])
            res = qe.hil(run, a.board, scheme="int8", episodes=a.episodes)
            fid = imp.fidelity
            rows.append([label, env_id, f"{source_return(src, env_id, a.episodes):.1f}",
                         f"{res.fp32_mean_return:.1f}", f"{res.tflite_mean_return:.1f}",
                         f"{res.micro_mean_return:.1f}", f"{res.mean_return:.1f}",
                         "yes" if res.matches_reference else "NO",
                         f"{res.agreement:.3f}",
                         f"{fid.get('argmax_agreement', 1.0 - fid.get('max_abs_error_actions', 0)):.3f}"
                         if "argmax_agreement" in fid else f"{fid['max_abs_error_actions']:.1e}",
                         f"{res.latency.median:,.0f}", f"{res.memory.get('flash_bytes', 0):,}",
                         f"{res.memory.get('ram_bytes', 0):,}"])
            print(" | ".join(rows[-1]), f"({time.time() - t0:.0f} s)", file=sys.stderr)
    head = ["source", "env", "source return", "fp32", "int8 tflite-rt", "int8 TFLM",
            "int8 board", "board = TFLM", "agreement", "import check", "instructions", "flash B", "RAM B"]
    lines = [f"Imported policies on {a.board}, {a.episodes} episodes (seeds 0..{a.episodes - 1}),"
             f" made by `python benchmarks/import_table.py --board {a.board} --episodes "
             f"{a.episodes}`. import check: argmax agreement (discrete) or max abs action error "
             "(continuous) of the imported network against the source on 1,000 env "
             "observations.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.md:
        a.md.parent.mkdir(parents=True, exist_ok=True)
        tmp_md = a.md.with_name(a.md.name + ".tmp")
        tmp_md.write_text(text)
        tmp_md.replace(a.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
