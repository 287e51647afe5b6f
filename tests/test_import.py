"""quarl-edge import: policies trained elsewhere become run directories that act exactly as the
source does (issue 11).

The Stable-Baselines3 and ONNX fixtures in tests/fixtures/sb3/ were made by real SB3 2.9.2 and
torch (make_fixtures.py, `make sb3-fixtures`), with SB3's own predictions and greedy returns
beside them; the tests read them without torch. `pytest -m sb3` remakes one with real SB3."""
from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers_models import assert_import_refused

from quarl_edge.core.errors import QuarlError
from quarl_edge.importers import import_policy
from quarl_edge.importers.safe_pickle import UnsafePickle, load_symbolic, load_torch_archive
from quarl_edge.core.envs import make_gym, outputs_to_actions, play_batched
from quarl_edge.core.nets import keras_runner
from quarl_edge.core.run import load_keras, load_run

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "sb3"
SB3 = {"dqn_cartpole": "CartPole-v1", "a2c_cartpole": "CartPole-v1",
       "ppo_lunar": "LunarLander-v3", "sac_pendulum": "Pendulum-v1",
       "td3_mountaincar": "MountainCarContinuous-v0", "ppo_vecnorm_pendulum": "Pendulum-v1",
       "dqn_catch_cnn": "QuarlEdge/Catch-v0",
       # sb3-contrib
       "qrdqn_cartpole": "CartPole-v1", "tqc_pendulum": "Pendulum-v1",
       "trpo_cartpole": "CartPole-v1", "ars_cartpole_linear": "CartPole-v1",
       "ars_pendulum_mlp": "Pendulum-v1"}
ONNX = {"onnx_cartpole_q": "CartPole-v1", "onnx_pendulum_actor": "Pendulum-v1",
        "onnx_catch_cnn": "QuarlEdge/Catch-v0"}


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "quarl_edge.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=600, cwd=cwd)


def greedy_returns(run: Path, env_id: str, seeds) -> np.ndarray:
    returns, _ = play_batched(env_id, keras_runner(load_keras(run)), seeds)
    return np.asarray(returns)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """Each fixture imported once for the module: name -> run directory."""
    base = tmp_path_factory.mktemp("imported")
    runs = {}
    for name, env in {**SB3, **ONNX}.items():
        src = FIX / (f"{name}.onnx" if name in ONNX else f"{name}.zip")
        import_policy(src, base / name, env=env)
        runs[name] = base / name
    return runs


@pytest.mark.parametrize("name", sorted(SB3))
def test_sb3_policy_acts_as_sb3_predict(imported, name):
    env_id = SB3[name]
    exp = np.load(FIX / f"{name}.expected.npz")
    run = imported[name]
    info = load_run(run)
    assert info["env"] == env_id and info["source"]["kind"] == "stable-baselines3"
    assert info["fidelity"]["ok"] and info["fidelity"]["observations"] == 1000
    space = make_gym(env_id).action_space
    actions = outputs_to_actions(keras_runner(load_keras(run))(exp["obs"]), space)
    if hasattr(space, "n"):
        assert np.array_equal(actions, exp["actions"])
    else:
        assert np.max(np.abs(actions - exp["actions"])) <= 1e-5
    assert (run / "calibration.npy").is_file() and (run / "policy.keras").is_file()


@pytest.mark.parametrize("name", ["dqn_cartpole", "ppo_lunar", "sac_pendulum",
                                  "ppo_vecnorm_pendulum", "dqn_catch_cnn", "qrdqn_cartpole",
                                  "tqc_pendulum", "trpo_cartpole", "ars_cartpole_linear",
                                  "ars_pendulum_mlp"])
def test_imported_fp32_return_equals_sb3s_return(imported, name):
    exp = np.load(FIX / f"{name}.expected.npz")
    ours = greedy_returns(imported[name], SB3[name], exp["seeds"].tolist())
    np.testing.assert_allclose(ours, exp["returns"], rtol=1e-4, atol=1e-4)


