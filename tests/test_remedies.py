"""The int8 tie remedies for argmax heads (quarl_edge/quant/remedies.py): int8-centred (a real
.tflite from the real converter), int8-acc and int8-i16head (readouts of the int8 model's head
accumulators, run through tflite-runtime). Uses a copy of the shipped example DQN run."""
from __future__ import annotations

import json
import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from quarl_edge.quant import remedies  # noqa: E402
from quarl_edge.core.nets import keras_runner  # noqa: E402
from quarl_edge.core.errors import QuarlError  # noqa: E402
from quarl_edge.measure.reference import tflite_runner  # noqa: E402
from quarl_edge.quant.schemes import quantize  # noqa: E402
from quarl_edge.core.run import load_keras  # noqa: E402



@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from helpers_models import copy_example_run
    return copy_example_run(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def int8(run_dir):
    return quantize(run_dir, "int8", calib_size=300)


@pytest.fixture(scope="module")
def probe(run_dir, int8):
    return np.load(run_dir / "calibration.npy")


def test_accumulators_requantize_to_the_int8_models_own_output(int8, probe):
    """The head's accumulators, rescaled to the int8 output's scale and zero point, give the
    model's int8 output (TFLite's fixed-point requantization may differ by one step at a
    rounding boundary, nowhere more): the readout really is that layer's sum."""
    head = remedies.AccumulatorReadout(int8)
    run = tflite_runner(int8)
    out = run.output_details
    # The int8 model's output is DEQUANTIZE(int8): read the int8 tensor feeding it.
    deq = [op for op in head.interp._get_ops_details() if op["op_name"] == "DEQUANTIZE"][-1]
    q_index = deq["inputs"][0]
    s_out, z_out = [t for t in head.interp.get_tensor_details() if t["index"] == q_index][0]["quantization"]
    diffs = []
    for obs in probe[:200]:
        acc = head.accumulators(obs)
        mine = np.clip(np.round(acc * head.scale / s_out) + z_out, -128, 127)
        theirs = head.interp.get_tensor(q_index).reshape(-1).astype(np.int64)
        diffs.append(np.abs(mine - theirs))
        assert np.allclose(run(obs), (theirs - z_out) * s_out, atol=1e-6)   # same model
    diffs = np.concatenate(diffs)
    assert diffs.max() <= 1
    assert np.mean(diffs == 0) > 0.95
    assert out["dtype"] == np.float32


def test_accumulator_readout_removes_the_int8_ties(run_dir, int8, probe):
    ref = keras_runner(load_keras(run_dir))(probe)
    plain = np.stack([tflite_runner(int8)(o) for o in probe])
    acc = np.stack([remedies.accumulator_runner(int8)(o) for o in probe])

    def ties(q):
        top2 = np.sort(q, axis=1)[:, -2:]
        return np.mean(top2[:, 0] == top2[:, 1])

    assert ties(plain) > 0.05          # the problem exists on this policy ...
    assert ties(acc) < ties(plain) / 10    # ... and the readout removes nearly all of it
    # (Agreement with float need not rise: the body's int8 noise is larger than CartPole's
    # action gap, and a tie resolved to action 0 is right about as often as a noisy argmax.)
    # Real units: the readout approximates the float Q-values to a few int8 output steps.
    assert np.max(np.abs(acc - ref)) < 0.05 * np.ptp(ref)


def test_int16_head_is_the_accumulator_readout_on_a_16_bit_grid(int8, probe):
    run = remedies.int16_head_runner(int8, probe)
    exact = remedies.accumulator_runner(int8)
    for obs in probe[:100]:
        q = run(obs)
        assert np.all(np.abs(q - exact(obs)) <= run.out_scale / 2 + 1e-12)
        steps = q / run.out_scale
        assert np.allclose(steps, np.round(steps)) and np.all(np.abs(steps) <= 32768)


def test_centred_head_keeps_argmax_and_removes_the_offset(run_dir, probe):
    model = load_keras(run_dir)
    centred = remedies.centre_head(model)
    q, c = model(probe).numpy(), centred(probe).numpy()
    assert np.allclose(c.mean(axis=1), 0, atol=1e-4)
    assert np.allclose(q - q.mean(axis=1, keepdims=True), c, atol=1e-4)
    assert np.array_equal(q.argmax(1), c.argmax(1))
    # CartPole's offset dominates typical Q-values (a few off-policy states reach far out).
    assert np.median(np.abs(q)) > 100 * np.median(np.abs(c))
    # The original model is untouched.
    assert np.array_equal(model(probe).numpy(), q)


def test_int8_centred_is_a_real_int8_tflite_with_a_finer_output_step(run_dir, int8):
    path = quantize(run_dir, "int8-centred", calib_size=300)
    plain_scale = tflite_runner(int8).output_details
    centred = remedies.AccumulatorReadout(path)
    assert path.name == "int8-centred.tflite"
    deq = [op for op in centred.interp._get_ops_details() if op["op_name"] == "DEQUANTIZE"][-1]
    q = [t for t in centred.interp.get_tensor_details() if t["index"] == deq["inputs"][0]][0]
    plain = remedies.AccumulatorReadout(int8)
    pdeq = [op for op in plain.interp._get_ops_details() if op["op_name"] == "DEQUANTIZE"][-1]
    pq = [t for t in plain.interp.get_tensor_details() if t["index"] == pdeq["inputs"][0]][0]
    assert np.dtype(q["dtype"]) == np.int8
    # Finer, though only ~1.4x here: off-policy calibration states still span a wide range.
    assert q["quantization"][0] < pq["quantization"][0]
    assert plain_scale["dtype"] == np.float32


def test_centring_refuses_continuous_action_policies(run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    meta = json.loads((run / "run.json").read_text())
    meta["env"] = "Pendulum-v1"
    (run / "run.json").write_text(json.dumps(meta))
    with pytest.raises(QuarlError, match="continuous actions"):
        quantize(run, "int8-centred")


def test_accumulator_readout_refuses_a_float_model(run_dir):
    path = quantize(run_dir, "fp32")
    with pytest.raises(Exception, match="int8"):
        remedies.AccumulatorReadout(path)


# ------------------------------------------- int8-acc on the board: generated C vs reference
def test_int8_acc_model_is_the_int8_model_plus_a_tag(run_dir, int8):
    from quarl_edge.converters.tflite_model import load
    acc = quantize(run_dir, "int8-acc", calib_size=300)
    assert remedies.readout_metadata(acc) == b"accumulators" and remedies.readout_metadata(int8) is None
    a, b = load(acc), load(int8)
    assert [op.opcode for op in a.operators] == [op.opcode for op in b.operators]
    probe = np.load(run_dir / "calibration.npy")[:50]
    plain, tagged = tflite_runner(int8), tflite_runner(acc)     # TFLite ignores the tag
    assert all(np.array_equal(plain(o), tagged(o)) for o in probe)


def _head_golden(model_bytes: bytes, inputs: np.ndarray, workdir):
    """Generate + compile the tagged model with gcc, run `inputs`, compare bit for bit with
    AccumulatorReadoutReference. Returns (generated model, board outputs)."""
    from helpers_models import build_generated, run_driver
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "model.tflite"
    path.write_bytes(remedies.tag_accumulator_readout(model_bytes))
    gm, exe = build_generated(path, workdir / "gen")
    assert gm.outputs[0].dtype == "float32" and "DEQUANTIZE" not in gm.ops[1:]
    ref = remedies.AccumulatorReadoutReference(path)
    x = np.ascontiguousarray(inputs, np.float32).reshape((-1, *gm.inputs[0].shape))
    got = np.frombuffer(run_driver(exe, x.tobytes()), np.float32).reshape(len(x), -1)
    want = np.stack([ref.run([xi])[0].reshape(-1) for xi in x])
    assert got.view("<u4").tolist() == want.view("<u4").tolist()
    return gm, got


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 16), input_dim=st.integers(1, 16),
       widths=st.lists(st.integers(1, 40), min_size=1, max_size=3),
       offset=st.sampled_from([0.0, 50.0, -300.0]), weight_scale=st.sampled_from([0.1, 1.0, 8.0]))
