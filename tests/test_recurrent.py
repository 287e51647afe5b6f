"""Recurrent (LSTM) policies end to end (issue 12): the partially observed task
QuarlEdge/CartPoleNoVel-v0, `ppo --net lstm` writing a run directory, its one-step model
converted with the LSTM state as TFLite variable tensors (fp32 and int8), RESET on a board, and
HIL whose board actions equal the reference's step by step, the state reset per episode.

The default suite trains a few hundred steps only (the run's contract, not its return); the
training that reaches a greedy return of 450 is `slow`."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from quarl_edge.core.errors import QuarlError
from quarl_edge.core.envs.masked import ENV_ID
from quarl_edge.rl.recurrent import (WEIGHTS_FILE, RecurrentLayers, convert_one_step, is_one_step,
                                     layers_from_keras, one_step_keras)

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ task
def test_cartpole_novel_is_cartpole_without_the_velocities():
    """Same seeds, same actions: the observation is CartPole-v1's [x, theta], the rewards,
    terminations and the 500-step limit are CartPole's."""
    from quarl_edge.core.envs import make_gym
    masked, full = make_gym(ENV_ID), gym.make("CartPole-v1")
    assert masked.observation_space.shape == (2,) and masked.action_space == full.action_space
    rng = np.random.default_rng(0)
    for seed in range(3):
        o, _ = masked.reset(seed=seed)
        f, _ = full.reset(seed=seed)
        done = False
        while not done:
            assert o.dtype == np.float32 and np.array_equal(o, f[[0, 2]])
            a = int(rng.integers(2))
            o, r, t, tr, _ = masked.step(a)
            f, r2, t2, tr2, _ = full.step(a)
            assert (r, t, tr) == (r2, t2, tr2)
            done = t or tr
    assert gym.spec(ENV_ID).reward_threshold == 475.0


# --------------------------------------------------------------------------- the one-step model
def random_layers(seed: int = 0, n_obs: int = 2, hidden: int = 8, units: int = 6,
                  n_out: int = 2) -> RecurrentLayers:
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    return RecurrentLayers([(f(n_obs, hidden), f(hidden) * 0.1, "relu")],
                           (f(hidden, 4 * units) * 0.5, f(units, 4 * units) * 0.5, f(4 * units) * 0.1),
                           [(f(units, n_out), f(n_out) * 0.1, "linear")])


def _variables(model_bytes: bytes):
    from quarl_edge.converters.tflite_model import parse
    m = parse(model_bytes)
    return [o.opcode for o in m.operators], [t for t in m.tensors if t.is_variable]


def _step_tflite(model_bytes: bytes, episodes) -> list[np.ndarray]:
    """tflite-runtime stepping through each episode's observations, reset_all_variables()
    before each episode."""
    from quarl_edge.core import tflite_host as tfl
    it = tfl.Interpreter(model_content=model_bytes)
    it.allocate_tensors()
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    outs = []
    for ep in episodes:
        it.reset_all_variables()
        for x in ep:
            it.set_tensor(i["index"], x.reshape(i["shape"]))
            it.invoke()
            outs.append(it.get_tensor(o["index"])[0].copy())
    return outs


def _step_numpy(layers: RecurrentLayers, episodes) -> list[np.ndarray]:
    outs = []
    for ep in episodes:
        state = layers.zero_state()
        for x in ep:
            y, state = layers.step(x[None], state)
            outs.append(y[0])
    return outs


def test_one_step_model_keeps_the_lstm_state_in_variable_tensors():
    """fp32: one UNIDIRECTIONAL_SEQUENCE_LSTM whose h and c are variable tensors; tflite-runtime
    stepping (state kept between invokes, reset per episode) equals the numpy recurrence and
    the stateful Keras model; without the reset the second episode's outputs differ."""
    layers = random_layers()
    model = one_step_keras((2,), layers)
    assert is_one_step(model) and tuple(model.inputs[0].shape) == (1, 1, 2)
    back = layers_from_keras(model)
    assert all(np.array_equal(a, b) for a, b in zip(back.lstm, layers.lstm))
    fb = convert_one_step(model)
    ops, state = _variables(fb)
    assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 1
    assert len(state) == 2 and all(t.dtype == "float32" and t.shape[-1] == 6 for t in state)
    rng = np.random.default_rng(1)
    episodes = [rng.normal(size=(12, 2)).astype(np.float32) for _ in range(3)]
    want = _step_numpy(layers, episodes)
    got = _step_tflite(fb, episodes)
    assert np.allclose(got, want, atol=1e-5)
    keras = []
    for ep in episodes:
        model.reset_states()
        keras += [model(x[None, None]).numpy()[0] for x in ep]
    assert np.allclose(keras, want, atol=1e-5)
    kept = _step_tflite(fb, [np.concatenate(episodes)])    # no reset between the episodes
    assert np.allclose(kept[:12], want[:12], atol=1e-5)
    assert not np.allclose(kept[12:24], want[12:24], atol=1e-3)


