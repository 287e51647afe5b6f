"""int8 activations x int4 weights (the int8x4 scheme, issue 39): generated C against TF Lite
Micro's int4 path, bit for bit, and the models we refuse.

- MLPs from the real pipeline: the TFLite converter's fp32 model, then litert-quantizer's
  int8 x int4 (quarl_edge/quant/lowbit.py), odd depths and odd weight counts included (rows
  that start in the middle of a byte); the generated model.c holds the packed bytes (half of
  int8's) and calls the int4 kernel for every layer;
- hand-built models that must be refused with one line (exit 2): a packed buffer whose size
  does not match its shape, per-channel int4 weights (TFLM's FULLY_CONNECTED refuses them too),
  an int4 activation, int4 weights in an op we cannot run with them (CONV_2D).
"""
from __future__ import annotations

import numpy as np
import pytest

from helpers_hostile import assert_refused, run_hostile
from helpers_models import convert, random_mlp
from helpers_tflite import build_tflite, quant, schema, tensor
from quarl_edge.converters import tflite_model
from quarl_edge.converters.emit import c_ident
from test_kernels_golden import _compare


def int8x4_mlp(seed: int, input_dim: int, widths: list[int], acts: list[str],
               weight_scale: float) -> bytes:
    from quarl_edge.quant.lowbit import int4_weights
    rng = np.random.default_rng(seed)
    fp32 = convert(random_mlp(seed, input_dim, widths, acts, weight_scale), "float")
    return int4_weights(fp32, rng.standard_normal((64, input_dim)).astype(np.float32))


@pytest.mark.parametrize("seed,input_dim,widths,acts,weight_scale", [
    (1, 4, [64, 64, 2], ["relu", "relu", "none"], 1.0),     # the CartPole DQN's shape
    (2, 7, [5, 3], ["relu", "none"], 0.5),                  # odd depth: rows start mid-byte
    (3, 1, [9], ["none"], 3.0),                             # depth 1, an odd weight count
    (4, 33, [17, 6], ["relu6", "none"], 0.1),
])
def test_int8x4_mlp_bit_exact_with_tflm(tmp_path, seed, input_dim, widths, acts, weight_scale):
    model = int8x4_mlp(seed, input_dim, widths, acts, weight_scale)
    parsed = tflite_model.parse(model)
    int4 = [t for t in parsed.tensors if t.dtype == "int4"]
    assert len(int4) == len(widths), [t.describe() for t in parsed.tensors]
    rng = np.random.default_rng(seed)
    # float I/O (QUANTIZE/DEQUANTIZE at the edges), inputs over the calibrated range and beyond
    inputs = (3 * rng.standard_normal((200, 1, input_dim))).astype(np.float32)
    r = _compare(model, inputs, tmp_path, f"int8x4 {seed} {input_dim} {widths} {acts}")
    assert r["gm"].ops[0] == "QUANTIZE" and r["gm"].ops[-1] == "DEQUANTIZE"
    model_c = (tmp_path / "gen" / "model.c").read_text()
    assert model_c.count("qe_fully_connected_s4(&") == len(widths)
    assert "qe_fully_connected_s8(" not in model_c
    for t in int4:        # the packed bytes in flash: half of int8's, rounded up
        assert f"uint8_t {c_ident(t.name, f'w{t.index}_')}[{(t.size + 1) // 2}]" in model_c


