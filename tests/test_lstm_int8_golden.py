"""Golden tests for the int8 UNIDIRECTIONAL_SEQUENCE_LSTM (issue 12): the converter's full-integer
LSTM (int8 activations and weights, int32 biases, int16 cell state) as generated C
(firmware/core/kernels/lstm_int8.c; gcc, tests/c/run_model.c) against the tflite-micro
interpreter, every output identical.

The models are Keras `LSTM` layers converted by the real TFLite converter (TF 2.15) with full
integer quantization from a representative dataset, from a concrete function with a fixed batch
and time (one fused UNIDIRECTIONAL_SEQUENCE_LSTM, variable hidden/cell state tensors: int8 at the
output's scale and zero point, int16 at a power-of-two scale). Both sides run every record
through one model instance, so the state carries over from invocation to invocation; the reset
tests call qe_model_reset_state() and the interpreter's reset() at the same records.

Also here: TFLM's int16 sigmoid table, measured again through the interpreter
(scripts/measure_sigmoid_table.py) and compared with the committed data the generator emits,
and the kernel's int16 sigmoid/tanh against the interpreter's int16 LOGISTIC/TANH on every int16
input.
"""
from __future__ import annotations

import importlib.util
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from helpers_models import CFLAGS, CORE, ROOT, compare_generated, gcc, schema, tflm_run_multi
from quarl_edge.converters import cgen, qmath
from quarl_edge.core.tfcompat import configure_converter
from quarl_edge.converters.emit import c_ident
from quarl_edge.converters.tflite_model import parse
from quarl_edge.core.errors import UnsupportedOpError

_PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
_HC = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
FEW = settings(max_examples=2, deadline=None, phases=_PHASES, suppress_health_check=_HC)
N = 40                    # invocations per model: the state runs through all of them


def keras_lstm_int8(steps: int, n_in: int, units: int, *, batch: int = 1,
                    time_major: bool = False, head: int = 0, return_sequences: bool = False,
                    seed: int = 0, rep_scale: float = 1.0, int8_io: bool = False) -> bytes:
    """A Keras LSTM (and an optional Dense head) through tf.lite.TFLiteConverter with full int8
    quantization; the representative data is normal with standard deviation rep_scale."""
    import tensorflow as tf
    tf.keras.backend.clear_session()
    tf.keras.utils.set_random_seed(seed)
    shape = (steps, batch, n_in) if time_major else (batch, steps, n_in)
    x = tf.keras.Input(shape[1:], batch_size=shape[0])
    y = tf.keras.layers.LSTM(units, time_major=time_major, return_sequences=return_sequences)(x)
    if head:
        y = tf.keras.layers.Dense(head)(y)
    m = tf.keras.Model(x, y)
    f = tf.function(lambda v: m(v), input_signature=[tf.TensorSpec(shape, tf.float32)])
    c = configure_converter(tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], m))
    rng = np.random.default_rng(seed)
    c.optimizations = [tf.lite.Optimize.DEFAULT]
    c.representative_dataset = lambda: ([(rng.standard_normal(shape) * rep_scale)
                                         .astype(np.float32)] for _ in range(32))
    c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if int8_io:
        c.inference_input_type = tf.int8
        c.inference_output_type = tf.int8
    return c.convert()