def test_a_cnn_policy_takes_the_envs_images_and_quantizes(imported, tmp_path):
    """SB3's CnnPolicy (NatureCNN) on 40 x 40 x 1 uint8 images: the Keras network takes the
    env's HWC images as they are (SB3's CHW transpose and /255 folded in), and its int8 model
    runs on TF Lite Micro, within one output step of tflite-runtime (whose optimized int8
    kernels round differently). Its 6,400 input bytes, mostly zero, go to the boards zero-run
    coded in one INFER_Z frame (they would stream in 25 chunks otherwise): it validates bit-exact on the host board and the Cortex-M4 in QEMU, and HIL on the host
    board plays TF Lite Micro's returns."""
    run = imported["dqn_catch_cnn"]
    info = load_run(run)
    assert info["source"]["policy"] == "CnnPolicy" and info["network"]["type"] == "cnn"
    assert [c[-1] for c in info["network"]["convolutions"]] == [4, 2, 1]
    assert load_keras(run).inputs[0].shape[1:] == (40, 40, 1)
    p = cli("quantize", run, "--scheme", "int8", "--json")
    assert p.returncode == 0, p.stderr
    from quarl_edge.measure.reference import TFLiteRuntime, TFLMReference
    model = run / "models" / "int8.tflite"
    obs = np.load(FIX / "dqn_catch_cnn.expected.npz")["obs"][:50].astype(np.float32)
    micro, rt = TFLMReference(model), TFLiteRuntime(model)
    # the float outputs are the last int8 tensor dequantized: one step of it at most
    from quarl_edge.measure.reference import tflite_runtime_interpreter
    interp = tflite_runtime_interpreter(model)
    dequantize = [op for op in interp._get_ops_details() if op["op_name"] == "DEQUANTIZE"][-1]
    step = interp.get_tensor_details()[dequantize["inputs"][0]]["quantization"][0]
    diffs = [np.max(np.abs(micro.run([o])[0] - rt.run([o])[0])) for o in obs]
    assert max(diffs) <= step * 1.0001, (max(diffs), step)
    from quarl_edge import api
    np.save(tmp_path / "obs.npy", obs[:20])
    for board in ("host", "mps2-an386"):
        res = api.validate(model, board, inputs=tmp_path / "obs.npy", out=tmp_path / board)
        assert res.bit_exact and res.n == 20, (board, res)
        # the mostly-black images go zero-run coded, one INFER_Z frame each instead of 25
        # IN_CHUNKs (protocol v5; streaming dense inputs is tests/test_stream.py's)
        assert res.link["coded"] == 20 and res.link["chunks"] == 0 and res.latency.n == 20
    hil = api.hil(run, "host", episodes=3, out=tmp_path / "hil")
    assert hil.matches_reference and hil.micro_mean_return == hil.mean_return, hil


def test_vecnormalize_is_folded_and_recorded(imported):
    src = load_run(imported["ppo_vecnorm_pendulum"])["source"]
    assert src["vecnormalize"]["file"] == "ppo_vecnorm_pendulum.vecnormalize.pkl"
    assert src["vecnormalize"]["clip_obs"] == 10.0
    assert load_run(imported["ppo_vecnorm_pendulum"])["fidelity"]["clipped_observations"] == 0


@pytest.mark.parametrize("name", sorted(ONNX))
def test_onnx_policy_equals_torch(imported, name):
    exp = np.load(FIX / f"{name}.expected.npz")
    out = keras_runner(load_keras(imported[name]))(exp["obs"])
    np.testing.assert_allclose(out, exp["outputs"], rtol=1e-6, atol=1e-5)   # float32 ulps
    info = load_run(imported[name])
    assert info["fidelity"]["reference"].startswith("onnxruntime")
    np.testing.assert_allclose(greedy_returns(imported[name], ONNX[name],
                                              exp["seeds"].tolist()[:5]),
                               exp["returns"][:5], rtol=1e-4, atol=1e-4)