def test_int8x4_cnn_keeps_int8_convs_and_packs_its_dense_layers(tmp_path):
    """A CNN policy in int8x4 (MinAtar's shape: conv, pool, dense): FULLY_CONNECTED gets int4
    weights, CONV_2D and DEPTHWISE_CONV_2D keep int8 per-channel weights (the ops our firmware
    runs with int4 weights are FULLY_CONNECTED), and the generated C is bit-exact with TFLM."""
    from helpers_models import random_cnn
    from quarl_edge.quant.lowbit import int4_weights
    rng = np.random.default_rng(5)
    fp32 = convert(random_cnn(5, input_shape=(10, 10, 4)), "float")
    model = int4_weights(fp32, rng.random((16, 10, 10, 4)).astype(np.float32))
    parsed = tflite_model.parse(model)
    weights = {op.opcode: parsed.tensors[op.inputs[1]] for op in parsed.operators
               if op.opcode in ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D")}
    assert weights["FULLY_CONNECTED"].dtype == "int4"
    assert weights["CONV_2D"].dtype == weights["DEPTHWISE_CONV_2D"].dtype == "int8"
    assert len(weights["CONV_2D"].quantization.scale) == weights["CONV_2D"].shape[0] > 1
    inputs = rng.integers(0, 2, (24, 1, 10, 10, 4)).astype(np.float32)   # 0/1 images
    r = _compare(model, inputs, tmp_path, "int8x4 CNN")
    assert r["gm"].ops[0] == "QUANTIZE" and r["gm"].ops[-1] == "DEQUANTIZE"
    assert "qe_fully_connected_s4(&" in (tmp_path / "gen" / "model.c").read_text()


def test_quantize_int8x4_cartpole(tmp_path):
    """`quantize --scheme int8x4` on the example run: int4 weights for every layer, half the
    weight bytes of int8 (+ the biases), and the generated C bit-exact with TFLM."""
    from helpers_models import EXAMPLE_RUN, copy_example_run
    from quarl_edge.quant.schemes import quantize
    run = copy_example_run(tmp_path / "run")
    path = quantize(run, "int8x4", calib_size=200, calib_episodes=2)
    assert path == run / "models" / "int8x4.tflite"
    m4 = tflite_model.load(path)
    m8 = tflite_model.load(EXAMPLE_RUN / "models" / "int8.tflite")
    w4 = [t for t in m4.tensors if t.dtype == "int4"]
    w8 = [t for t in m8.tensors if t.is_constant and t.dtype == "int8"]
    assert sorted(list(t.shape) for t in w4) == sorted(list(t.shape) for t in w8)
    assert len(w4) == 3
    assert sum(t.data.size for t in w4) == sum(t.size for t in w8) // 2
    rng = np.random.default_rng(0)
    _compare(path.read_bytes(), (2 * rng.standard_normal((100, 1, 4))).astype(np.float32),
             tmp_path / "c", "int8x4 CartPole")


def test_quantize_qat_int8x4_cartpole(tmp_path):
    """`qat-int8x4`: the tfmot copy with 4-bit Dense kernels (ranges initialised, no fine-tuning
    steps here), converted by the TFLite converter's low-bit QAT path: INT4 weights per tensor,
    float I/O, and the generated C bit-exact with TFLM."""
    from helpers_models import copy_example_run
    from quarl_edge.quant.schemes import quantize
    run = copy_example_run(tmp_path / "run")
    path = quantize(run, "qat-int8x4", calib_size=200, calib_episodes=2, qat={"steps": 0})
    m = tflite_model.load(path)
    w4 = [t for t in m.tensors if t.dtype == "int4"]
    assert len(w4) == 3 and all(not t.quantization.per_channel for t in w4)
    assert (run / "qat-int8x4.json").is_file() and not (run / "qat.json").exists()
    rng = np.random.default_rng(0)
    r = _compare(path.read_bytes(), (2 * rng.standard_normal((100, 1, 4))).astype(np.float32),
                 tmp_path / "c", "qat-int8x4 CartPole")
    assert r["gm"].ops == ["QUANTIZE"] + ["FULLY_CONNECTED"] * 3 + ["DEQUANTIZE"]
    # the converter writes its int4 FULLY_CONNECTED as op version 10, which tflite-runtime
    # 2.14's reference kernels do not know: the host references load it (LiteRT then), as a
    # board cell's check needs, and both kernel sets run it
    from quarl_edge.core import tflite_host
    from quarl_edge.measure.reference import TFLiteRuntime
    assert {op.version for op in m.operators if op.opcode == "FULLY_CONNECTED"} == {10}
    x = [np.ones((1, 4), np.float32)]
    for kernels in ("optimized", "reference"):
        ref = TFLiteRuntime(path, kernels)
        assert np.all(np.isfinite(ref.run(x)[0]))
        if kernels == "reference" and tflite_host.runtime_name() == "tflite-runtime":
            assert type(ref.interp).__module__ == "ai_edge_litert.interpreter"


# ------------------------------------------------------------------- refused models
def _fc4(weights_bytes: bytes, w_shape, *, w_scales=(0.05,), input_type="INT8") -> bytes:
    """int8 input [1, depth] -> FULLY_CONNECTED (INT4 weights given as packed bytes) -> int8."""
    s = schema()
    out_depth, depth = w_shape
    wq = quant(list(w_scales), [0] * len(w_scales))
    if len(w_scales) > 1:
        wq.quantizedDimension = 0
    tensors = [tensor("input", [1, depth], getattr(s.TensorType, input_type), 1, quant(0.1, 0)),
               tensor("fc/weights", list(w_shape), s.TensorType.INT4, 2, wq),
               tensor("output", [1, out_depth], s.TensorType.INT8, 3, quant(0.2, 0))]
    return build_tflite(tensors, [None, None, weights_bytes, None],
                        [("FULLY_CONNECTED", [0, 1, -1], [2], s.FullyConnectedOptionsT())],
                        [0], [2])


def _conv4() -> bytes:
    s = schema()
    tensors = [tensor("input", [1, 4, 4, 1], s.TensorType.INT8, 1, quant(0.1, 0)),
               tensor("conv/filter", [2, 3, 3, 1], s.TensorType.INT4, 2, quant(0.05, 0)),
               tensor("output", [1, 2, 2, 2], s.TensorType.INT8, 3, quant(0.2, 0))]
    opt = s.Conv2DOptionsT()
    opt.padding, opt.strideW, opt.strideH = s.Padding.VALID, 1, 1
    opt.dilationWFactor = opt.dilationHFactor = 1
    return build_tflite(tensors, [None, None, bytes(9), None],
                        [("CONV_2D", [0, 1, -1], [2], opt)], [0], [2])


def test_fc4_hand_built_runs(tmp_path):
    """The hand-built model the refusals below start from is one we run bit-exactly."""
    w = np.random.default_rng(0).integers(0, 256, 6, dtype=np.uint8).tobytes()   # [4, 3]
    rng = np.random.default_rng(1)
    _compare(_fc4(w, (4, 3)), rng.integers(-128, 128, (64, 1, 3)).astype(np.int8), tmp_path,
             "hand-built int4 FULLY_CONNECTED")


@pytest.mark.parametrize("case,model,words", [
    ("int4-packed-size", lambda: _fc4(bytes(5), (4, 3)),
     "needs 6 packed bytes, its buffer holds 5"),
    ("int4-per-channel", lambda: _fc4(bytes(6), (4, 3), w_scales=(0.1, 0.2, 0.3, 0.4)),
     "quantized per channel"),
    ("int4-activation", lambda: _fc4(bytes(6), (4, 3), input_type="INT4"),
     "input 'input' is int4"),
    ("int4-conv", _conv4, "CONV_2D"),
])
def test_int4_models_we_cannot_run_are_refused(tmp_path, case, model, words):
    path = tmp_path / "model.tflite"
    path.write_bytes(model())
    o = run_hostile(case, ["build", str(path), "--board", "host", "--out", str(tmp_path / "o")],
                    tmp_path)
    assert_refused(o, words)
