"""SUB: firmware/core/kernels/sub.c over broadcast.c, TFLM's sub.cc (reference_ops::Sub,
BroadcastQuantSubSlow for int8; SubWithActivation, BroadcastSubSlow for float32).

- int8 with TFLM's scheme, ADD's with a difference: both inputs rescaled to twice the larger
  input scale after a left shift of 20, subtracted, rescaled to the output; the multipliers are
  ADD's (ops/binary.py: add_params_s8, scale ratios in double). The tflite-micro sources
  we read divide SUB's scales in float32, but the interpreter we test against divides in
  double: scale triples where the two differ are pinned in tests/test_policy_ops_golden.py;
- float32;
- numpy broadcasting up to 6-D (every output dimension <= 65535); either input may be a
  constant, not both; fused NONE/RELU/RELU6/RELU_N1_TO_1; the output may be written over the
  first input when it is not a constant (Kernel.inplace).
- int16 (zero points 0): the same scheme with a left shift of 15 (TFLM's sub_common.cc;
  sub.cc's int16 Eval calls reference_ops::Sub / BroadcastQuantSubSlow, the general scheme:
  TFLite's power-of-two-scale BroadcastSub16POTSlow is never used by TFLM);
- not int32/int64.
"""
from __future__ import annotations

from .. import qmath
from ..tflite_model import Operator, TFLiteModel
from .binary import add_params_s8, float_binary
from .common import (Kernel, broadcast_c, elementwise_operands, fused_activation,
                     int16_zero_points, operand, per_tensor, unsupported)

SUPPORTED = ("SUB int8, int16 (zero points 0) and float32 (broadcasting)",)
KERNEL_HEADERS = ()             # every model.c's headers; SUB's own is OP_HEADERS
OP_HEADERS = ("sub.h",)         # included only by models with a SUB (Kernel.headers)


def lower_sub(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """SUB, int8 and int16 (TFLM's rescaling) and float32, with broadcasting."""
    a, b, out = elementwise_operands(op, model)
    act = fused_activation(op, model)
    if a.dtype not in ("float32", "int8", "int16"):
        raise unsupported(op, model, f"{a.dtype} SUB; supported: int8, int16 and float32")
    bc = broadcast_c(op, model, a, b, out)
    what = f"{a.describe()} - {b.describe()} -> {out.describe()}, {act}"
    consts: list[str] = []
    inplace = not a.is_constant
    if a.dtype == "float32":
        return float_binary(op, a, b, out, act, pname, bc, "sub", what, OP_HEADERS)
    for t, w in ((a, "input 1"), (b, "input 2"), (out, "output")):
        per_tensor(t, op, model, w)
    s16 = a.dtype == "int16"
    if s16:
        int16_zero_points(op, model, (a, b, out))
    ctype, sfx, left_shift = ("int16_t", "s16", 15) if s16 else ("int8_t", "s8", 20)
    try:
        (m1, s1), (m2, s2), (mo, so) = add_params_s8(a.scale, b.scale, out.scale,
                                                           left_shift, op="SUB")
    except ValueError as exc:
        raise unsupported(op, model, str(exc)) from None
    lo, hi = qmath.activation_range_quantized(act, out.scale, out.zero_point,
                                              *((-32768, 32767) if s16 else (-128, 127)))
    pa, pb = (operand(t, ctype, lambda v: str(int(v)), consts) for t in (a, b))
    params = (f"static const qe_sub_{sfx}_params_t {pname} = {{\n{bc}"
              f"    .input1_offset = {-a.zero_point},\n    .input2_offset = {-b.zero_point},\n"
              f"    .output_offset = {out.zero_point},\n    .left_shift = {left_shift},\n"
              f"    .input1_multiplier = {m1},\n    .input1_shift = {s1},\n"
              f"    .input2_multiplier = {m2},\n    .input2_shift = {s2},\n"
              f"    .output_multiplier = {mo},\n    .output_shift = {so},\n"
              f"    .activation_min = {lo},\n    .activation_max = {hi},\n}};\n")
    call = f"qe_sub_{sfx}(&{pname}, {pa}, {pb}, ({ctype} *)@T{out.index}@);"
    cb = sum(t.size * (2 if s16 else 1) for t in (a, b) if t.is_constant)
    return Kernel(op, call, params, consts, cb, f"SUB {a.dtype}: {what}", inplace=inplace,
                  headers=OP_HEADERS)
