#!/usr/bin/env python3
"""Measure TF Lite Micro's 256-entry uint16 sigmoid table through the tflite-micro interpreter.

TFLM's int16 LOGISTIC and TANH (reference_integer_ops::Logistic / ::Tanh, which its integer LSTM
calls for every gate and for tanh of the cell state) interpolate in one table T[0..255] of uint16
values. This script recovers T from the interpreter's behaviour alone, without its source text,
compares it with round(65536 * sigmoid(i / 24)) (quarl_edge/converters/qmath.py:sigmoid_table_formula_u16)
and, with --write, writes it to quarl_edge/converters/sigmoid_table_u16.py, which the generator emits into
the model.c of every int8 LSTM (quarl_edge/converters/qmath.py:sigmoid_table_u16).

Result (tflite-micro 0.dev20261023182759): all 256 entries are determined uniquely; 212 equal
the formula, 44 are one higher (i = 4, 8, 12, 14-17, 19-22, 25, 27-31, 33-35, 37, 39-41, 43-46,
49, 50, 54, 62-64, 66, 82, 86, 93, 100, 103, 112, 116, 135, 255; T[255] = 65535). Neither
65535 * sigmoid(i/24) nor round(65536 * sigmoid((i + 0.01)/24)) reproduces them (tried), so the
table is kept as measured data, not regenerated from a formula.

How. An int16 TANH with input scale 2^-12 (zero point 0, output scale 2^-15) is TFLM's
power-of-two case: the kernel sees v = 3x for each int16 input x, v = 256 uh + ut (uh the table
index, ut the 8-bit fraction; every bucket 0..254 gets all 256 fractions, uh >= 255 saturates)
and returns, in int32 arithmetic with arithmetic shifts,
    r = (T[uh] << 8) + ut * (T[uh+1] - T[uh])
    x >= 0: (r - 2^23 + 2^7) >> 8          x < 0: (-r + 2^23 + 2^7 - 1) >> 8.
At ut = 0 that is T[uh] - 32768 exactly, so TANH resolves every bit of T (LOGISTIC alone cannot:
it drops one bit, and T[0] = 32767 and 32768 give identical LOGISTIC outputs everywhere). All
65,536 inputs go through one invoke; for each bucket the pairs (T[uh], T[uh+1]) that reproduce
all of its outputs are kept, and neighbouring buckets' views of each entry intersected: the
result must be unique for all 256 entries (else the script fails). Then, as a second opinion,
the recovered table must reproduce every output of int16 LOGISTIC on all 65,536 inputs at input
scales 2^-12 (the LSTM gates' case, v = 3x) and 2^-11 (v = 6x, prepare's multiplier 24576 with a
shift of 12), with its own formula
    r = (T[uh] << 9) + ut * (T[uh+1] - T[uh])   (uh = v >> 9, ut = v & 511, uint32)
    x >= 0: (r + 512) >> 10                     x < 0: ((1 << 25) - r + 511) >> 10.

Run:  PYTHONPATH=. .venv/bin/python scripts/measure_sigmoid_table.py [--write]
It prints the entries that differ from the formula; --write (re)writes the data module.
tests/test_lstm_int8_golden.py runs measure_table() too, so a tflite-micro upgrade that changed
the table would fail there.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _int16_model(op_name: str, n: int, input_scale: float) -> bytes:
    """A one-op model: int16 [n] -> op_name (LOGISTIC, TANH) -> int16 [n], output scale 2^-15,
    zero points 0."""
    import flatbuffers
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s

    def quant(scale):
        q = s.QuantizationParametersT()
        q.scale, q.zeroPoint = [float(scale)], [0]
        return q

    def tensor(name, q):
        t = s.TensorT()
        t.name, t.shape, t.type, t.buffer, t.quantization = (
            name, np.array([n], np.int32), s.TensorType.INT16, 0, q)
        return t

    m = s.ModelT()
    m.version, m.description = 3, "sigmoid table probe"
    oc = s.OperatorCodeT()
    oc.builtinCode = oc.deprecatedBuiltinCode = getattr(s.BuiltinOperator, op_name)
    oc.version = 1
    m.operatorCodes = [oc]
    m.buffers = [s.BufferT()]
    sg = s.SubGraphT()
    sg.tensors = [tensor("x", quant(input_scale)), tensor("y", quant(2.0 ** -15))]
    sg.inputs, sg.outputs, sg.name = [0], [1], "main"
    op = s.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [0], [1]
    sg.operators = [op]
    m.subgraphs = [sg]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def run_int16(op_name: str, x: np.ndarray, input_scale: float) -> np.ndarray:
    """The tflite-micro interpreter's int16 op_name on every element of x."""
    from tflite_micro.python.tflite_micro import runtime
    x = np.asarray(x, np.int16)
    it = runtime.Interpreter.from_bytes(_int16_model(op_name, x.size, input_scale),
                                        arena_size=1 << 20)
    it.set_input(x, 0)
    it.invoke()
    return np.array(it.get_output(0), np.int64).ravel()