def test_tf_agents_savedmodel_import(tmp_path):
    info = import_policy(ROOT / "examples" / "cartpole_dqn" / "policy", tmp_path / "r",
                         env="CartPole-v1")
    assert info["fidelity"]["argmax_agreement"] == 1.0
    assert info["fidelity"]["reference"] == "the SavedModel's action signature"
    assert info["source"]["network"] == "q" and info["network"]["activation"] == "relu"


def test_keras_import_and_h5(tmp_path):
    import tensorflow as tf
    model = tf.keras.models.load_model(ROOT / "examples" / "cartpole_dqn" / "qnet.keras",
                                       compile=False)
    model.save(tmp_path / "q.h5")
    info = import_policy(tmp_path / "q.h5", tmp_path / "r", env="CartPole-v1")
    assert info["source"]["format"] == "h5" and info["fidelity"]["argmax_agreement"] == 1.0


@pytest.mark.parametrize("name, episodes", [("dqn_cartpole", 20), ("qrdqn_cartpole", 5),
                                            ("tqc_pendulum", 5), ("ars_pendulum_mlp", 5)])
def test_sb3_pipeline_on_the_host_board(imported, name, episodes):
    """import -> quantize fp32 int8 -> hil: the board's int8 return is TF Lite Micro's, and the
    fp32 model's return is SB3's own on the same seeds (SB3's and sb3-contrib's policies)."""
    run = imported[name]
    # quantize in this process (a CLI process would import TensorFlow again, four times over);
    # `quarl-edge quantize` runs through the CLI in test_a_cnn_policy_takes_the_envs_images_...
    from quarl_edge import api
    assert [q.scheme for q in api.quantize(run, ["fp32", "int8"])] == ["fp32", "int8"]
    exp = np.load(FIX / f"{name}.expected.npz")
    p = cli("hil", run, "--scheme", "int8", "--board", "host", "--episodes", episodes, "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["returns"] and res["matches_reference"]
    assert res["mean_return"] == res["micro_mean_return"]
    assert res["fp32_mean_return"] == pytest.approx(float(np.mean(exp["returns"][:episodes])),
                                                    rel=1e-4)


def test_hil_of_a_bare_tflite(tmp_path):
    model = tmp_path / "policy.tflite"
    model.write_bytes((ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite").read_bytes())
    p = cli("hil", model, "--env", "CartPole-v1", "--board", "host", "--episodes", 3, "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["agreement_with"] == "tflite-runtime" and res["agreement"] == 1.0
    assert res["mean_return"] == res["tflite_mean_return"] == res["micro_mean_return"]
    assert res["fp32_mean_return"] is None and res["matches_reference"]
    assert (tmp_path / "results" / "hil_host_policy.json").is_file()
    for args, words in [((), "--env"), (("--env", "Pendulum-v1"), "shape (3,)"),
                        (("--env", "Acrobot-v1"), "shape (6,)")]:
        p = cli("hil", model, "--board", "host", "--episodes", 1, *args)
        assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, p.stderr


# ----------------------------------------------------------------------------- bad input
def _zip_with(tmp_path: Path, name: str, replace: dict) -> Path:
    """dqn_cartpole.zip with some entries replaced."""
    out = tmp_path / name
    with zipfile.ZipFile(FIX / "dqn_cartpole.zip") as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.namelist():
            dst.writestr(item, replace.get(item, src.read(item)))
    return out


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _torch_archive(payload: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3")
    return buf.getvalue()


def test_a_malicious_pickle_in_the_zip_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    evil = _zip_with(tmp_path, "evil.zip",
                     {"policy.pth": _torch_archive(pickle.dumps(_Evil(marker), protocol=2))})
    p = cli("import", evil, "--env", "CartPole-v1", "--out", tmp_path / "r")
    assert p.returncode == 2 and "refused" in p.stderr and "posix.system" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert not marker.exists() and not (tmp_path / "r").exists()
    with pytest.raises(UnsafePickle):
        load_torch_archive(_torch_archive(pickle.dumps(_Evil(marker))), "x")
    # a symbolic read of the same pickle records the call but never makes it
    obj = load_symbolic(pickle.dumps(_Evil(marker)), "x")
    assert obj.symbol.qualname == "posix.system" and not marker.exists()


def test_the_torch_reader_equals_the_tensors_sb3_saved():
    with zipfile.ZipFile(FIX / "dqn_cartpole.zip") as z:
        sd = load_torch_archive(z.read("policy.pth"), "policy.pth")
    assert sd["q_net.q_net.0.weight"].shape == (64, 4) and sd["q_net.q_net.0.weight"].dtype == \
        np.float32
    # the imported first layer is SB3's Linear weight, transposed
    k = load_keras(ROOT / "examples" / "cartpole_dqn").get_weights()   # a different net
    assert k[0].shape == (4, 64)


@pytest.mark.parametrize("case", ["truncated", "not-sb3", "unknown-kind", "contrib", "lstm",
                                  "env-mismatch", "box-vs-discrete", "no-env", "vecnorm-evil",
                                  "vecnorm-missing", "rppo-vecnorm-missing", "h5-named-keras",
                                  "onnx-ops"])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, case):
    marker = tmp_path / "pwned"
    env = ["--env", "CartPole-v1"]
    if case == "truncated":
        src = tmp_path / "t.zip"
        src.write_bytes((FIX / "dqn_cartpole.zip").read_bytes()[:5000])
        words = "truncated"
    elif case == "not-sb3":
        src = tmp_path / "n.zip"
        with zipfile.ZipFile(src, "w") as z:
            z.writestr("readme.txt", "hello")
        words = "not a Stable-Baselines3 model"
    elif case == "unknown-kind":
        src = tmp_path / "policy.bin"
        src.write_bytes(b"\x00" * 64)
        words = "unknown kind of policy file"
    elif case in ("contrib", "lstm"):
        with zipfile.ZipFile(FIX / "dqn_cartpole.zip") as z:
            data = json.loads(z.read("data"))
        # contrib: MaskablePPO, refused for its masks; lstm: a RecurrentPPO zip whose
        # policy.pth lacks the LSTM
        data["policy_class"]["__module__"] = "sb3_contrib.common.maskable.policies" \
            if case == "contrib" else "sb3_contrib.common.recurrent.policies"
        src = _zip_with(tmp_path, f"{case}.zip", {"data": json.dumps(data)})
        words = "which the board is not given" if case == "contrib" else \
            "tensor 'lstm_actor.weight_ih_l0' missing for a RecurrentPPO policy"
    elif case == "env-mismatch":
        src, env, words = FIX / "dqn_cartpole.zip", ["--env", "Acrobot-v1"], \
            "observations of shape (4,), Acrobot-v1 gives (6,)"
    elif case == "box-vs-discrete":
        src, env, words = FIX / "td3_mountaincar.zip", ["--env", "MountainCar-v0"], \
            "3 discrete actions"
    elif case == "no-env":
        src, env, words = FIX / "onnx_cartpole_q.onnx", [], "give --env"
    elif case == "vecnorm-evil":
        pkl = tmp_path / "vn.pkl"
        pkl.write_bytes(pickle.dumps(_Evil(marker)))
        src, env, words = FIX / "dqn_cartpole.zip", [*env, "--vecnormalize", pkl], \
            "not a VecNormalize file"
    elif case in ("vecnorm-missing", "rppo-vecnorm-missing"):
        # a --vecnormalize that names no file is an error, never replaced by a file beside the
        # zip (the RecurrentPPO import fell back to one)
        zip_name = "rppo_cartpole.zip" if case.startswith("rppo") else "dqn_cartpole.zip"
        src = tmp_path / zip_name
        shutil.copy(FIX / zip_name, src)
        shutil.copy(FIX / "ppo_vecnorm_pendulum.vecnormalize.pkl", tmp_path / "vecnormalize.pkl")
        env = [*env, "--vecnormalize", tmp_path / "nope.pkl"]
        words = "nope.pkl: [Errno 2] No such file"
    elif case == "h5-named-keras":
        import tensorflow as tf
        m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
        m.save(tmp_path / "m.h5")
        src = tmp_path / "m.keras"
        (tmp_path / "m.h5").rename(src)
        words = "named .keras but an HDF5 file"
    else:   # an ONNX graph with three unsupported ops: all three named
        import onnx
        from onnx import TensorProto, helper
        nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Exp", ["a"], ["b"]),
                 helper.make_node("Neg", ["b"], ["y"])]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
        src = tmp_path / "ops.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
        words = "#0 Abs, #1 Exp, #2 Neg"
    assert_import_refused(cli("import", src, *env, "--out", tmp_path / "r"), words,
                          tmp_path / "r", marker)


def test_a_run_whose_keras_file_has_a_lambda_never_runs_it(tmp_path):
    """An HDF5 model with a Lambda layer saved as RUN/qnet.keras (and as .h5): refused, and the
    Lambda's code never runs."""
    import shutil

    import tensorflow as tf
    marker = tmp_path / "pwned"
    run = tmp_path / "run"
    shutil.copytree(ROOT / "examples" / "cartpole_dqn", run)
    code = f"lambda x: (open({str(marker)!r}, 'w').close(), x)[1]"
    m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Lambda(eval(code)),
                             tf.keras.layers.Dense(2)])
    marker.unlink(missing_ok=True)     # building the model called it once, here
    m.save(tmp_path / "evil.h5")
    (run / "qnet.keras").unlink()
    shutil.copy(tmp_path / "evil.h5", run / "qnet.keras")
    with pytest.raises(QuarlError, match="named .keras but an HDF5 file"):
        load_keras(run)
    p = cli("import", tmp_path / "evil.h5", "--env", "CartPole-v1", "--out", tmp_path / "r")
    assert p.returncode == 2 and "a Lambda layer would run code" in p.stderr, p.stderr
    assert not marker.exists()


@pytest.mark.sb3
def test_regenerated_fixture_with_real_sb3(tmp_path):
    """A policy freshly trained by real SB3 (in .venv-sb3 from `make sb3-fixtures`, or the
    Python named by $QUARL_EDGE_SB3_PYTHON), imported here: its actions are SB3's."""
    sb3_python = Path(os.environ.get("QUARL_EDGE_SB3_PYTHON", ROOT / ".venv-sb3/bin/python"))
    if not sb3_python.is_file():
        pytest.skip("no Python with stable-baselines3: run `make sb3-fixtures`")
    p = subprocess.run([str(sb3_python), str(FIX / "make_fixtures.py"), "a2c_cartpole",
                        "--out", str(tmp_path), "--steps", "2000"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    import_policy(tmp_path / "a2c_cartpole.zip", tmp_path / "r", env="CartPole-v1")
    exp = np.load(tmp_path / "a2c_cartpole.expected.npz")
    actions = outputs_to_actions(keras_runner(load_keras(tmp_path / "r"))(exp["obs"]),
                                 make_gym("CartPole-v1").action_space)
    assert np.array_equal(actions, exp["actions"])


def test_a_recurrent_tf_agents_policy_is_refused(tmp_path):
    """A real TF-Agents policy with state (QRnnNetwork, saved by PolicySaver) is refused with
    the reason, until recurrent policies are supported; nothing is written."""
    import tensorflow as tf
    from tf_agents.agents.dqn import dqn_agent
    from tf_agents.networks import q_rnn_network
    from tf_agents.policies import policy_saver
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import time_step as ts

    obs = tensor_spec.TensorSpec((4,), tf.float32, name="observation")
    act = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 1, name="action")
    net = q_rnn_network.QRnnNetwork(obs, act, lstm_size=(8,))
    agent = dqn_agent.DqnAgent(ts.time_step_spec(obs), act, q_network=net,
                               optimizer=tf.keras.optimizers.Adam())
    agent.initialize()
    policy_saver.PolicySaver(agent.policy).save(str(tmp_path / "rnn_policy"))
    p = cli("import", tmp_path / "rnn_policy", "--env", "CartPole-v1", "--out", tmp_path / "r")
    assert p.returncode == 2 and "has state" in p.stderr and "recurrent" in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()


def test_bench_of_a_bare_tflite(tmp_path):
    model = tmp_path / "policy.tflite"
    model.write_bytes((ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite").read_bytes())
    p = cli("bench", model, "--boards", "host", "--env", "CartPole-v1", "--episodes", 2,
            "-n", 10, "--json")
    assert p.returncode == 0, p.stderr
    (row,) = json.loads(p.stdout)
    assert row["scheme"] == "policy" and row["cost_mean"] > 0 and row["matches_reference"]
    assert row["agreement_with"] == "tflm" and row["agreement"] == 1.0
    assert (tmp_path / "results" / "bench.jsonl").is_file()
    p = cli("bench", model, "--boards", "host", "--episodes", 2)
    assert p.returncode == 2 and "--env" in p.stderr and "Traceback" not in p.stderr


# ------------------------------------------------------------------ sb3-contrib RecurrentPPO
@pytest.fixture(scope="module")
def rppo_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("rppo") / "run"
    import_policy(FIX / "rppo_cartpole.zip", run, env="CartPole-v1")
    return run


def test_recurrent_ppo_imports_as_a_recurrent_run_that_steps_as_sb3(rppo_run):
    """RecurrentPPO (MlpLstmPolicy): the one-step model's LSTM, stepped with its state carried
    and reset at each episode's start, takes SB3's own action at every step SB3 played, and its
    greedy returns are SB3's."""
    from quarl_edge.rl.recurrent import layers_from_keras, play_recurrent
    info = load_run(rppo_run)
    assert info["algo"] == "sb3-recurrentppo" and info["network"]["recurrent"] is True
    assert info["fidelity"]["ok"] and (rppo_run / "recurrent.npz").is_file()
    exp = np.load(FIX / "rppo_cartpole.expected.npz")
    layers = layers_from_keras(load_keras(rppo_run))
    state, actions = None, []
    for o, start in zip(exp["obs"], exp["starts"]):
        if start:
            state = layers.zero_state()
        out, state = layers.step(o[None], state)
        actions.append(int(np.argmax(out[0])))
    assert actions == exp["actions"].tolist()
    returns, _ = play_recurrent("CartPole-v1", layers, exp["seeds"].tolist())
    assert np.asarray(returns).tolist() == exp["returns"].tolist()


def test_recurrent_ppo_int8_on_mps2_an386_takes_tflms_actions(rppo_run, tmp_path):
    """Its int8 one-step model on QEMU mps2-an386, RESET per episode: every action of every
    episode is TF Lite Micro's."""
    import shutil

    from quarl_edge.measure.hil import run_hil
    from quarl_edge.quant.schemes import quantize
    from quarl_edge.targets.boards import get_board
    work = tmp_path / "run"
    shutil.copytree(rppo_run, work)
    quantize(work, "int8", calib_size=300, calib_episodes=3)
    res = run_hil(work, "int8", get_board("mps2-an386"), 3, seed=0,
                  results_dir=tmp_path / "res", build_dir=tmp_path / "fw")
    assert res["stateful"] is True and res["actions_equal_reference"] is True, res
    assert res["matches_reference"] is True and res["micro_mean_return"] is not None