def test_generated_accumulator_head_is_bit_exact(tmp_path_factory, seed, input_dim, widths,
                                                 offset, weight_scale):
    """Random MLPs from the real converter, with Q-value-like output offsets, through the
    generated int8-acc head (gcc): float32 outputs bit-identical to the host reference, on
    calibration-like and saturating inputs."""
    from helpers_models import convert, random_mlp
    acts = ["relu"] * (len(widths) - 1) + ["none"]
    keras = random_mlp(seed, input_dim, widths, acts, weight_scale)
    last = keras.layers[-1]
    k, b = last.get_weights()
    last.set_weights([k, b + np.float32(offset)])
    rng = np.random.default_rng(seed)
    model = convert(keras, "int8", rng.standard_normal((64, input_dim)).astype(np.float32))
    x = rng.standard_normal((120, input_dim)).astype(np.float32)
    x[::5] *= 1000.0                                                   # saturate the input
    _head_golden(model, x, tmp_path_factory.mktemp("head"))


def test_accumulator_head_per_channel_weights(tmp_path):
    """Per-channel weights (hand-built: the converter quantizes Dense per tensor): each output's
    own scale."""
    from helpers_models import fc_model, schema
    import flatbuffers
    fc = fc_model([[127, -128, 3], [5, 6, -7]], (0.05, 3), [0.01, 0.3], (0.2, -5), bias=[1000, -20])
    # float input -> QUANTIZE -> FC -> DEQUANTIZE -> float output, as the converter emits
    s = schema()
    m = s.ModelT.InitFromObj(s.Model.GetRootAs(fc, 0))
    sg = m.subgraphs[0]
    f_in = s.TensorT(); f_in.name, f_in.shape, f_in.type, f_in.buffer = b"x", [1, 3], s.TensorType.FLOAT32, 0
    f_out = s.TensorT(); f_out.name, f_out.shape, f_out.type, f_out.buffer = b"y", [1, 2], s.TensorType.FLOAT32, 0
    sg.tensors += [f_in, f_out]
    nt = len(sg.tensors)
    for name in ("QUANTIZE", "DEQUANTIZE"):
        oc = s.OperatorCodeT(); oc.builtinCode = oc.deprecatedBuiltinCode = getattr(s.BuiltinOperator, name)
        oc.version = 1
        m.operatorCodes.append(oc)
    q = s.OperatorT(); q.opcodeIndex, q.inputs, q.outputs = len(m.operatorCodes) - 2, [nt - 2], [0]
    dq = s.OperatorT(); dq.opcodeIndex, dq.inputs, dq.outputs = len(m.operatorCodes) - 1, [2], [nt - 1]
    sg.operators = [q, *sg.operators, dq]
    sg.inputs, sg.outputs = [nt - 2], [nt - 1]
    builder = flatbuffers.Builder(1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    rng = np.random.default_rng(1)
    x = rng.uniform(-20, 20, (64, 3)).astype(np.float32)
    gm, got = _head_golden(bytes(builder.Output()), x, tmp_path)
    assert "qe_fully_connected_s8_acc_f32(" in gm.c_path.read_text()
    assert ".channel_stride = 1u" in gm.c_path.read_text()


def test_accumulator_head_refuses_a_graph_without_an_fc_dequantize_tail(tmp_path):
    from helpers_models import fc_model
    from quarl_edge.converters import cgen
    from quarl_edge.core.errors import UnsupportedOpError
    path = tmp_path / "m.tflite"      # int8 in -> FC -> int8 out: no DEQUANTIZE at the end
    path.write_bytes(remedies.tag_accumulator_readout(fc_model([[1, 2]], (0.1, 0), 0.01, (0.1, 0))))
    with pytest.raises(UnsupportedOpError, match="FULLY_CONNECTED\\(int8\\) -> DEQUANTIZE"):
        cgen.generate(path, tmp_path / "gen")


def test_int8_acc_validates_bit_exact_on_the_host_board(run_dir):
    """The whole path: quantize int8-acc -> build the host firmware -> validate over the
    serial protocol against the accumulator reference (random inputs, a third saturating)."""
    from quarl_edge.targets.boards import get_board
    from quarl_edge.measure.validate import validate
    acc = quantize(run_dir, "int8-acc", calib_size=300)
    res = validate(acc, get_board("host"), run_dir / "build" / "host", random_n=200)
    assert res["bit_exact"] and res["n"] == 200 and res["mismatches"] == 0


def test_int8_centred_acc_is_centred_and_reads_the_accumulators(run_dir, probe):
    path = quantize(run_dir, "int8-centred-acc", calib_size=300)
    assert remedies.readout_metadata(path) == b"accumulators"
    ref = remedies.AccumulatorReadoutReference(path)
    q = keras_runner(load_keras(run_dir))(probe[:100])
    out = np.stack([ref.run([o[None]])[0].reshape(-1) for o in probe[:100]])
    # centred: the readout approximates Q - mean(Q) (not Q), with the fp32 argmax mostly kept
    assert np.median(np.abs(out.mean(axis=1))) < 0.05 * np.median(np.abs(q))
    assert np.mean(out.argmax(1) == q.argmax(1)) > 0.5