def test_int8_one_step_model_steps_alike_on_tflite_runtime_and_tflm():
    """Full int8 (the converter's integer LSTM: int8 h, int16 c, both variable tensors): the
    path the int8 board kernel will take. tflite-runtime and TF Lite Micro stepping the same
    episodes with a reset per episode give the same actions, and the outputs follow fp32."""
    from quarl_edge.measure.reference import TFLMReference
    from quarl_edge.quant.schemes import SCHEMES
    layers = random_layers(seed=2)
    model = one_step_keras((2,), layers)
    rng = np.random.default_rng(3)
    calib = rng.normal(size=(200, 1, 2)).astype(np.float32)
    fb = convert_one_step(model, lambda c: SCHEMES["int8"].convert(c, calib))
    ops, state = _variables(fb)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in ops
    assert sorted(t.dtype for t in state) == ["int16", "int8"]
    episodes = [rng.normal(size=(15, 2)).astype(np.float32) for _ in range(3)]
    rt = np.array(_step_tflite(fb, episodes))
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.tflite"
        p.write_bytes(fb)
        micro = TFLMReference(p)
        tflm = []
        for ep in episodes:
            micro.reset()
            tflm += [micro.run([x])[0].reshape(-1) for x in ep]
    tflm = np.array(tflm)
    # The same actions but at near ties: the host interpreters' FULLY_CONNECTED requantizes
    # otherwise than TFLM's (test_qmath.py), by one output step, which decides an argmax only
    # where the two best outputs are that close.
    top2 = np.sort(tflm, axis=1)[:, -2:]
    differ = rt.argmax(1) != tflm.argmax(1)
    assert differ.sum() <= 2 and np.all(top2[differ, 1] - top2[differ, 0] <= 0.02 * np.abs(rt).max())
    assert np.abs(rt - tflm).max() <= 0.05 * np.abs(rt).max()
    fp32 = np.array(_step_numpy(layers, episodes))
    assert np.abs(rt - fp32).max() <= 0.1 * np.abs(fp32).max()


# ------------------------------------------------------------------------- training: smoke
SMOKE = dict(collect_steps=128, num_envs=2, minibatches=1, epochs=1, hidden=(8,), lstm_units=8,
             eval_episodes=2)


@pytest.fixture(scope="module")
def tiny_rnn_run(tmp_path_factory):
    """`train --algo ppo --net lstm` (rl/rppo.py) for 256 steps: the run directory's contract,
    not a return."""
    from quarl_edge.quant.schemes import quantize
    from quarl_edge.rl.train import train
    out = tmp_path_factory.mktemp("rnn") / "run"
    info = train(ENV_ID, "ppo", 256, 0, out, progress=False, net="lstm", **SMOKE)
    quantize(out, "fp32")
    return out, info


def test_ppo_lstm_writes_a_recurrent_run_directory(tiny_rnn_run):
    from quarl_edge.core.run import load_keras, load_run
    run, info = tiny_rnn_run
    meta = load_run(run)
    assert meta == info and meta["algo"] == "ppo" and meta["env"] == ENV_ID
    assert meta["obs_shape"] == [2] and meta["n_actions"] == 2
    assert meta["network"]["type"] == "lstm" and meta["network"]["recurrent"] is True
    assert meta["network"]["lstm_units"] == 8 and meta["hyperparameters"]["net"] == "lstm"
    assert meta["hyperparameters"]["rnn_trainer"] == "own"
    for name in ("policy.keras", WEIGHTS_FILE, "train_curve.csv"):
        assert (run / name).is_file(), name
    model = load_keras(run)
    assert is_one_step(model)
    saved = RecurrentLayers.load(run / WEIGHTS_FILE)
    keras = layers_from_keras(model)
    for a, b in zip(saved.lstm, keras.lstm):
        assert np.array_equal(a, b)
    # the greedy validation return the run reports is the arrays' own, replayed here
    from quarl_edge.rl.recurrent import play_recurrent
    returns, _ = play_recurrent(ENV_ID, saved, [10_000, 10_001])
    assert float(np.mean(returns)) == meta["best_greedy_return"]


