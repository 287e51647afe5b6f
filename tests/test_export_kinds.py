"""`quarl-edge export` for the other run kinds (issue 37): a Keras `.keras` import, a TF-Agents
SavedModel, an SB3 zip and an RL Zoo run folder (VecNormalize with its clip layer), each
quantized to int8 and exported for the host, linked into one user's CMake program: every
self-test passes and the actions equal the host's mapping of TF Lite Micro's outputs (what
`hil` compares a board with) for the same observations. And a model with an op no board runs
is refused in one line naming the op, nothing written."""
from __future__ import annotations

import numpy as np
import pytest

from helpers_export import ROOT, cli, export, host_actions, observations
from helpers_hostile import assert_refused, assert_unchanged, run_hostile, snapshot
from test_export import build_program, run_program

# Four importers, four quantizations and a CMake build: ~6 min on one core, so it runs with
# `make test-slow` (the default suite keeps test_export.py's six policies in one program).
pytestmark = pytest.mark.slow

KINDS = {   # name: (source, import options)
    "keras": (ROOT / "examples" / "cartpole_dqn" / "qnet.keras", ["--env", "CartPole-v1"]),
    "saved": (ROOT / "examples" / "cartpole_dqn" / "policy", ["--env", "CartPole-v1"]),
    "sb3": (ROOT / "tests" / "fixtures" / "sb3" / "dqn_cartpole.zip", ["--env", "CartPole-v1"]),
    "zoo": (ROOT / "tests" / "fixtures" / "rl-zoo" / "a2c" / "LunarLanderContinuous-v2_1", []),
}


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """name -> (run, export facts, library folder)."""
    d = tmp_path_factory.mktemp("kinds")
    out = {}
    for name, (src, opts) in KINDS.items():
        cli("import", src, *opts, "--out", d / name)
        cli("quantize", d / name, "--scheme", "int8")
        out[name] = (d / name, export(d / name, name, d / f"lib-{name}"), d / f"lib-{name}")
    return out


@pytest.fixture(scope="module")
def program(kinds, tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("app"), {n: f for n, (_, _, f) in kinds.items()})


def test_every_kind_passes_its_selftest(program, kinds):
    assert run_program(program, []) == [f"selftest {n} 0" for n in sorted(kinds)]


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kind_acts_as_the_host_maps_tflm(program, kinds, name):
    run, facts, _ = kinds[name]
    obs = observations(facts["env"])
    out = run_program(program, [f"{name} " + " ".join(float(v).hex() for v in o)
                                for o in obs])[len(kinds):]
    assert len(out) == len(obs) and all(ln.split()[0] == "0" for ln in out), out[:3]
    ours = np.array([[float.fromhex(v) for v in ln.split()[1:]] for ln in out], np.float32)
    want = host_actions(run, "int8", obs)
    assert ours.shape == want.shape == (len(obs), facts["action_size"])
    assert np.array_equal(ours.view(np.uint32), want.view(np.uint32)), np.argwhere(ours != want)[:5]
    assert len(np.unique(want)) > 1


def test_the_zoo_run_keeps_its_continuous_head(kinds):
    facts = kinds["zoo"][1]
    assert facts["env"] == "LunarLanderContinuous-v3" and facts["action_size"] == 2
    assert facts["action_head"] in ("identity", "scale") and facts["low"] == [-1.0, -1.0]


def test_a_model_with_an_op_no_board_runs_is_refused_in_one_line(tmp_path):
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    def policy(x):
        return tf.math.cumsum(tf.matmul(x, tf.constant(np.eye(4, 2, dtype=np.float32))), axis=1)

    conv = tf.lite.TFLiteConverter.from_concrete_functions([policy.get_concrete_function()],
                                                           policy)
    model = tmp_path / "cumsum.tflite"
    model.write_bytes(conv.convert())
    before = snapshot(tmp_path)
    o = run_hostile("export-unsupported-op", ["export", str(model), "--env", "CartPole-v1",
                                              "--board", "mps2-an386", "--name", "p", "--out",
                                              str(tmp_path / "lib")], tmp_path)
    assert_refused(o, "CUMSUM")
    assert "mps2-an386" in o.stderr
    assert_unchanged(before, snapshot(tmp_path))
    assert not (tmp_path / "lib").exists()
