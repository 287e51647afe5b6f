"""ONNX files as real exporters write them import (issue 23, its ONNX part).

The fixtures in tests/fixtures/onnx-export/ were made by torch 2.13's torch.onnx.export from the
RL Zoo's trained agents and a CleanRL-style actor (make_fixtures.py there; manifest.json says
which exporter and opset made each file, SOURCE.md where the weights come from). They hold what
our hand-made fixtures lacked: SB3's float32 -> float32 Cast, Constant nodes, and the shape
arithmetic (Shape, Gather, Unsqueeze, Concat -> Reshape) of `x.reshape(x.shape[0], -1)`.
Each is imported with the CLI, as a user would, and the imported Keras network is compared with
onnxruntime and with torch's own outputs on the fixture's 100 observations."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from quarl_edge.api import import_policy
from quarl_edge.core.nets import keras_runner
from quarl_edge.core.run import load_keras, load_run

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "onnx-export"
MANIFEST = json.loads((FIX / "manifest.json").read_text())
MADE = {f: e for f, e in MANIFEST["files"].items() if "error" not in e}
IMPORTED = sorted(MADE)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "quarl_edge.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def onnxruntime_outputs(path: Path, obs: np.ndarray) -> np.ndarray:
    import onnxruntime as ort
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: obs.astype(np.float32)})[0]


def test_the_fixtures_cover_both_exporters_and_opsets():
    """The table of the README/issue: opsets 13 and 20 with dynamo=False for every network, the
    dynamo exporter for every network it can trace (the gSDE actor it cannot: see SOURCE.md)."""
    assert MANIFEST["torch"].startswith("2.13.0")
    combos = {(e["network"], e["exporter"]) for e in MADE.values()}
    for net in {e["network"] for e in MANIFEST["files"].values()}:
        assert {(net, "op13"), (net, "op20")} <= combos, net
    assert {MADE[f]["opset"] for f in MADE} >= {13, 20}
    assert {e["network"] for e in MADE.values() if e["exporter"] == "dynamo"} == \
        {"ppo_cartpole_logits", "dqn_cartpole_q", "ddpg_pendulum_actor",
         "cleanrl_pendulum_actor"}
    # what the folding is for: these ops are in the real files
    ops = set().union(*(MADE[f]["ops"] for f in IMPORTED))
    assert {"Cast", "Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Constant"} <= ops


@pytest.mark.parametrize("name", IMPORTED)
def test_a_real_export_imports_and_equals_onnxruntime_and_torch(tmp_path, name):
    entry = MADE[name]
    src, run = FIX / name, tmp_path / "run"
    # in this process, not through the CLI: 16 files, and a CLI process per file spent most of
    # its time importing TensorFlow (`quarl-edge import` itself is run on two of them below and
    # in test_import.py / test_docs_runs.py); import_policy is what the CLI calls
    res = import_policy(src, out=run, env=entry["env"])
    assert res.run_dir == str(run)
    info = load_run(run)
    assert info["source"]["kind"] == "onnx" and info["source"]["opset"] == entry["opset"]
    assert info["fidelity"]["ok"] and info["fidelity"]["reference"].startswith("onnxruntime")
    exp = np.load(FIX / f"{entry['network']}.expected.npz")
    ours = keras_runner(load_keras(run))(exp["obs"])
    # 1e-5 of the outputs' scale: the zoo's DQN gives Q-values near 70, where float32's ulp is
    # 7.6e-6 and the 256-wide sums differ by a few of them between Keras and onnxruntime
    tol = 1e-5 * max(1.0, float(np.max(np.abs(exp["outputs"]))))
    assert np.max(np.abs(ours - onnxruntime_outputs(src, exp["obs"]))) <= tol
    assert np.max(np.abs(ours - exp["outputs"])) <= tol


@pytest.mark.parametrize("name", ["sac_pendulum_actor.op13.onnx", "sac_pendulum_actor.op20.onnx"])
def test_the_gsde_actor_clips_its_mean_and_its_dead_std_never_reaches_onnxruntime(tmp_path, name):
    """SB3's gSDE SAC actor: Hardtanh(-2, 2) exports as Clip (imported as a relu6 between two
    scalings), and the distribution's std (Exp, Pow, Sqrt) only feeds a Shape whose value is
    static (the batch, 1): those nodes are dead, so onnxruntime is given the graph without
    them, and the run quantizes."""
    import onnx

    from quarl_edge.importers.onnx_layers import graph_to_layers
    model = onnx.load(str(FIX / name))
    layers, _, _, _, checked = graph_to_layers(model, name)
    assert [x.act for x in layers] == ["relu", "relu", "relu6", "tanh", "linear"]
    ops = {n.op_type for n in checked.graph.node}
    assert {"Exp", "Pow", "Sqrt"} <= {n.op_type for n in model.graph.node}
    assert not {"Exp", "Pow", "Sqrt", "ConstantOfShape"} & ops, ops
    run = tmp_path / "run"
    p = cli("import", FIX / name, "--env", "Pendulum-v1", "--out", run)
    assert p.returncode == 0, p.stderr[-3000:]
    p = cli("quantize", run, "--scheme", "int8", "--json")
    assert p.returncode == 0, p.stderr[-3000:]


def _graph(nodes, inits=(), shape=(None, 4)):
    import onnx
    from onnx import TensorProto, helper
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     ["batch", *shape[1:]])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
                          initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("case", ["cast-to-int64", "reshape-not-flatten"])
def test_a_real_cast_or_an_unknown_op_is_refused_naming_every_one(tmp_path, case):
    """A float -> int64 Cast of the data is not a no-op: refused by name with the unknown op,
    in one line, exit 2, nothing written, onnxruntime never given the file."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.ones((4, 2), np.float32), "w")
    if case == "cast-to-int64":
        nodes = [helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64),
                 helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
                 helper.make_node("Erf", ["f"], ["e"]),
                 helper.make_node("Gemm", ["e", "w"], ["y"])]
        words = ["#0 Cast (FLOAT to INT64)", "#2 Erf"]
        inits = [w]
    else:   # a Reshape that is not a flatten, from a folded shape, and an unknown op
        shape = numpy_helper.from_array(np.array([2, -1], np.int64), "s")
        nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]),
                 helper.make_node("HardSwish", ["r"], ["h"]),
                 helper.make_node("Gemm", ["h", "w"], ["y"])]
        words = ["#0 Reshape (to [2, -1]: not a flatten)", "#1 HardSwish"]
        inits = [w, shape]
    src = tmp_path / "m.onnx"
    onnx.save(_graph(nodes, inits), src)
    p = cli("import", src, "--env", "CartPole-v1", "--out", tmp_path / "r")
    assert p.returncode == 2, p.stderr[-3000:]
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    for word in words:
        assert word in p.stderr, (word, p.stderr)
    assert not (tmp_path / "r").exists()
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".r.import")]


def test_folding_keeps_the_batch_a_symbol_and_maps_the_reshape_as_flatten():
    """Unit level: the CleanRL export's Shape -> Gather -> Unsqueeze -> Concat folds to
    [batch, -1], its Reshape becomes a Flatten, and no shape op is left to map."""
    import onnx

    from quarl_edge.importers.onnx_fold import fold
    model = onnx.load(str(FIX / "cleanrl_pendulum_actor.op20.onnx"))
    nodes, consts, out, live = fold(model, "t")
    assert live == list(range(len(model.graph.node)))   # every node is live here
    assert out == model.graph.output[0].name
    ops = [n.op_type for _, n in nodes]
    assert ops[0] == "Flatten" and not {"Shape", "Gather", "Unsqueeze", "Concat", "Reshape",
                                        "Constant"} & set(ops)
    concat = [n for n in model.graph.node if n.op_type == "Concat"][0].output[0]
    assert [str(d) for d in consts[concat]] == ["batch", "-1"]
