"""MuJoCo tasks (HalfCheetah-v5, Hopper-v5; the optional `mujoco` extra): the study grid is valid
and matches train.DEFAULTS, a tiny real SAC run on HalfCheetah-v5 quantizes to an all-integer
int8 actor that tflite-runtime runs in the environment, and a missing wheel gives an error that
says what to install."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MUJOCO_TASKS = {("sac", "HalfCheetah-v5"), ("td3", "HalfCheetah-v5"), ("sac", "Hopper-v5"),
                ("td3", "Hopper-v5")}


def _mujoco_missing() -> str:
    """Why the MuJoCo environments cannot run here ("" if they can)."""
    import gymnasium as gym
    try:
        gym.make("HalfCheetah-v5").close()
    except (gym.error.DependencyNotInstalled, ImportError) as e:
        return f"MuJoCo environments unavailable ({e}); pip install -e '.[mujoco]'"
    return ""


needs_mujoco = pytest.mark.skipif(bool(_mujoco_missing()), reason=_mujoco_missing() or "-")


@needs_mujoco
def test_the_mujoco_study_is_valid_and_uses_the_tuned_defaults():
    from quarl_edge.core.envs import KNOWN_ENVS, MUJOCO_ENVS
    from quarl_edge.study.config import load_study
    from quarl_edge.study.plan import plan
    from quarl_edge.rl.train import DEFAULTS, OffPolicyConfig

    study = load_study(ROOT / "studies" / "mujoco.toml")
    classic = tomllib.loads((ROOT / "studies" / "classic.toml").read_text())
    assert {(t.algo, t.env) for t in study.tasks} == MUJOCO_TASKS
    assert set(MUJOCO_ENVS) == {"HalfCheetah-v5", "Hopper-v5"} and not set(MUJOCO_ENVS) & set(KNOWN_ENVS)
    for t in study.tasks:
        assert t.seeds == [0, 1, 2] and t.eval_seeds == list(range(20))
        # the classic grid's cells (those for continuous actions run, the others are skipped)
        assert set(t.schemes) <= set(classic["study"]["schemes"])
        assert {"fp32", "fp16", "dyn-int8", "int8", "int16x8", "qat-distill-int8"} <= set(t.schemes)
        defaults = DEFAULTS[(t.algo, t.env)]
        assert t.steps == defaults["steps"] and not t.options  # the grid's budget is the default
        cfg = OffPolicyConfig(**defaults)
        assert cfg.learning_starts < cfg.steps and cfg.eval_every <= cfg.steps
    assert not study.sweeps
    assert sum(len(g.keys) for g in plan(study)) == 4 * 3 * (1 + len(study.tasks[0].schemes))


@needs_mujoco
def test_tiny_sac_on_halfcheetah_quantizes_to_an_integer_actor_that_acts(tmp_path):
    import gymnasium as gym
    from quarl_edge.core.envs import outputs_to_actions, play_batched
    from quarl_edge.measure.reference import _interpreter, model_ops, tflite_runner
    from quarl_edge.quant.schemes import quantize
    from quarl_edge.rl.train import train
    from quarl_edge.core.run import load_keras

    env = gym.make("HalfCheetah-v5")
    space = env.action_space
    env.close()
    info = train("HalfCheetah-v5", "sac", 300, 0, tmp_path, progress=False, learning_starts=100,
                 train_every=100, updates_per_train=5, batch_size=32, eval_every=300,
                 eval_episodes=1, hidden=(16, 16), critic_hidden=(16, 16))
    assert info["env"] == "HalfCheetah-v5" and info["steps"] == 300
    assert info["obs_shape"] == [17] and info["action_space"]["shape"] == [6]
    assert info["action_space"]["low"] == [-1.0] * 6 and info["action_space"]["high"] == [1.0] * 6
    assert np.isfinite(info["best_greedy_return"])

    path = quantize(tmp_path, "int8", calib_size=200, calib_episodes=1)
    calib = np.load(tmp_path / "calibration.npy")
    assert calib.shape == (200, 17) and np.isfinite(calib).all()
    # float in/out at the edges, everything between is int8 arithmetic (int32 biases)
    assert model_ops(path) == ["QUANTIZE"] + ["FULLY_CONNECTED"] * 3 + [
        "TANH", "FULLY_CONNECTED", "DEQUANTIZE"]
    interpreter = _interpreter(path)
    tensors = {t["index"]: np.dtype(t["dtype"]) for t in interpreter.get_tensor_details()}
    for op in interpreter._get_ops_details():
        if op["op_name"] in ("QUANTIZE", "DEQUANTIZE"):
            continue
        dtypes = {tensors[i] for i in [*op["inputs"], *op["outputs"]] if i >= 0}
        assert dtypes <= {np.dtype(np.int8), np.dtype(np.int32)}, (op["op_name"], dtypes)
        assert np.dtype(np.int8) in dtypes

    run = tflite_runner(path)
    outputs = np.stack([run(x) for x in calib[:100]])
    assert outputs.shape == (100, 6) and outputs.dtype == np.float32
    # the int8 output grid may put the bound itself up to one step off: within [-1, 1] up to
    # that step, and the actions played (outputs_to_actions clips) inside the action space
    dequantize = [op for op in interpreter._get_ops_details() if op["op_name"] == "DEQUANTIZE"]
    scales = {t["index"]: t["quantization"][0] for t in interpreter.get_tensor_details()}
    out_scale = scales[dequantize[0]["inputs"][0]]
    assert 0 < out_scale < 0.02
    assert np.all(np.abs(outputs) <= 1.0 + out_scale + 1e-6)
    actions = outputs_to_actions(outputs, space)
    assert actions.shape == (100, 6) and all(space.contains(a) for a in actions)
    ref = load_keras(tmp_path)(calib[:100]).numpy()
    assert np.abs(outputs - ref).max() < 0.1  # int8 error in action units (range [-1, 1])

    # the int8 actor drives the real environment for a whole episode
    returns, visited = play_batched("HalfCheetah-v5", lambda x: np.stack([run(o) for o in x]),
                                    [0], record=True)
    assert visited.shape == (1000, 17) and np.isfinite(returns).all()  # HalfCheetah: 1000 steps
    assert space.contains(outputs_to_actions(run(visited[-1])[None], space)[0])


MISSING = textwrap.dedent("""
    import sys
    hide = sys.argv[1]
    sys.modules[hide] = None          # `import mujoco` / `import imageio` now raises ImportError
    from quarl_edge.core.envs import make_gym
    from quarl_edge.core.errors import QuarlError
    from quarl_edge.study.config import _check_env
    from quarl_edge.rl.train import train
    for call in (lambda: make_gym("Hopper-v5"),
                 lambda: _check_env("sac", "HalfCheetah-v5", "studies/x.toml [[task]] #1"),
                 lambda: train("HalfCheetah-v5", "sac", 10, 0, sys.argv[2], progress=False)):
        try:
            call()
        except QuarlError as e:
            print("ERROR:", e)
        else:
            print("NO ERROR")
    make_gym("CartPole-v1").close()   # other environments are unaffected
    print("CartPole ok")
""")


@pytest.mark.parametrize("hidden", ["mujoco", "imageio"])
def test_a_missing_mujoco_wheel_says_what_to_install(tmp_path, hidden):
    p = subprocess.run([sys.executable, "-c", MISSING, hidden, str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [line for line in p.stdout.splitlines() if line.startswith(("ERROR", "NO ERROR"))]
    assert len(lines) == 3, p.stdout
    for line in lines:
        assert line.startswith("ERROR:") and "needs a package that is not installed" in line
        assert "pip install -e '.[mujoco]'" in line and "mujoco==3.17.0 imageio==2.38.1" in line
        assert "unknown Gymnasium environment" not in line
    assert hidden in lines[0]  # the underlying import error is named
    assert lines[1].startswith("ERROR: studies/x.toml [[task]] #1: ")
    assert "CartPole ok" in p.stdout
    assert not (tmp_path / "run").exists()  # train failed before creating the run directory
