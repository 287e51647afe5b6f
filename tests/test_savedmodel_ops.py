"""Untrusted SavedModels (issue 24): every op of saved_model.pb's graph and function library is
checked against the policy allowlist before TensorFlow loads or runs any of it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from quarl_edge.importers.savedmodel import CHECKPOINT_OPS, POLICY_OPS, check_ops

ROOT = Path(__file__).resolve().parents[1]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "quarl_edge.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def evil_savedmodel(out: Path, marker: Path, how: str = "write_file") -> Path:
    """A SavedModel shaped like a TF-Agents Q policy (QNetwork variables, an `action`
    signature) whose action function also writes `marker` (tf.io.write_file): without the
    check, import's fidelity check would call it and write the file."""
    import tensorflow as tf

    class Policy(tf.Module):
        def __init__(self):
            super().__init__()
            self.kernel = tf.Variable(tf.ones((4, 2)), name="QNetwork/dense/kernel")
            self.bias = tf.Variable(tf.zeros((2,)), name="QNetwork/dense/bias")
            self.model_variables = [self.kernel, self.bias]

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32,
                                                    name="0/observation")])
        def action(self, observation):
            if how == "write_file":
                tf.io.write_file(str(marker), "pwned")
            elif how == "read_file":            # e.g. ~/.ssh/id_rsa into the outputs
                size = tf.strings.length(tf.io.read_file(str(out / "saved_model.pb")))
                observation += tf.cast(size, tf.float32) * 0.0
            else:                               # a checkpoint op outside the saver's functions
                tf.raw_ops.SaveV2(prefix=str(marker), tensor_names=["k"], shape_and_slices=[""],
                                  tensors=[self.kernel.read_value()])
            q = tf.matmul(observation, self.kernel) + self.bias
            return {"action": tf.argmax(q, axis=-1)}

    policy = Policy()
    tf.saved_model.save(policy, str(out), signatures={"action": policy.action})
    return out


def test_a_savedmodel_that_writes_a_file_is_refused_before_it_runs(tmp_path):
    marker = tmp_path / "marker"
    model = evil_savedmodel(tmp_path / "evil", marker)
    assert not marker.exists()
    p = cli("import", model, "--env", "CartPole-v1", "--out", tmp_path / "r")
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("quarl-edge: error:"), p.stderr
    assert "WriteFile" in lines[0] and "refused" in lines[0]
    assert not marker.exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("how,op", [("read_file", "ReadFile"), ("save_v2", "SaveV2")])
def test_file_ops_anywhere_but_the_savers_functions_are_refused(tmp_path, how, op):
    from quarl_edge.core.errors import QuarlError
    model = evil_savedmodel(tmp_path / "evil", tmp_path / "marker", how)
    with pytest.raises(QuarlError, match=f"refused: .*{op}"):
        check_ops(model)


def test_the_examples_policysaver_output_passes():
    check_ops(ROOT / "examples" / "cartpole_dqn" / "policy")      # does not raise
    assert not POLICY_OPS & {"WriteFile", "ReadFile", "PyFunc", "EagerPyFunc"}
    assert not CHECKPOINT_OPS & {"WriteFile", "ReadFile", "PyFunc", "EagerPyFunc"}


def test_a_corrupt_saved_model_pb_is_one_line(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "saved_model.pb").write_bytes(b"\xff" * 64)
    p = cli("import", tmp_path / "m", "--env", "CartPole-v1", "--out", tmp_path / "r")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
