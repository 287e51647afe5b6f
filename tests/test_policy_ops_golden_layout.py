"""Golden tests for the layout ops of issue 12 ("ops for policies people train"): PAD/PADV2,
TRANSPOSE, STRIDED_SLICE, from the real TFLite converter and hand-built, generated C against the
tflite-micro interpreter, bit-identical; their refusals; and an SB3-style policy with all of
issue 12's ops, bit-exact on the host and under QEMU. (How and why: test_policy_ops_golden.py.)
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers_models import compare_generated, op_model
from helpers_policy_ops import (CALIB, CHEAP, FEW, MODES, S, _float_inputs, _q, _wd, check_tf,
                                refused, tf_model)


# ------------------------------------------------------------------------ PAD, PADV2
@CHEAP
@given(seed=st.integers(0, 2 ** 16), shape=st.sampled_from([[1, 5], [2, 3, 4], [1, 4, 4, 3], [1, 2, 3, 2, 2]]),
       mode=MODES, calib=CALIB, value=st.sampled_from([0.0, 0.0, -1.5]))
def test_pad_from_converter(tmp_path, seed, shape, mode, calib, value):
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    pads = rng.integers(0, 3, (len(shape), 2)).tolist()
    r = check_tf(tmp_path, lambda x: tf.pad(x, pads, constant_values=value * calib) * 2.0, [shape],
                 mode, rng, calib, None, f"pad {pads} {value}")
    assert {"PAD", "PADV2"} & set(r["gm"].ops), r["gm"].ops


@FEW
@given(seed=st.integers(0, 2 ** 16), rank=st.integers(1, 5), v2=st.booleans())
def test_pad_hand_built(tmp_path, seed, rank, v2):
    """Random shapes and paddings (zero-size input dimensions too), every type: int8 pads
    with the output zero point (PAD) or the constant (PADV2)."""
    rng = np.random.default_rng(seed)
    shape = rng.integers(1, 4, rank).tolist()
    pads = rng.integers(0, 3, (rank, 2))
    so = (np.array(shape) + pads.sum(1)).tolist()
    pd = dict(shape=[rank, 2], dtype="int32", data=pads.astype(np.int32))
    for dt in ("float32", "int8", "int16", "int32"):
        q = _q(rng) if dt == "int8" else (0.01, 0) if dt == "int16" else None
        ins = [dict(shape=shape, dtype=dt, q=q), pd]
        if v2:
            c = rng.standard_normal(1) if dt == "float32" else rng.integers(-100, 100, 1)
            ins.append(dict(shape=[1], dtype=dt, q=q, data=c.astype(dt)))
        m = op_model("PADV2" if v2 else "PAD", ins, [dict(shape=so, dtype=dt, q=q)])
        x = (_float_inputs(rng, shape, 20) if dt == "float32"
             else rng.integers(-128, 128, (20, *shape)).astype(dt))
        compare_generated(m, [x], _wd(tmp_path), f"pad {dt} {shape} {pads.tolist()} v2={v2}")


def test_pad_refusals(tmp_path):
    pd = dict(shape=[2, 2], dtype="int32", data=np.array([[0, 0], [1, 1]], np.int32))
    m = op_model("PAD", [dict(shape=[1, 4], dtype="int8", q=(0.1, 0)), pd], [dict(shape=[1, 6], dtype="int8", q=(0.2, 0))])
    refused(tmp_path, m, r"op 0 PAD \(int8, int32 \(const\) -> int8\) is not supported: .*copies raw")
    m = op_model("PAD", [dict(shape=[1, 4], dtype="float32"), dict(shape=[2, 2], dtype="int32")],
                 [dict(shape=[1, 6], dtype="float32")])
    refused(tmp_path, m, r"PAD.*paddings .* must be a constant")


# -------------------------------------------------------------------------- TRANSPOSE
@CHEAP
@given(seed=st.integers(0, 2 ** 16), shape=st.sampled_from([[2, 3], [2, 3, 4], [2, 4, 3, 2], [2, 2, 3, 2, 2]]),
       mode=MODES, calib=CALIB)
def test_transpose_from_converter(tmp_path, seed, shape, mode, calib):
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(shape)).tolist()
    if perm == sorted(perm):
        perm = perm[::-1]
    check_tf(tmp_path, lambda x: tf.transpose(x, perm) * 2.0, [shape], mode, rng, calib, "TRANSPOSE",
             f"transpose {perm}")


@CHEAP
@given(seed=st.integers(0, 2 ** 16), rank=st.integers(1, 5))
def test_transpose_hand_built(tmp_path, seed, rank):
    rng = np.random.default_rng(seed)
    shape = rng.integers(1, 5, rank).tolist()
    perm = rng.permutation(rank)
    pd = dict(shape=[rank], dtype="int32", data=perm.astype(np.int32))
    for dt in ("float32", "int8", "int16"):
        q = _q(rng) if dt == "int8" else (0.01, 0) if dt == "int16" else None
        m = op_model("TRANSPOSE", [dict(shape=shape, dtype=dt, q=q), pd],
                     [dict(shape=[shape[p] for p in perm], dtype=dt, q=q)])
        x = (_float_inputs(rng, shape, 20) if dt == "float32"
             else rng.integers(-128, 128, (20, *shape)).astype(dt))
        compare_generated(m, [x], _wd(tmp_path), f"transpose {dt} {shape} {perm.tolist()}")


def test_transpose_refusals(tmp_path):
    pd = dict(shape=[6], dtype="int32", data=np.arange(6)[::-1].astype(np.int32))
    m = op_model("TRANSPOSE", [dict(shape=[1, 1, 2, 1, 1, 2], dtype="float32"), pd],
                 [dict(shape=[2, 1, 1, 2, 1, 1], dtype="float32")])
    refused(tmp_path, m, r"op 0 TRANSPOSE .* 6-D input; TFLM's TRANSPOSE handles 1 to 5")


# ----------------------------------------------------------------------- STRIDED_SLICE
@CHEAP
@given(seed=st.integers(0, 2 ** 16), mode=MODES, calib=CALIB,
       case=st.sampled_from(["range", "reverse", "shrink", "step"]))
def test_strided_slice_from_converter(tmp_path, seed, mode, calib, case):
    rng = np.random.default_rng(seed)
    fn, shape = {"range": (lambda x: x[:, 1:5] * 2.0, [1, 7]),
                 "reverse": (lambda x: x[:, ::-1, :] * 2.0, [2, 4, 3]),
                 "shrink": (lambda x: x[:, 1, -3:] * 2.0, [1, 3, 5]),
                 "step": (lambda x: x[:, 3:0:-2, ::2, 1:] * 2.0, [1, 5, 4, 3])}[case]
    check_tf(tmp_path, fn, [shape], mode, rng, calib, "STRIDED_SLICE", f"strided_slice {case}")


@FEW
@given(seed=st.integers(0, 2 ** 16), rank=st.integers(1, 4))
def test_strided_slice_hand_built(tmp_path, seed, rank):
    """Random begin/end (negative, out of range), strides of both signs, and all three masks."""
    from quarl_edge.converters.ops.strided_slice import _end, _start
    rng = np.random.default_rng(seed)
    shape = rng.integers(1, 6, rank).tolist()
    begin = rng.integers(-7, 7, rank)
    end = rng.integers(-7, 7, rank)
    strides = rng.choice([-3, -2, -1, 1, 1, 2, 3], rank)
    bm, em, sm = (int(rng.integers(0, 1 << rank)) for _ in range(3))
    counts = []
    for d in range(rank):
        s = _start(int(begin[d]), int(strides[d]), shape[d], bool(bm >> d & 1))
        e = _end(int(end[d]), s, int(strides[d]), shape[d], bool(em >> d & 1), bool(sm >> d & 1))
        counts.append(max(0, -(-(e - s) // int(strides[d]))) if strides[d] > 0
                      else max(0, -(-(s - e) // -int(strides[d]))))
    if 0 in counts:               # an empty output: give the axis its whole range instead
        bm, em, sm = bm | ((1 << rank) - 1), em | ((1 << rank) - 1), 0
        counts = [shape[d] if strides[d] in (1, -1) else -(-shape[d] // abs(int(strides[d])))
                  for d in range(rank)]
    so = [c for d, c in enumerate(counts) if not sm >> d & 1]
    opt = S.StridedSliceOptionsT()
    opt.beginMask, opt.endMask, opt.shrinkAxisMask = bm, em, sm
    cst = lambda v: dict(shape=[rank], dtype="int32", data=np.asarray(v, np.int32))  # noqa: E731
    for dt in ("float32", "int8", "int16", "int32"):
        q = _q(rng) if dt == "int8" else (0.01, 0) if dt == "int16" else None
        m = op_model("STRIDED_SLICE", [dict(shape=shape, dtype=dt, q=q), cst(begin), cst(end), cst(strides)],
                     [dict(shape=so, dtype=dt, q=q)], opt)
        x = (_float_inputs(rng, shape, 20) if dt == "float32"
             else rng.integers(-128, 128, (20, *shape)).astype(dt))
        compare_generated(m, [x], _wd(tmp_path),
                          f"strided_slice {dt} {shape} {begin} {end} {strides} {bm} {em} {sm}")


def test_strided_slice_refusals(tmp_path):
    cst = lambda v: dict(shape=[2], dtype="int32", data=np.asarray(v, np.int32))  # noqa: E731
    opt = S.StridedSliceOptionsT()
    opt.ellipsisMask = 1
    m = op_model("STRIDED_SLICE", [dict(shape=[2, 3], dtype="float32"), cst([0, 0]), cst([2, 3]), cst([1, 1])],
                 [dict(shape=[2, 3], dtype="float32")], opt)
    refused(tmp_path, m, r"op 0 STRIDED_SLICE .* ellipsis_mask 1: TFLM's kernel ignores it")
    m = op_model("STRIDED_SLICE", [dict(shape=[2, 3], dtype="float32"), cst([0, 0]), cst([2, 3]),
                                   dict(shape=[2], dtype="int32")], [dict(shape=[2, 3], dtype="float32")])
    refused(tmp_path, m, r"STRIDED_SLICE.*strides .* must be a constant")


# ------------------------------------------------------------- end to end, on boards
def _normalized_policy():
    """An SB3-style policy: VecNormalize's (obs - mean) / std clipped to +-5 (SUB, MUL,
    MAXIMUM, MINIMUM), a dense layer with leaky ReLU, one with hard-swish, and a head that
    pads, transposes and slices (PAD, TRANSPOSE, STRIDED_SLICE)."""
    import tensorflow as tf
    rng = np.random.default_rng(7)
    mean = tf.constant(rng.standard_normal(6).astype(np.float32))
    inv_std = tf.constant((1 / rng.uniform(0.5, 2, 6)).astype(np.float32))
    w1 = tf.constant(rng.standard_normal((6, 16)).astype(np.float32) * 0.5)
    w2 = tf.constant(rng.standard_normal((16, 8)).astype(np.float32) * 0.5)

    def policy(obs):
        x = tf.clip_by_value((obs - mean) * inv_std, -5.0, 5.0)
        h = tf.nn.leaky_relu(tf.matmul(x, w1), 0.1)
        h = h * tf.nn.relu6(h + 3.0) * (1.0 / 6.0)
        h = tf.matmul(h, w2)
        g = tf.transpose(tf.pad(tf.reshape(h, [1, 2, 4]), [[0, 0], [0, 1], [1, 0]]), [0, 2, 1])
        return g[:, 1:, ::-1] * 2.0
    return policy


@pytest.mark.parametrize("mode", ["int8", "float"])
def test_policy_with_new_ops_is_bit_exact_on_host_and_qemu(tmp_path, mode):
    import shutil as sh
    from quarl_edge.measure.validate import validate
    from quarl_edge.targets.boards import get_board
    m = tf_model(_normalized_policy(), [[1, 6]], mode, 2.0)
    path = tmp_path / f"policy_{mode}.tflite"
    path.write_bytes(m)
    from quarl_edge.converters.tflite_model import parse
    ops = {o.opcode for o in parse(m).operators}
    assert {"SUB", "MAXIMUM", "MINIMUM", "LEAKY_RELU", "HARD_SWISH", "PAD", "TRANSPOSE",
            "STRIDED_SLICE"} <= ops, ops
    boards = ["host"] + (["mps2-an386"] if sh.which("qemu-system-arm") and sh.which("arm-none-eabi-gcc") else [])
    for b in boards:
        res = validate(path, get_board(b), tmp_path / b, random_n=30, seed=3)
        assert res["bit_exact"] is True, (b, mode, res)
    assert len(boards) == 2 or pytest.skip("no QEMU/arm-none-eabi-gcc: validated on host only")