def test_tf_agents_rnn_trainer_writes_the_same_contract(tmp_path):
    """rnn_trainer="tf-agents": PPOClipAgent with ActorDistributionRnnNetwork; its export is
    checked against the agent's greedy policy stepped with its policy state (in the loop), and
    the run also has the PolicySaver policy/."""
    from quarl_edge.core.run import load_keras, load_run
    from quarl_edge.rl.train import train
    info = train(ENV_ID, "ppo", 256, 0, tmp_path / "run", progress=False, net="lstm",
                 rnn_trainer="tf-agents", **SMOKE)
    assert load_run(tmp_path / "run") == info and info["network"]["type"] == "lstm"
    assert (tmp_path / "run" / "policy" / "saved_model.pb").is_file()
    assert is_one_step(load_keras(tmp_path / "run"))


def test_recurrent_run_converts_with_its_state_as_variable_tensors(tiny_rnn_run):
    run, _ = tiny_rnn_run
    ops, state = _variables((run / "models" / "fp32.tflite").read_bytes())
    assert ops == ["FULLY_CONNECTED", "UNIDIRECTIONAL_SEQUENCE_LSTM", "STRIDED_SLICE",
                   "FULLY_CONNECTED"]
    assert len(state) == 2


def test_recurrent_bad_input_is_one_line(tiny_rnn_run, tmp_path):
    from quarl_edge.quant.schemes import quantize
    from quarl_edge.rl.train import resolve_config, train
    run, _ = tiny_rnn_run
    with pytest.raises(QuarlError, match="does not apply to a recurrent") as e:
        quantize(run, "fp16")
    assert "\n" not in str(e.value)
    with pytest.raises(QuarlError, match="unknown net 'gru'; known: mlp, lstm"):
        resolve_config("ppo", ENV_ID, net="gru")
    with pytest.raises(QuarlError, match="lstm_units must be positive"):
        resolve_config("ppo", ENV_ID, net="lstm", lstm_units=0)
    with pytest.raises(QuarlError, match="unknown rnn_trainer 'x'; known: own, tf-agents"):
        resolve_config("ppo", ENV_ID, net="lstm", rnn_trainer="x")
    with pytest.raises(QuarlError, match="recurrent policies train with --algo ppo"):
        resolve_config("dqn", ENV_ID, net="lstm")
    with pytest.raises(QuarlError, match="needs a Discrete action space"):
        train("Pendulum-v1", "ppo", 64, 0, tmp_path / "p", progress=False, net="lstm", **SMOKE)


# ------------------------------------------------------------------------------------ boards
def test_the_board_keeps_the_state_between_infers_and_reset_zeroes_it(tiny_rnn_run, tmp_path):
    """On the host board: the same observation twice gives two outputs (the state moved on),
    RESET brings back the first one; every output equals tflite-runtime's stepping with the
    same resets (bit for bit: same float kernels as TFLM on x86-64)."""
    from quarl_edge.link.session import BoardSession
    from quarl_edge.measure.reference import TFLMReference
    from quarl_edge.targets.boards import get_board
    run, _ = tiny_rnn_run
    model = run / "models" / "fp32.tflite"
    ref = TFLMReference(model)
    x = np.array([[[0.05, -0.1]]], np.float32)
    with BoardSession(model, get_board("host"), tmp_path / "fw") as s:
        s.link.reset_state()
        a = s.link.infer([x])[0][0]
        b = s.link.infer([x])[0][0]
        s.link.reset_state()
        c = s.link.infer([x])[0][0]
        s.link.reset_state()
        s.link.reset_state()            # twice: still zero
        d = s.link.infer([x])[0][0]
    ref.reset()
    r1, r2 = ref.run([x])[0], ref.run([x])[0]
    assert not np.array_equal(a, b)
    assert np.array_equal(a, c) and np.array_equal(a, d)
    assert np.array_equal(a.ravel(), r1.ravel()) and np.array_equal(b.ravel(), r2.ravel())