def _wrap32(v: np.ndarray) -> np.ndarray:
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def tanh_outputs(ua, ub, ut, negative) -> np.ndarray:
    """TFLM's int16 tanh output from table ends ua, ub and 8-bit fraction ut."""
    r = _wrap32((ua << 8) + ut * (ub - ua))
    return np.where(negative, (-r + (1 << 23) + (1 << 7) - 1) >> 8, (r - (1 << 23) + (1 << 7)) >> 8)


def logistic_outputs(table: np.ndarray, x: np.ndarray, factor: int) -> np.ndarray:
    """TFLM's int16 logistic of int16 x when the kernel sees v = factor * x."""
    v = factor * np.asarray(x, np.int64)
    a = np.abs(v)
    uh, ut = a >> 9, a & 0x1FF
    i = np.minimum(uh, 254)
    ua, ub = table[i], table[i + 1]
    r = np.where(uh >= 255, 0x7FFF << 10, ((ua << 9) + ut * ((ub - ua) & 0xFFFFFFFF)) & 0xFFFFFFFF)
    return np.where(v >= 0, (r + 512) >> 10, ((1 << 25) - r + 511) >> 10)


def measure_table() -> np.ndarray:
    """T[0..255] recovered from the interpreter (see the module docstring); raises if an entry
    is not determined uniquely or the table does not reproduce int16 LOGISTIC."""
    x = np.arange(-32768, 32768, dtype=np.int64)
    y = run_int16("TANH", x, 2.0 ** -12)
    v = 3 * x
    negative = v < 0
    uh, ut = np.abs(v) >> 8, np.abs(v) & 0xFF
    views: list[list[set[int]]] = [[] for _ in range(256)]
    for i in range(255):
        sel = uh == i
        t, neg, out = ut[sel], negative[sel], y[sel]
        # out = T[i] - 32768 + floor((ut * (T[i+1] - T[i]) + 128) / 256) for x >= 0: the
        # smallest fraction bounds T[i], the largest then bounds the step T[i+1] - T[i]
        pos = ~neg
        k_min, k_max = np.argmin(t[pos]), np.argmax(t[pos])
        a0 = int(out[pos][k_min]) + 32768
        ut_max, out_max = int(t[pos][k_max]), int(out[pos][k_max])
        ok = set()
        for a in range(max(a0 - 24, 0), min(a0 + 1, 65536)):
            k = out_max - (a - 32768)
            d_lo = (k * 256 - 128) // ut_max - 2
            d_hi = -(-((k + 1) * 256 - 128) // ut_max) + 2
            for b in range(max(a + d_lo, 0), min(a + d_hi + 1, 65536)):
                if np.array_equal(tanh_outputs(np.int64(a), np.int64(b), t, neg), out):
                    ok.add((a, b))
        if not ok:
            raise AssertionError(f"bucket {i}: no table pair reproduces the interpreter's TANH")
        views[i].append({a for a, _ in ok})
        views[i + 1].append({b for _, b in ok})
    table = np.zeros(256, np.int64)
    for i, vs in enumerate(views):
        common = set.intersection(*vs)
        if len(common) != 1:
            raise AssertionError(f"table entry {i} is not determined: candidates {sorted(common)}")
        table[i] = common.pop()
    for scale, factor in ((2.0 ** -12, 3), (2.0 ** -11, 6)):
        got = run_int16("LOGISTIC", x, scale)
        if not np.array_equal(logistic_outputs(table, x, factor), got):
            raise AssertionError(f"the measured table does not reproduce int16 LOGISTIC at scale "
                                 f"{scale:g}")
    return table


_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "quarl_edge", "converters",
                     "sigmoid_table_u16.py")


def data_module(table) -> str:
    """The text of quarl_edge/converters/sigmoid_table_u16.py for a measured table."""
    from tflite_micro.python.tflite_micro import _version
    rows = [", ".join(f"{int(v)}" for v in table[k:k + 12]) for k in range(0, 256, 12)]
    body = "".join(f"    {r},\n" for r in rows)
    return ('"""GENERATED by scripts/measure_sigmoid_table.py --write: do not edit.\n\n'
            "TF Lite Micro's uint16 sigmoid table (int16 LOGISTIC / TANH, the integer LSTM), "
            "measured\nthrough the tflite-micro interpreter (int16 TANH at input scale 2^-12, "
            "checked against\nint16 LOGISTIC at 2^-12 and 2^-11; see that script), "
            f"tflite-micro {_version.__version__}.\n"
            '"""\n\nTABLE = (\n' + body + ")\n")


def main() -> int:
    measured = measure_table()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from quarl_edge.converters.qmath import sigmoid_table_formula_u16
    formula = np.asarray(sigmoid_table_formula_u16(), np.int64)
    diff = np.nonzero(measured != formula)[0]
    print(f"measured all 256 entries uniquely, T[0] = {measured[0]}, T[255] = {measured[255]}")
    for i in diff:
        exact = 65536.0 / (1.0 + math.exp(-i / 24.0))
        print(f"  T[{i}] = {measured[i]}, round(65536 * sigmoid(i/24)) = {formula[i]} "
              f"({exact:.4f})")
    print(f"{256 - diff.size} entries equal the formula, {diff.size} differ")
    if "--write" in sys.argv[1:]:
        with open(_DATA, "w") as f:
            f.write(data_module(measured))
        print(f"wrote {os.path.normpath(_DATA)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
