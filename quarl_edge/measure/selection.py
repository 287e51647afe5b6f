"""Deployment-aware checkpoint selection: how training ranks checkpoints that tie on the fp32
validation return by what they return once quantized.

`int8_judge` is the judge DQN's `select_int8` takes (quarl_edge/rl/dqn.py): the candidate
Q-network converted to full int8 by the real TFLite converter, calibrated exactly like
`quarl-edge quantize` does it, and played greedily on tflite-runtime on the validation seeds.
It lives here, after the rl and quant stages, so that training itself imports no converter:
the caller (the Python API, the CLI, a study) hands it to `quarl_edge.rl.train.train`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.files import write_atomic
from ..quant.calibration import rollout_observations
from ..quant.schemes import convert_keras
from ..core.nets import keras_runner
from ..core.run import VALIDATION_SEED_BASE
from .reference import tflite_batch_runner
from ..core.envs import play_batched


def int8_judge(env_id: str, val_env, model, n_actions: int, episodes: int,
               workdir: Path) -> float:
    """Greedy validation return of `model` converted to full int8 as `quantize` would do it:
    mean over `episodes` episodes of `val_env` (a TF-Agents env of `env_id`) on the validation
    seeds. The candidate .tflite is written to `workdir` and removed. The episodes play in
    lockstep, one batched invoke a step (`val_env` is not stepped: each episode is a fresh env
    of `env_id` reset with its seed, which is what one reset(seed) of `val_env` gave)."""

    calibration = rollout_observations(env_id, keras_runner(model), n_actions)
    path = Path(workdir) / "candidate-int8.tflite"
    write_atomic(path, convert_keras(model, "int8", calibration))
    try:
        seeds = [VALIDATION_SEED_BASE + k for k in range(episodes)]
        returns = play_batched(env_id, tflite_batch_runner(path), seeds, head="argmax")[0]
    finally:
        path.unlink(missing_ok=True)
    return float(np.mean(returns))