@pytest.mark.parametrize("board_id", ["host", "mps2-an386"])
def test_recurrent_hil_equals_the_reference_step_by_step(tiny_rnn_run, tmp_path, board_id):
    """HIL of the fp32 recurrent model, 3 episodes: the board is RESET at each episode's start
    (and end), the references reset at the same points; every action equals the reference's
    (TF Lite Micro's), so the returns do, and the fp32 network stepped in numpy agrees."""
    from quarl_edge.measure.hil import run_hil
    from quarl_edge.targets.boards import get_board
    run, _ = tiny_rnn_run
    res = run_hil(run, "fp32", get_board(board_id), 3, seed=0, results_dir=tmp_path / "res",
                  build_dir=tmp_path / "fw")
    assert res["stateful"] is True
    assert res["matches_reference"] is True and res["actions_equal_reference"] is True, res
    assert res["mean_return"] == res["micro_mean_return"] == res["tflite_mean_return"]
    if board_id == "host":
        assert res["fp32_mean_return"] == res["mean_return"] and res["agreement"] == 1.0
    assert res["link"]["resets"] == 0 and res["link"]["replayed_episodes"] == 0
    saved = json.loads((tmp_path / "res" / f"hil_{board_id}_fp32.json").read_text())
    assert saved["actions_equal_reference"] is True


def test_int8_recurrent_hil_on_mps2_equals_tflm(tiny_rnn_run, tmp_path):
    """The int8 one-step model (int8 LSTM, int16 cell state) on QEMU mps2-an386, 3 episodes,
    RESET per episode: the board's actions equal TF Lite Micro's step by step."""
    from quarl_edge.measure.hil import run_hil
    from quarl_edge.quant.schemes import quantize
    from quarl_edge.targets.boards import get_board
    run, _ = tiny_rnn_run
    work = tmp_path / "run"
    shutil.copytree(run, work, ignore=shutil.ignore_patterns("build", "results"))
    quantize(work, "int8", calib_size=300, calib_episodes=3)
    res = run_hil(work, "int8", get_board("mps2-an386"), 3, seed=0,
                  results_dir=tmp_path / "res", build_dir=tmp_path / "fw")
    assert res["stateful"] is True and res["actions_equal_reference"] is True, res
    assert res["matches_reference"] is True


def test_the_linux_agent_resets_its_interpreter_state(tiny_rnn_run):
    """The linux board's agent answers RESET with tflite-runtime's reset_all_variables()."""
    import struct

    from quarl_edge.link import protocol as P
    from quarl_edge.link.agent import Agent
    run, _ = tiny_rnn_run
    agent = Agent(run / "models" / "fp32.tflite")
    x = np.array([0.05, -0.1], np.float32).tobytes()

    def ask(cmd, payload=b"", seq=[0]):
        seq[0] += 1
        frames = P.FrameDecoder().feed(agent.feed(P.encode_frame(P.COMMANDS[cmd], payload, seq[0])))
        assert len(frames) == 1 and frames[0].cmd == P.COMMANDS[cmd] | P.REPLY_BIT, frames
        return frames[0].payload

    agent.feed(P.encode_frame(P.COMMANDS["HELLO"], struct.pack("<I", 99), 200))
    first, second = ask("INFER", x)[4:], ask("INFER", x)[4:]
    assert first != second
    assert struct.unpack(P.RESET_REPLY, ask("RESET")) == (99,)
    assert ask("INFER", x)[4:] == first


# ------------------------------------------------------------------------ training: the return
@pytest.mark.slow
def test_default_recurrent_training_reaches_450(tmp_path):
    """The tuned default of `train --env QuarlEdge/CartPoleNoVel-v0 --algo ppo --set net=lstm`:
    a greedy fp32 return of at least 450 over the 20 test seeds 0..19."""
    from quarl_edge.rl.recurrent import play_recurrent
    from quarl_edge.rl.train import train
    info = train(ENV_ID, "ppo", None, 0, tmp_path / "run", progress=False, net="lstm")
    layers = RecurrentLayers.load(tmp_path / "run" / WEIGHTS_FILE)
    returns, _ = play_recurrent(ENV_ID, layers, range(20))
    assert float(np.mean(returns)) >= 450, (info["best_greedy_return"], returns)
