"""MinAtar pixel tasks (issue 14): the registered envs (float 0/1 images, minimal action sets,
seeded), and a CNN DQN on one of them through the whole pipeline: a short real TF-Agents
training, the real TFLite converter's fp32 / int8 / int16x8 models, validate bit-exact on the
host board on the run's calibration observations. (The study's minatar grid, with its
training budget, is a long run, not a test.)"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("minatar", reason="MinAtar is not installed (scripts/setup.sh installs it)")

from quarl_edge import api  # noqa: E402
from quarl_edge.rl.envs import make_gym  # noqa: E402
from quarl_edge.rl.minatar import ENV_IDS  # noqa: E402


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_the_envs_are_seeded_float_images(env_id):
    env = make_gym(env_id)
    obs, _ = env.reset(seed=5)
    assert obs.dtype == np.float32 and obs.shape[:2] == (10, 10)
    assert set(np.unique(obs)) <= {0.0, 1.0} and env.observation_space.contains(obs)

    def episode(seed):
        rng = np.random.default_rng(seed)
        o, _ = env.reset(seed=seed)
        frames, total = [o], 0.0
        for _ in range(200):
            o, r, term, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
            frames.append(o)
            total += r
            if term or trunc:
                break
        return np.stack(frames), total
    a, b, c = episode(1), episode(1), episode(2)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1]          # the same seed, the same game
    assert a[0].shape != c[0].shape or not np.array_equal(a[0], c[0])


def test_a_cnn_dqn_trains_quantizes_and_validates_bit_exact(tmp_path):
    run = tmp_path / "run"
    res = api.train("QuarlEdge/MinAtar-Breakout-v0", "dqn", out=run, steps=600, seed=0,
                    learning_starts=200, eval_every=600, eval_episodes=2,
                    epsilon_decay_steps=400, updates_per_train=16, buffer_size=2000)
    info = json.loads((run / "run.json").read_text())
    assert info["network"] == {"type": "cnn", "conv": [[16, 3, 1]], "hidden": [128],
                               "activation": "relu"}
    assert res.steps == 600 and (run / "qnet.keras").is_file()
    api.quantize(run, ["fp32", "int8", "int16x8"], calib_size=64)
    calib = np.load(run / "calibration.npy")
    assert calib.shape == (64, 10, 10, 4)
    sizes = {}
    for scheme in ("fp32", "int8", "int16x8"):
        v = api.validate(run / "models" / f"{scheme}.tflite", "host",
                         inputs=run / "calibration.npy", out=tmp_path / f"b-{scheme}")
        assert v.n == 64 and v.bit_exact and v.differing == 0, (scheme, v)
        sizes[scheme] = v.memory["flash_bytes"]
    assert sizes["int8"] < sizes["fp32"] / 2        # 131k weights: int8 is ~4x smaller
