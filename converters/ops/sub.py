"""SUB: firmware/core/kernels/sub.c over broadcast.c, TFLM's sub.cc (reference_ops::Sub,
BroadcastQuantSubSlow for int8; SubWithActivation, BroadcastSubSlow for float32).

- int8 with TFLM's scheme, ADD's with a difference: both inputs rescaled to twice the larger
  input scale after a left shift of 20, subtracted, rescaled to the output; the multipliers are
  ADD's (converters/qmath.py: add_params_s8, scale ratios in double). The tflite-micro sources
  we read divide SUB's scales in float32, but the interpreter we test against divides in
  double: scale triples where the two differ are pinned in tests/test_policy_ops_golden.py;
- float32;
- numpy broadcasting up to 6-D (every output dimension <= 65535); either input may be a
  constant, not both; fused NONE/RELU/RELU6/RELU_N1_TO_1; the output may be written over the
  first input when it is not a constant (Kernel.inplace).
- not int16 (TFLM's int16 SUB has two schemes, power-of-two scales or general; no converter
  path of ours produces it) nor int32/int64.
"""
from __future__ import annotations

from .. import qmath
from ..tflite_model import Operator, TFLiteModel
from .binary import float_binary
from .common import (Kernel, broadcast_c, elementwise_operands, fused_activation, operand,
                     per_tensor, unsupported)

SUPPORTED = ("SUB int8 and float32 (broadcasting)",)
KERNEL_HEADERS = ()             # every model.c's headers; SUB's own is OP_HEADERS
OP_HEADERS = ("sub.h",)         # included only by models with a SUB (Kernel.headers)


def lower_sub(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """SUB, int8 (TFLM's rescaling) and float32, with broadcasting."""
    a, b, out = elementwise_operands(op, model)
    act = fused_activation(op, model)
    if a.dtype not in ("float32", "int8"):
        raise unsupported(op, model, f"{a.dtype} SUB; supported: int8 and float32")
    bc = broadcast_c(op, model, a, b, out)
    what = f"{a.describe()} - {b.describe()} -> {out.describe()}, {act}"
    consts: list[str] = []
    inplace = not a.is_constant
    if a.dtype == "float32":
        return float_binary(op, a, b, out, act, pname, bc, "sub", what, OP_HEADERS)
    for t, w in ((a, "input 1"), (b, "input 2"), (out, "output")):
        per_tensor(t, op, model, w)
    try:
        (m1, s1), (m2, s2), (mo, so) = qmath.add_params_s8(a.scale, b.scale, out.scale, op="SUB")
    except ValueError as exc:
        raise unsupported(op, model, str(exc)) from None
    lo, hi = qmath.activation_range_quantized(act, out.scale, out.zero_point)
    pa, pb = (operand(t, "int8_t", lambda v: str(int(v)), consts) for t in (a, b))
    params = (f"static const qe_sub_s8_params_t {pname} = {{\n{bc}"
              f"    .input1_offset = {-a.zero_point},\n    .input2_offset = {-b.zero_point},\n"
              f"    .output_offset = {out.zero_point},\n    .left_shift = 20,\n"
              f"    .input1_multiplier = {m1},\n    .input1_shift = {s1},\n"
              f"    .input2_multiplier = {m2},\n    .input2_shift = {s2},\n"
              f"    .output_multiplier = {mo},\n    .output_shift = {so},\n"
              f"    .activation_min = {lo},\n    .activation_max = {hi},\n}};\n")
    call = f"qe_sub_s8(&{pname}, {pa}, {pb}, (int8_t *)@T{out.index}@);"
    cb = sum(t.size for t in (a, b) if t.is_constant)
    return Kernel(op, call, params, consts, cb, f"SUB int8: {what}", inplace=inplace,
                  headers=OP_HEADERS)
