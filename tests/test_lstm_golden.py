"""Golden tests for UNIDIRECTIONAL_SEQUENCE_LSTM (issue 12, recurrent policies): generated C (gcc,
tests/c/run_model.c) against the tflite-micro interpreter, float outputs bit-identical
(x86-64, -ffp-contract=off).

The models are Keras `LSTM` layers converted by the real TFLite converter from a concrete
function with a fixed batch and time (which fuses the layer into one
UNIDIRECTIONAL_SEQUENCE_LSTM with variable hidden/cell state tensors and cell clip 10). Both
sides run every record through one model instance, so the LSTM state carries over from
invocation to invocation, as on a board; the reset tests call qe_model_reset_state() and the
interpreter's reset() at the same records. The policy-sized model is also validated on the
host board and on QEMU mps2-an386.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers_models import compare_generated, schema, tflm_run_multi
from quarl_edge.converters import cgen
from quarl_edge.core.tfcompat import configure_converter
from quarl_edge.core.errors import UnsupportedOpError

_PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
_HC = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
FEW = settings(max_examples=3, deadline=None, phases=_PHASES, suppress_health_check=_HC)
N = 40                    # invocations per model: the state runs through all of them


def keras_lstm(steps: int, n_in: int, units: int, *, batch: int = 1, time_major: bool = False,
               head: int = 0, return_sequences: bool = False, seed: int = 0,
               weight_scale: float = 1.0, mode: str = "float") -> bytes:
    """A Keras LSTM (plus an optional Dense head) through tf.lite.TFLiteConverter."""
    import tensorflow as tf
    tf.keras.utils.set_random_seed(seed)
    shape = (steps, batch, n_in) if time_major else (batch, steps, n_in)
    x = tf.keras.Input(shape[1:], batch_size=shape[0])
    y = tf.keras.layers.LSTM(units, time_major=time_major, return_sequences=return_sequences)(x)
    if head:
        y = tf.keras.layers.Dense(head)(y)
    m = tf.keras.Model(x, y)
    if weight_scale != 1.0:
        m.set_weights([w * weight_scale for w in m.get_weights()])
    f = tf.function(lambda v: m(v), input_signature=[tf.TensorSpec(shape, tf.float32)])
    c = configure_converter(tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], m))
    if mode == "int8":
        rng = np.random.default_rng(seed)
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        c.representative_dataset = lambda: ([rng.standard_normal(shape).astype(np.float32)]
                                            for _ in range(16))
        c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return c.convert()


def _inputs(rng, shape, n=N, scale=1.0):
    x = rng.standard_normal((n, *shape)) * scale
    x[n // 2] = 0.0
    return x.astype(np.float32)


def _wd(tmp_path) -> Path:
    return Path(tempfile.mkdtemp(dir=tmp_path))


def _lstm_ops(model_bytes: bytes) -> list[str]:
    from quarl_edge.converters.tflite_model import parse
    return [op.opcode for op in parse(model_bytes).operators]


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


# ------------------------------------------------------------------------------- float32
@FEW
@given(steps=st.integers(1, 4), n_in=st.integers(1, 6), units=st.integers(1, 16),
       seq=st.booleans(), seed=st.integers(0, 2**16))
def test_lstm_float_keras(tmp_path, steps, n_in, units, seq, seed):
    """Keras LSTM (last output or the whole sequence) and a Dense head, batch 1, over N
    invocations whose state carries over: every float output bit-identical with TFLM."""
    mb = keras_lstm(steps, n_in, units, head=3, return_sequences=seq, seed=seed)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in _lstm_ops(mb)
    rng = np.random.default_rng(seed)
    compare_generated(mb, [_inputs(rng, (1, steps, n_in), scale=2.0)], _wd(tmp_path),
                      f"lstm T={steps} in={n_in} units={units} seq={seq}")


def test_lstm_float_time_major(tmp_path):
    """time_major (input [time][batch][input]) with batch 2: rows of a batch stay apart."""
    mb = keras_lstm(3, 4, 8, batch=2, time_major=True, return_sequences=True, seed=3)
    rng = np.random.default_rng(3)
    compare_generated(mb, [_inputs(rng, (3, 2, 4))], _wd(tmp_path), "lstm time major")


def test_lstm_float_batch_major_batch2(tmp_path):
    mb = keras_lstm(2, 3, 5, batch=2, return_sequences=True, seed=4)
    rng = np.random.default_rng(4)
    compare_generated(mb, [_inputs(rng, (2, 2, 3))], _wd(tmp_path), "lstm batch 2")


@pytest.fixture(scope="module")
def policy_lstm() -> bytes:
    """Policy-sized: 4 observations, 32 units, one time step, a Dense head of 2 actions."""
    return keras_lstm(1, 4, 32, head=2, seed=6)


def test_lstm_cell_clip(tmp_path, policy_lstm):
    """Cell clipping: with cellClip 0.25 (patched into the converted op, whose Keras default is
    10) the clip decides the outputs (they differ from the unclipped model's), and we match TFLM."""
    def clip(m, op):
        op.builtinOptions.cellClip = 0.25
    clipped = _edit(policy_lstm, clip)
    rng = np.random.default_rng(5)
    x = _inputs(rng, (1, 1, 4), scale=3.0)
    a = compare_generated(clipped, [x], _wd(tmp_path), "lstm cell clip 0.25")["got"][0]
    b = compare_generated(policy_lstm, [x], _wd(tmp_path), "lstm cell clip 10")["got"][0]
    assert not np.array_equal(a, b)


# ---------------------------------------------------------------------------------- state
def test_lstm_state_persists_and_resets(tmp_path, policy_lstm):
    """The same input invoked repeatedly gives changing outputs (the state carries over, on
    both sides); resetting every 5 invocations (qe_model_reset_state / Interpreter.reset)
    gives the same outputs as TFLM resetting at the same records, and every 5th output
    repeats the first."""
    mb = policy_lstm
    x = np.repeat(np.random.default_rng(6).standard_normal((1, 1, 1, 4)).astype(np.float32), 20, 0)
    kept = compare_generated(mb, [x], _wd(tmp_path), "lstm state kept")["got"][0]
    assert not np.array_equal(kept[0], kept[1]) and not np.array_equal(kept[1], kept[4])
    reset = compare_generated(mb, [x], _wd(tmp_path), "lstm reset every 5",
                              reset_every=5)["got"][0]
    for k in range(0, 20, 5):
        assert np.array_equal(reset[k:k + 5], kept[:5])
    # a fresh interpreter per record (what a stateless reference does) is not what we run
    fresh = np.stack([tflm_run_multi(mb, [[x[i]]])[0][0] for i in range(3)])
    assert np.array_equal(fresh[1].ravel(), kept[0].ravel())
    assert not np.array_equal(fresh[1].ravel(), kept[1].ravel())


def _arena_listing(model_c: str) -> list[tuple[int, int, str]]:
    rows = re.findall(r"^ \*\s+(\d+)\s+(\d+) B  (.*)$", model_c, re.M)
    return [(int(o), int(n), what) for o, n, what in rows]


def test_lstm_state_has_its_own_memory(tmp_path, policy_lstm):
    """The planner keeps both variable tensors alive for the whole run: no tensor or scratch
    buffer of the model shares their bytes, and reset_state zeros exactly them."""
    p = tmp_path / "m.tflite"
    p.write_bytes(policy_lstm)
    gm = cgen.generate(p, tmp_path / "gen")
    text = gm.c_path.read_text()
    rows = _arena_listing(text)
    state = [r for r in rows if "variable" in r[2]]
    assert len(state) == 2 and all(n == 32 * 4 for _, n, _ in state)
    for o, n, what in state:
        for o2, n2, what2 in rows:
            if what2 != what:
                assert o + n <= o2 or o2 + n2 <= o, (what, what2)
        assert f"qe_arena[{o}u + i] = 0u" in text
    assert "qe_model_reset_state();" in text.split("void qe_model_invoke(void)")[1]


# ------------------------------------------------------------------------------ refusals
def _refused(tmp_path, model_bytes: bytes, *needles: str) -> None:
    p = _wd(tmp_path) / "m.tflite"
    p.write_bytes(model_bytes)
    with pytest.raises(UnsupportedOpError) as e:
        cgen.generate(p, p.parent / "gen")
    msg = str(e.value)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in msg
    for n in needles:
        assert n in msg, msg


@pytest.mark.parametrize("slot,what", [(9, "peephole"), (11, "peephole"), (16, "projection weights"),
                                       (17, "projection bias"), (20, "layer norm"),
                                       (23, "layer norm")])
def test_lstm_refuses_variants(tmp_path, policy_lstm, slot, what):
    def add(m, op):
        op.inputs[slot] = op.inputs[12]     # some [units] float tensor in the optional slot
    _refused(tmp_path, _edit(policy_lstm, add), what)


def test_lstm_refuses_cifg_and_plain_state(tmp_path, policy_lstm):
    def cifg(m, op):
        op.inputs[1] = -1
    _refused(tmp_path, _edit(policy_lstm, cifg), "CIFG")

    def plain(m, op):
        m.subgraphs[0].tensors[op.inputs[19]].isVariable = False
    _refused(tmp_path, _edit(policy_lstm, plain), "cell state", "not a variable tensor")

    def sign_bit(m, op):
        op.builtinOptions.fusedActivationFunction = schema().ActivationFunctionType.RELU
    _refused(tmp_path, _edit(policy_lstm, sign_bit), "cell gate activation RELU")


def test_lstm_refuses_hybrid(tmp_path, policy_lstm):
    """Float activations with int8 weights (a dynamic-range LSTM) are refused by name (the int8
    LSTM with int16 cell state runs: tests/test_lstm_int8_golden.py)."""
    s = schema()

    def hybrid(m, op):
        w = m.subgraphs[0].tensors[op.inputs[1]]
        w.type = s.TensorType.INT8
        m.buffers[w.buffer].data = np.ones(int(np.prod(w.shape)), np.uint8)
    _refused(tmp_path, _edit(policy_lstm, hybrid), "hybrid LSTMs")


# ---------------------------------------------------------------------------------- boards
@pytest.mark.parametrize("board_id", ["host", "mps2-an386"])
def test_lstm_policy_validates_on_board(board_id, policy_lstm, tmp_path):
    """The policy-sized LSTM through `validate` on the host board and on QEMU mps2-an386.

    validate sends one input per INFER; the board keeps the LSTM state between them, and
    validate's reference (one TF Lite Micro interpreter, its rows run in the same order) keeps
    it too, so row k on both sides sees the state left by rows 0..k-1. The board starts from
    zero state (its first invoke runs qe_model_reset_state()), as a new interpreter does."""
    from quarl_edge.measure.validate import validate
    from quarl_edge.targets.boards import get_board
    path = tmp_path / "lstm_policy_float.tflite"
    path.write_bytes(policy_lstm)
    board = get_board(board_id)
    res = validate(path, board, tmp_path / board_id, random_n=30, seed=3)
    if board.kind == "host":
        assert res["bit_exact"] is True, res
    else:
        # sigmoid/tanh call newlib's expf/tanhf, TFLM's reference ran on glibc: an ulp apart
        # per call, carried along in the recurrent state (a state bug would be far larger);
        # absolute: the relative difference of an action value near 0 says little
        assert res["max_abs_diff"] <= 1e-6, res
    assert res["n"] == 30 and res["memory"]["arena_bytes"] > 0
