"""quarl_edge/converters/cgen.py and quarl_edge/converters/tflite_model.py: generated C, model.json, errors."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_models import (CFLAGS, build_tflite, compile_driver, convert, fc_model, gcc,
                            random_mlp, quant, schema, tensor)
from quarl_edge.converters import cgen, tflite_model
from quarl_edge.converters.ops import LOWERINGS, SUPPORTED, supported_list
from quarl_edge.core.errors import ModelError, QuarlError, UnsupportedOpError
from quarl_edge.converters.tensor import TensorSpec
from quarl_edge.link import protocol as P


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("int8")
    mlp = random_mlp(3, 6, [16, 4], ["relu", "none"], 1.0)
    path = d / "policy.tflite"
    path.write_bytes(convert(mlp, "int8"))
    return path


def test_generated_c_compiles_strict(int8_model, tmp_path):
    gm = cgen.generate(int8_model, tmp_path)
    res = subprocess.run([gcc(), *CFLAGS, "-pedantic", "-c", str(gm.c_path), "-o",
                          str(tmp_path / "model.o")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_generated_model_info(int8_model, tmp_path):
    gm = cgen.generate(int8_model, tmp_path, name="cartpole dqn")
    data = int8_model.read_bytes()
    assert gm.name == "cartpole_dqn"
    assert gm.hash == hashlib.sha256(data).digest()[:8]
    assert gm.ops == ["QUANTIZE", "FULLY_CONNECTED", "FULLY_CONNECTED", "DEQUANTIZE"]
    assert gm.inputs == [TensorSpec("float32", (1, 6), 0.0, 0)]
    assert gm.outputs == [TensorSpec("float32", (1, 4), 0.0, 0)]
    # the specs are what the board reports in HELLO: they cross the wire unchanged
    hello = P.Hello(1, P.VERSION, "ns", 0, 256, "host", gm.name, gm.hash, gm.arena_bytes,
                    gm.inputs, gm.outputs)
    back = P.parse_hello(P.pack_hello(hello))
    assert (back.inputs, back.outputs) == (gm.inputs, gm.outputs)
    assert back.inputs[0].nbytes == 24 and back.inputs[0].np_dtype == "<f4"
    assert gm.weight_bytes == 6 * 16 + 16 * 4 + 4 * (16 + 4)
    assert gm.arena_bytes % 16 == 0 and gm.arena_bytes >= 24 + 16

    info = json.loads(gm.json_path.read_text())
    assert info["name"] == "cartpole_dqn" and info["hash"] == gm.hash.hex()
    assert info["arena_bytes"] == gm.arena_bytes and info["ops"] == gm.ops
    assert info["inputs"][0]["shape"] == [1, 6] and info["outputs"][0]["dtype"] == "float32"
    assert info["rounding"] == "double"

    src = gm.c_path.read_text()
    assert "void qe_model_invoke(void)" in src and "const qe_model_info_t qe_model_info" in src
    assert "QE_ALIGNED(16)" in src
    assert src.count("qe_fully_connected_s8(") == 2
    assert "/* op 1: FULLY_CONNECTED int8:" in src           # one comment per op
    assert "serving_default_input_1:0 [1, 6] float32" in src  # tensor names and shapes
    assert "static const QE_FLASH int8_t w" in src           # const weights (flash on AVR)

    exe = compile_driver(tmp_path)
    line = subprocess.run([str(exe), "--info"], capture_output=True, text=True, check=True).stdout
    assert line.split() == ["cartpole_dqn", gm.hash.hex(), str(gm.arena_bytes), "1", "1", "24", "16"]


def test_int8_io_model_has_int8_specs(tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(convert(random_mlp(1, 3, [2], ["none"]), "int8_io"))
    gm = cgen.generate(path, tmp_path / "gen")
    assert gm.ops == ["FULLY_CONNECTED"]
    assert gm.inputs[0].dtype == "int8" and gm.inputs[0].scale > 0
    assert gm.outputs[0].dtype == "int8"
    assert gm.input_bytes == 3 and gm.output_bytes == 2


def test_cli(int8_model, tmp_path):
    ok = subprocess.run([sys.executable, "-m", "quarl_edge.converters.cgen", str(int8_model),
                         str(tmp_path / "out"), "--name", "p"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "out" / "model.c").exists() and (tmp_path / "out" / "model.json").exists()
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"not a model at all")
    err = subprocess.run([sys.executable, "-m", "quarl_edge.converters.cgen", str(bad),
                          str(tmp_path / "out2")], capture_output=True, text=True)
    assert err.returncode == 2
    assert err.stderr.startswith("error: ") and "Traceback" not in err.stderr
    assert not (tmp_path / "out2").exists()


# ------------------------------------------------------------------- unsupported models
def _keras_unsupported(kind: str) -> bytes:
    import tensorflow as tf
    tf.keras.utils.set_random_seed(0)
    if kind == "sin":
        m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3),
                                 tf.keras.layers.Lambda(tf.math.sin)])
        return convert(m, "float")
    if kind == "conv":      # CONV_2D is supported, grouped convolution is not
        m = tf.keras.Sequential([tf.keras.Input((8, 8, 2)), tf.keras.layers.Conv2D(2, 3, groups=2),
                                 tf.keras.layers.Flatten(), tf.keras.layers.Dense(2)])
        return convert(m, "float")
    if kind == "dynamic":   # dynamic-range quantization only touches weights >= 1024 elements
        return convert(random_mlp(0, 32, [64, 2], ["relu", "none"]), "dynamic")
    if kind == "fp16":
        return convert(random_mlp(0, 4, [3], ["none"]), "fp16")
    raise ValueError(kind)


@pytest.mark.parametrize("kind, words", [
    ("sin", ["SIN", "float32"]),
    ("conv", ["CONV_2D", "float32", "grouped convolution", "Shapes: [1,8,8,2], [2,3,3,1], [2] -> [1,6,6,2]"]),
    ("dynamic", ["FULLY_CONNECTED", "hybrid", "int8"]),
    ("fp16", ["DEQUANTIZE", "float16"]),
])
def test_unsupported_keras_models_are_named(tmp_path, kind, words):
    path = tmp_path / f"{kind}.tflite"
    path.write_bytes(_keras_unsupported(kind))
    with pytest.raises(UnsupportedOpError) as exc:
        cgen.generate(path, tmp_path / "gen")
    for w in words:
        assert w in str(exc.value), str(exc.value)
    assert not (tmp_path / "gen" / "model.c").exists()


def test_per_channel_fc_needs_symmetric_weights(tmp_path):
    path = tmp_path / "pc.tflite"
    path.write_bytes(fc_model([[1, 2], [3, 4]], (0.1, 0), [0.01, 0.02], (0.1, 0), weight_zp=3))
    with pytest.raises(UnsupportedOpError, match="FULLY_CONNECTED.*per-channel weights .* not symmetric"):
        cgen.generate(path, tmp_path / "gen")


def test_per_channel_fc_is_generated(tmp_path):
    path = tmp_path / "pc.tflite"
    path.write_bytes(fc_model([[1, 2], [3, 4]], (0.1, 0), [0.01, 0.02], (0.1, 0)))
    gm = cgen.generate(path, tmp_path / "gen")
    assert "qe_fully_connected_s8_pc(" in gm.c_path.read_text()


def test_int16_quantize_with_zero_point_is_rejected(tmp_path):
    s = schema()
    tensors = [tensor("x", [1, 4], s.TensorType.FLOAT32, 1),
               tensor("q", [1, 4], s.TensorType.INT16, 2, quant(0.01, 5))]
    path = tmp_path / "q16.tflite"
    path.write_bytes(build_tflite(tensors, [None, None, None], [("QUANTIZE", [0], [1], None)], [0], [1]))
    with pytest.raises(UnsupportedOpError, match=r"QUANTIZE \(float32 -> int16\).*zero point 5"):
        cgen.generate(path, tmp_path / "gen")


def test_int16_relu_is_refused_by_name(tmp_path):
    from helpers_models import unary_model
    path = tmp_path / "t16.tflite"
    path.write_bytes(unary_model("RELU", [1, 4], "int16", (1 / 4096, 0), (1 / 4096, 0)))
    with pytest.raises(UnsupportedOpError, match=r"RELU \(int16 -> int16\).*int16 RELU; "
                                                 r"supported: int8 and float32, int16 TANH"):
        cgen.generate(path, tmp_path / "gen")


def test_unsupported_fused_activation(tmp_path):
    path = tmp_path / "t.tflite"
    path.write_bytes(fc_model([[1, 2]], (0.1, 0), 0.01, (0.1, 0), activation="TANH"))
    with pytest.raises(UnsupportedOpError, match="fused activation TANH"):
        cgen.generate(path, tmp_path / "gen")


# ------------------------------------------------------------------------ malformed files
@pytest.mark.parametrize("content", [b"", b"TFL3", b"hello world, not a model",
                                     b"\x00\x00\x00\x00TFL3" + b"\xff" * 40])
def test_malformed_files_raise_model_error(tmp_path, content):
    path = tmp_path / "bad.tflite"
    path.write_bytes(content)
    with pytest.raises(ModelError):
        cgen.generate(path, tmp_path / "gen")


def test_missing_file_raises_model_error(tmp_path):
    with pytest.raises(ModelError, match="cannot read"):
        tflite_model.load(tmp_path / "nope.tflite")


def test_truncated_model_raises_model_error(int8_model):
    data = int8_model.read_bytes()
    for n in (16, 64, len(data) // 2, len(data) - 1):
        with pytest.raises(ModelError):
            tflite_model.parse(data[:n])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_models_fail_cleanly(int8_model, tmp_path, data):
    """Random byte flips: parse and generate either work or raise a QuarlError, nothing else."""
    raw = bytearray(int8_model.read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(8, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    path = tmp_path / "fuzz.tflite"
    path.write_bytes(bytes(raw))
    try:
        cgen.generate(path, tmp_path / "fuzz")
    except QuarlError:
        pass


def test_tflite_model_reader(int8_model):
    m = tflite_model.load(int8_model)
    assert [op.opcode for op in m.operators] == ["QUANTIZE", "FULLY_CONNECTED", "FULLY_CONNECTED",
                                                 "DEQUANTIZE"]
    fc = m.operators[1]
    assert fc.fused_activation == "RELU"
    w = m.tensors[fc.inputs[1]]
    assert w.is_constant and w.dtype == "int8" and w.shape == (16, 6) and w.data.shape == (16, 6)
    assert not w.quantization.per_channel and w.zero_point == 0
    b = m.tensors[fc.inputs[2]]
    assert b.dtype == "int32" and b.data.shape == (16,)
    assert m.input_tensors()[0].dtype == "float32" and m.output_tensors()[0].shape == (1, 4)
    assert m.hash8 == hashlib.sha256(int8_model.read_bytes()).digest()[:8]
    assert np.isclose(b.scale, m.tensors[fc.inputs[0]].scale * w.scale, rtol=1e-6)


def test_bias_scale_mismatch_is_a_model_error(tmp_path):
    s = schema()
    data = fc_model([[1, 2]], (0.1, 0), 0.01, (0.1, 0), bias=[5])
    m = s.ModelT.InitFromPackedBuf(data, 0)
    m.subgraphs[0].tensors[3].quantization.scale = [0.5]     # bias scale != 0.1 * 0.01
    import flatbuffers
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    path = tmp_path / "b.tflite"
    path.write_bytes(bytes(b.Output()))
    with pytest.raises(ModelError, match="bias scale"):
        cgen.generate(path, tmp_path / "gen")


def test_accumulator_overflow_is_rejected(tmp_path):
    path = tmp_path / "o.tflite"
    path.write_bytes(fc_model(np.ones((1, 1000)), (0.1, 0), 0.01, (0.1, 0), bias=[(1 << 31) - 1000]))
    with pytest.raises(UnsupportedOpError, match="overflow"):
        cgen.generate(path, tmp_path / "gen")


def test_every_unsupported_op_is_named_at_once(tmp_path):
    """A model with two ops the firmware lacks names both (with their op index and types), not
    only the first, and writes nothing."""
    import tensorflow as tf
    tf.keras.backend.clear_session()
    inp = tf.keras.Input((6,))
    x = tf.keras.layers.Dense(4)(inp)
    x = tf.keras.layers.Lambda(tf.math.abs)(x)
    x = tf.keras.layers.Lambda(tf.math.floor)(x)
    path = tmp_path / "two_missing.tflite"
    path.write_bytes(convert(tf.keras.Model(inp, x), "float"))
    with pytest.raises(UnsupportedOpError) as e:
        cgen.generate(path, tmp_path / "gen")
    text = str(e.value)
    assert text.startswith("2 of the model's 3 ops cannot run on the firmware:")
    assert "op 1 ABS (float32 -> float32) is not supported" in text
    assert "op 2 FLOOR (float32 -> float32) is not supported" in text
    assert text.count("Supported: ") == 1 and "FULLY_CONNECTED" in text
    assert not (tmp_path / "gen" / "model.c").exists()


def test_the_supported_list_is_the_lowerings_own(capsys):
    """One list of supported ops, made from every lowering module's SUPPORTED: `--help` prints
    it, and docs/pipeline.md's copy (between its supported-ops markers) is exactly it."""
    listed = supported_list().splitlines()
    assert listed == [f"- {s}" for s in SUPPORTED]
    modules = {sys.modules[f.__module__] for f in LOWERINGS.values()}
    assert {s for m in modules for s in m.SUPPORTED} == set(SUPPORTED)
    with pytest.raises(SystemExit):
        cgen.main(["--help"])
    assert supported_list() in capsys.readouterr().out
    doc = (Path(__file__).resolve().parents[1] / "docs" / "pipeline.md").read_text()
    copy = doc.split("<!-- supported-ops: begin -->\n", 1)[1].split("\n<!-- supported-ops: end -->", 1)[0]
    assert copy == supported_list(), "docs/pipeline.md: paste supported_list() between the markers"
