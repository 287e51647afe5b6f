"""The RL Zoo fixtures (tests/fixtures/rl-zoo/, seven of DLR-RM/rl-trained-agents' run folders)
and what test_rl_zoo.py and test_rl_zoo_input.py read of them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "tests" / "fixtures" / "rl-zoo"
# run folder -> the env id it is played on
AGENTS = {"ppo/CartPole-v1_1": "CartPole-v1", "ppo/LunarLander-v2_1": "LunarLander-v3",
          "dqn/Acrobot-v1_1": "Acrobot-v1", "sac/Pendulum-v1_1": "Pendulum-v1",
          "ppo/MountainCar-v0_1": "MountainCar-v0",
          "a2c/MountainCarContinuous-v0_1": "MountainCarContinuous-v0",
          "a2c/LunarLanderContinuous-v2_1": "LunarLanderContinuous-v3"}
CLIPPING = "a2c/LunarLanderContinuous-v2_1"     # VecNormalize's clip reachable: a clip layer


def cli(*args):
    return subprocess.run([sys.executable, "-m", "quarl_edge.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def expected(folder: str):
    algo, run = folder.split("/")
    return np.load(ZOO / "expected" / f"{algo}-{run.rsplit('_', 1)[0]}.npz")


def zoo_zip(folder: str) -> Path:
    return ZOO / folder / f"{folder.split('/')[1].rsplit('_', 1)[0]}.zip"
