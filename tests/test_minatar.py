"""MinAtar pixel tasks (issue 14): the registered envs (float 0/1 images, minimal action sets,
seeded), and a CNN DQN on one of them through the whole pipeline: a short real TF-Agents
training, the real TFLite converter's fp32 / int8 / int16x8 models, validate bit-exact on the
host board on the run's calibration observations. (The study's minatar grid, with its
training budget, is a long run, not a test.)"""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

pytest.importorskip("minatar", reason="MinAtar is not installed (scripts/setup.sh installs it)")

from quarl_edge import api  # noqa: E402
from quarl_edge.core.envs import make_gym  # noqa: E402
from quarl_edge.core.envs.minatar import ENV_IDS  # noqa: E402


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


STUDY = """
[study]
name = "minatar-tiny"
description = "a CNN DQN through the study: schemes, QAT, the n-bit sweep, a board"
seeds = [0]
schemes = ["fp32", "int8", "qat-int8"]
episodes = 2
calib_size = 64
qat_steps = 64
boards = ["host"]
bench_n = 2
validate_n = 16
sweep_modes = ["weights+activations", "weights"]

[[task]]
algo = "dqn"
env = "QuarlEdge/MinAtar-Breakout-v0"
steps = 400
[task.options]
learning_starts = 200
eval_every = 400
eval_episodes = 1
epsilon_decay_steps = 300
updates_per_train = 8
buffer_size = 1000
select_int8 = false

[[sweep]]
algo = "dqn"
env = "QuarlEdge/MinAtar-Breakout-v0"
bits = [2, 8]
"""


def test_a_cnn_dqn_goes_through_the_study_qat_sweep_and_a_board(tmp_path):
    """The study's cells assumed MLPs (weight statistics, the n-bit sweep's numpy forward, QAT's
    ranges): a CNN run now gets every row, and the rows mean what they say."""
    from quarl_edge.quant.nbit import keras_fake_quant_forward
    from quarl_edge.rl.qat import qat_model
    from quarl_edge.core.nets import weighted_layers
    from quarl_edge.core.run import load_keras

    config = tmp_path / "minatar.toml"
    config.write_text(STUDY)
    summary = api.study(config, out=tmp_path / "out")
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").open()]
    assert summary.complete and len(rows) == 1 + 3 + 5 + 3, [r.get("error") for r in rows]
    assert all(r["status"] == "ok" for r in rows), [(r["kind"], r.get("error")) for r in rows]
    run_row = next(r for r in rows if r["kind"] == "run")
    shapes = [layer["shape"] for layer in run_row["weights"]["layers"]]
    assert shapes == [[3, 3, 4, 16], [1024, 128], [128, 3]]     # the conv kernel is counted
    assert run_row["n_params"] == 3 * 3 * 4 * 16 + 16 + 1024 * 128 + 128 + 128 * 3 + 3
    sweep = {(r["mode"], r["bits"]): r for r in rows if r["kind"] == "sweep"}
    assert sweep[("fp32", 32)]["agreement"] == 1.0
    board = {r["scheme"]: r for r in rows if r["kind"] == "board"}
    assert board["int8"]["bit_exact"] and board["int8"]["matches_tflite"]

    # The CNN sweep's arithmetic: at 8 bits the network is close to float, at 2 bits it is not,
    # and the quantized kernels really take at most 2**bits values per output channel.
    run = tmp_path / "out" / "runs" / run_row["run_dir"].split("/runs/")[1]
    model = load_keras(run)
    calib = np.load(run / "calibration.npy")
    ref = model(calib, training=False).numpy()
    err = {b: float(np.abs(keras_fake_quant_forward(model, calib, b, b)(calib) - ref).max())
           for b in (2, 8)}
    assert err[8] < 0.1 * err[2] and err[8] > 0.0, err
    weights_only = keras_fake_quant_forward(model, calib, 8, None, per_channel=True)
    assert float(np.abs(weights_only(calib) - ref).max()) < err[2]

    # QAT on a CNN: tfmot's convolution quantizer is per output channel; its range starts at
    # each channel's largest |w| (a scalar assign would have failed or widened every channel).
    qmodel = qat_model(model, calib)
    kernel = weighted_layers(model)[0][0]
    conv = next(layer for layer in qmodel.layers if getattr(layer, "layer", None) is not None
                and layer.layer.__class__.__name__ == "Conv2D")
    kmax = next(v for v in conv.weights if v.name.split("/")[-1].startswith("kernel_max"))
    assert kmax.shape == (16,)
    assert np.allclose(kmax.numpy(), np.abs(kernel).reshape(-1, 16).max(axis=0))


@pytest.mark.long   # two trainings: ~25-35 s on the loaded 2-core machine
def test_a_cnn_dqn_seed_retrains_to_the_same_weights(tmp_path, monkeypatch):
    """A seed gives the same CNN DQN weights however the threads are scheduled (the study's
    --resume retrains a missing run, on a busy machine, and takes it for the recorded one).
    tf.data's prefetch thread draws the next round's first replay batches while the loop goes
    on collecting, and the loop's next flush writes the buffer: unless the loop waits for those
    draws (ReplaySamples.settle), who comes first decides the batches. Here 21-step windows of
    2,048 make each draw (~20 ms) slower than a gradient step of the tiny network, so at the
    end of a round the prefetch thread is still behind, and 4 env steps later the flush comes.
    Run "a" is the loop slowed after each round (as on an idle machine, where the draws always
    came first); run "b" the loop at full speed. Without the wait they differed (3 of 3)."""
    from quarl_edge.core.run import load_keras
    from quarl_edge.rl import common
    from quarl_edge.rl.train import train

    tiny = dict(conv=((4, 3, 1),), hidden=(16,), learning_starts=100, train_every=4,
                updates_per_train=4, batch_size=2048, n_step=20, buffer_size=1000,
                epsilon_decay_steps=300, target_update_period=50, eval_every=200,
                eval_episodes=1, log_every=10, select_int8=False)
    round_call = common.GradientRounds.__call__

    def slowed_round(self, k):
        loss = round_call(self, k)
        time.sleep(0.15)   # > 2 draws: the look-ahead is drawn before the flush
        return loss

    weights, curves = [], []
    for name in ("a", "b"):
        if name == "a":
            monkeypatch.setattr(common.GradientRounds, "__call__", slowed_round)
        train("QuarlEdge/MinAtar-Breakout-v0", "dqn", 200, 0, tmp_path / name, progress=False,
              **tiny)
        monkeypatch.undo()
        weights.append(load_keras(tmp_path / name).get_weights())
        curves.append((tmp_path / name / "train_curve.csv").read_text())
    assert len(weights[0]) == 6   # conv, dense, q_values: kernel and bias each
    assert [np.array_equal(x, y) for x, y in zip(*weights)] == [True] * 6
    assert curves[0] == curves[1]   # the losses of every 10th step too