def _lstm(model_bytes: bytes):
    m = parse(model_bytes)
    op = next(o for o in m.operators if o.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    return m, op


def _inputs(rng, shape, n=N, scale=1.0, dtype=np.float32):
    x = rng.standard_normal((n, *shape)) * scale
    x[n // 2] = 0.0
    if dtype == np.int8:
        return np.clip(np.round(x * 40), -128, 127).astype(np.int8)
    return x.astype(np.float32)


def _wd(tmp_path) -> Path:
    return Path(tempfile.mkdtemp(dir=tmp_path))


def _edit(model_bytes: bytes, fn) -> bytes:
    """model_bytes with fn(ModelT, the LSTM OperatorT) applied (the flatbuffers object API)."""
    import flatbuffers
    s = schema()
    m = s.ModelT.InitFromObj(s.Model.GetRootAsModel(model_bytes, 0))
    code = s.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
    op = next(o for o in m.subgraphs[0].operators
              if m.operatorCodes[o.opcodeIndex].builtinCode == code)
    op.inputs = [int(i) for i in op.inputs]
    fn(m, op)
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


@pytest.fixture(scope="module")
def policy_lstm8() -> bytes:
    """Policy-sized: 4 observations, 32 units, one time step, a Dense head of 2 actions."""
    return keras_lstm_int8(1, 4, 32, head=2, seed=6, rep_scale=1.5)


# -------------------------------------------------------------------- the converted op itself
def test_converted_int8_lstm_is_what_the_kernel_takes(policy_lstm8):
    """TF 2.15's full-integer LSTM: int8 input/output, int8 hidden state (the output's scale
    and zero point), int16 cell state at a power-of-two scale with zero point 0, int8 weights
    with one scale each, int32 biases; the intermediates the converter records are there but
    TFLM's kernel (and ours) use the fixed gate scale 2^-12 instead."""
    m, op = _lstm(policy_lstm8)
    t = m.tensors
    x, y, h, c = (t[op.inputs[0]], t[op.outputs[0]], t[op.inputs[18]], t[op.inputs[19]])
    assert (x.dtype, y.dtype, h.dtype, c.dtype) == ("int8", "int8", "int8", "int16")
    assert h.is_variable and c.is_variable
    assert (h.scale, h.zero_point) == (y.scale, y.zero_point)
    mant, _ = np.frexp(c.scale)
    assert mant == 0.5 and c.zero_point == 0
    assert all(t[op.inputs[k]].dtype == "int8" and len(t[op.inputs[k]].quantization.scale) == 1
               for k in range(1, 9))
    assert all(t[op.inputs[k]].dtype == "int32" for k in range(12, 16))


# ------------------------------------------------------------------------ int16 sigmoid/tanh
def _measure_module():
    spec = importlib.util.spec_from_file_location(
        "measure_sigmoid_table", ROOT / "scripts" / "measure_sigmoid_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sigmoid_table_is_tflms():
    """The committed table (quarl_edge/converters/sigmoid_table_u16.py) is what the interpreter measures
    now, entry by entry; and it is not round(65536 * sigmoid(i/24)) (44 entries are one more),
    which is why it is measured data and not a formula."""
    measured = _measure_module().measure_table()
    table = np.asarray(qmath.sigmoid_table_u16())
    assert np.array_equal(measured, table)
    formula = np.asarray(qmath.sigmoid_table_formula_u16())
    assert (table != formula).sum() == 44 and np.all(table - formula >= 0)


_ACT_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "kernels/lstm_int8.h"
static const uint16_t table[256] = { %s };
int main(int argc, char **argv)
{
    const int tanh_ = (argc > 1) ? atoi(argv[1]) : 0;
    const int32_t m = atoi(argv[2]), s = atoi(argv[3]);
    int16_t x;
    while (fread(&x, 2, 1, stdin) == 1) {
        int16_t y = tanh_ ? qe_lstm_tanh_s16(table, m, s, x) : qe_lstm_sigmoid_s16(table, m, s, x);
        fwrite(&y, 2, 1, stdout);
    }
    return 0;
}
"""


def test_int16_sigmoid_tanh_exhaustive(tmp_path):
    """qe_lstm_sigmoid_s16 / qe_lstm_tanh_s16 on all 65,536 int16 inputs equal the interpreter's
    int16 LOGISTIC / TANH: at input scale 2^-12 (the gates: multiplier 3, shift 0) and, for tanh
    of the cell state, at 2^-15 (multiplier 3, shift 3), 2^-11 (6, 0) and 2^-10 (12, 0)."""
    src = tmp_path / "act.c"
    src.write_text(_ACT_DRIVER % ", ".join(str(v) for v in qmath.sigmoid_table_u16()))
    exe = tmp_path / "act"
    subprocess.run([gcc(), *CFLAGS, str(src), str(CORE / "kernels" / "lstm_int8.c"),
                    str(CORE / "requant.c"), "-o", str(exe)], check=True)
    measure = _measure_module()
    x = np.arange(-32768, 32768, dtype=np.int16)
    for op, power, m, s in (("LOGISTIC", -12, 3, 0), ("TANH", -12, 3, 0), ("TANH", -15, 3, 3),
                            ("TANH", -11, 6, 0), ("TANH", -10, 12, 0)):
        ref = measure.run_int16(op, x, 2.0 ** power)
        out = subprocess.run([str(exe), str(int(op == "TANH")), str(m), str(s)],
                             input=x.tobytes(), capture_output=True, check=True).stdout
        got = np.frombuffer(out, np.int16).astype(np.int64)
        bad = np.nonzero(got != ref)[0]
        assert bad.size == 0, (op, power, int(x[bad[0]]), int(ref[bad[0]]), int(got[bad[0]]))


# ------------------------------------------------------------------------------ golden: LSTM
@FEW
@example(steps=3, n_in=1, units=1, seq=True, rep_scale=0.2, seed=1)   # the smallest LSTM
@given(steps=st.integers(1, 4), n_in=st.integers(1, 8), units=st.integers(1, 32),
       seq=st.booleans(), rep_scale=st.sampled_from([0.2, 1.0, 4.0]),
       seed=st.integers(0, 2**16))
def test_lstm_int8_keras(tmp_path, steps, n_in, units, seq, rep_scale, seed):
    """Keras LSTM (last output or the whole sequence) and a Dense head, batch 1, calibrated on
    data of standard deviation rep_scale (so scales and the cell state's power of two vary), over
    N invocations whose state carries over (inputs up to 2x the calibration range, so the int8
    input and the gates saturate now and then): every output identical with TFLM."""
    mb = keras_lstm_int8(steps, n_in, units, head=3, return_sequences=seq, seed=seed,
                         rep_scale=rep_scale)
    rng = np.random.default_rng(seed)
    compare_generated(mb, [_inputs(rng, (1, steps, n_in), scale=2.0 * rep_scale)], _wd(tmp_path),
                      f"lstm int8 T={steps} in={n_in} units={units} seq={seq} rep={rep_scale}")


def test_lstm_int8_time_major_batch2_int8_io(tmp_path):
    """time_major (input [time][batch][input]) with batch 2: rows of a batch stay apart; int8
    model input and output, so the LSTM is the graph's only op (no QUANTIZE/DEQUANTIZE)."""
    mb = keras_lstm_int8(3, 4, 8, batch=2, time_major=True, return_sequences=True, seed=3,
                         int8_io=True)
    m, op = _lstm(mb)
    assert m.tensors[m.inputs[0]].dtype == "int8" and m.operators == [op]
    rng = np.random.default_rng(3)
    compare_generated(mb, [_inputs(rng, (3, 2, 4), dtype=np.int8)], _wd(tmp_path),
                      "lstm int8 time major, int8 io")


def test_lstm_int8_cell_clip(tmp_path, policy_lstm8):
    """Cell clipping in cell-state steps: with cellClip patched from Keras' 10 (beyond the int16
    range: no clipping in effect) to 0.05, the clip decides the outputs, and we match TFLM."""
    def clip(m, op):
        op.builtinOptions.cellClip = 0.05
    clipped = _edit(policy_lstm8, clip)
    rng = np.random.default_rng(5)
    x = _inputs(rng, (1, 1, 4), scale=3.0)
    a = compare_generated(clipped, [x], _wd(tmp_path), "lstm int8 cell clip 0.05")["got"][0]
    b = compare_generated(policy_lstm8, [x], _wd(tmp_path), "lstm int8 cell clip 10")["got"][0]
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("power", [-11, -12, -20])
def test_lstm_int8_cell_scales(tmp_path, policy_lstm8, power):
    """The cell state's scale patched to 2^power (the converter picks 2^-13 .. 2^-16 for these
    models): tanh of the cell state then takes TFLM's other input scalings (multiplier 3 << k
    for power >= -12, a right shift for smaller ones) and the f*c and i*g products other
    multipliers; still identical with TFLM."""
    def scale(m, op):
        m.subgraphs[0].tensors[op.inputs[19]].quantization.scale = [2.0 ** power]
    rng = np.random.default_rng(-power)
    compare_generated(_edit(policy_lstm8, scale), [_inputs(rng, (1, 1, 4), scale=3.0)],
                      _wd(tmp_path), f"lstm int8 cell scale 2^{power}")


def test_lstm_int8_state_persists_and_resets(tmp_path, policy_lstm8):
    """The same input invoked repeatedly gives changing outputs (the state carries over, on both
    sides); resetting every 5 invocations (qe_model_reset_state: the int8 hidden state back to
    its zero point, the cell state to 0; Interpreter.reset) matches TFLM resetting at the same
    records, and every 5th output repeats the first."""
    mb = policy_lstm8
    m, op = _lstm(mb)
    assert m.tensors[op.inputs[18]].zero_point != 0      # the reset fills a non-zero byte
    x = np.repeat(np.random.default_rng(6).standard_normal((1, 1, 1, 4)).astype(np.float32) * 2,
                  20, 0)
    kept = compare_generated(mb, [x], _wd(tmp_path), "lstm int8 state kept")["got"][0]
    assert not np.array_equal(kept[0], kept[1]) and not np.array_equal(kept[1], kept[4])
    reset = compare_generated(mb, [x], _wd(tmp_path), "lstm int8 reset every 5",
                              reset_every=5)["got"][0]
    for k in range(0, 20, 5):
        assert np.array_equal(reset[k:k + 5], kept[:5])
    fresh = tflm_run_multi(mb, [[x[0]]])[0][0]
    assert np.array_equal(fresh.ravel(), kept[0].ravel())


def test_lstm_int8_generated_c(tmp_path, policy_lstm8):
    """Weights, biases and the table are QE_FLASH arrays; the state has its own arena bytes and
    the reset writes the hidden state's zero point; the multipliers in the params struct are the
    Python ones (QuantizeMultiplier of the double products)."""
    p = tmp_path / "m.tflite"
    p.write_bytes(policy_lstm8)
    text = cgen.generate(p, tmp_path / "gen").c_path.read_text()
    m, op = _lstm(policy_lstm8)
    h = m.tensors[op.inputs[18]]
    assert f"static const QE_FLASH uint16_t op{op.index}_sigmoid_table[256]" in text
    for k in range(1, 9):
        w = m.tensors[op.inputs[k]]
        assert f"static const QE_FLASH int8_t {c_ident(w.name, f'w{w.index}_')}[" in text
    assert f"= {h.zero_point & 0xFF}u;" in text
    mult, shift = qmath.quantize_multiplier(2.0 ** -30 / float(h.scale))
    assert f".hidden = {{ {mult}, {shift} }}" in text


# ------------------------------------------------------------------------------ refusals
def _refused(tmp_path, model_bytes: bytes, *needles: str) -> None:
    p = _wd(tmp_path) / "m.tflite"
    p.write_bytes(model_bytes)
    with pytest.raises(UnsupportedOpError) as e:
        cgen.generate(p, p.parent / "gen")
    msg = str(e.value)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in msg and "op " in msg
    for n in needles:
        assert n in msg, msg


def test_lstm_int8_refusals(tmp_path, policy_lstm8):
    """Per-channel weights, a cell state without a power-of-two scale or of another type, int8
    biases, and the LSTM variants: each refused by name."""
    s = schema()

    def per_channel(m, op):
        q = m.subgraphs[0].tensors[op.inputs[1]].quantization
        n = m.subgraphs[0].tensors[op.inputs[1]].shape[0]
        q.scale, q.zeroPoint, q.quantizedDimension = [float(q.scale[0])] * n, [0] * n, 0
    _refused(tmp_path, _edit(policy_lstm8, per_channel), "per channel")

    def cell_scale(m, op):
        m.subgraphs[0].tensors[op.inputs[19]].quantization.scale = [3e-5]
    _refused(tmp_path, _edit(policy_lstm8, cell_scale), "cell state", "power of two")

    def cell_int8(m, op):
        m.subgraphs[0].tensors[op.inputs[19]].type = s.TensorType.INT8
    _refused(tmp_path, _edit(policy_lstm8, cell_int8), "cell state", "expected int16")

    def cell_zp(m, op):
        m.subgraphs[0].tensors[op.inputs[19]].quantization.zeroPoint = [3]
    _refused(tmp_path, _edit(policy_lstm8, cell_zp), "cell state", "zero point 3")

    def peephole(m, op):
        op.inputs[9] = op.inputs[12]
    _refused(tmp_path, _edit(policy_lstm8, peephole), "peephole")

    def cifg(m, op):
        op.inputs[1] = -1
    _refused(tmp_path, _edit(policy_lstm8, cifg), "CIFG")

    def int16_act(m, op):
        for k in (0, 18):
            m.subgraphs[0].tensors[op.inputs[k]].type = s.TensorType.INT16
    _refused(tmp_path, _edit(policy_lstm8, int16_act), "int16 LSTM", "16x8")


# ---------------------------------------------------------------------------------- board
def test_lstm_int8_policy_validates_on_mps2_an386(policy_lstm8, tmp_path):
    """The int8 policy-sized LSTM through `validate` on QEMU mps2-an386 (Cortex-M4, the
    project's arm-none-eabi build): the board keeps the state between INFERs, validate's
    TF Lite Micro reference runs the rows in the same order, and every output is identical."""
    from quarl_edge.measure.validate import validate
    from quarl_edge.targets.boards import get_board
    path = tmp_path / "lstm_policy_int8.tflite"
    path.write_bytes(policy_lstm8)
    board = get_board("mps2-an386")
    res = validate(path, board, tmp_path / "mps2", random_n=30, seed=3)
    assert res["bit_exact"] is True, res
    assert res["n"] == 30 and res["memory"]["arena_bytes"] > 0
