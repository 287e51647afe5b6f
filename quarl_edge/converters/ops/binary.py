"""ADD and MUL: firmware/core/kernels/add.c and mul.c over broadcast.c, TFLM's add.cc and mul.cc
(reference_integer_ops::Add / Mul and their broadcasting variants, reference_ops for float32).

One lowering for both: they share the operands, the broadcasting and the float32 path, and
differ only in the int8 parameters.

- int8 with TFLM's schemes: ADD rescales both inputs to twice the larger input scale after a
  left shift of 20, then to the output (add_params_s8 below); MUL rescales the
  product by s1 * s2 / s_out;
- int16 (the int16x8 scheme's activations, zero points 0): the same schemes on int16 values,
  ADD's left shift 15 (TFLM's add_common.cc; its int16 Eval takes the general path,
  pot_scale = false), MUL's product through the same int32 multiplier (mul_common.cc, which
  requires the zero points to be 0);
- float32;
- numpy broadcasting up to 6-D (every output dimension <= 65535); either input may be a
  constant, not both; fused NONE/RELU/RELU6/RELU_N1_TO_1; the output may be written over the
  first input when it is not a constant (Kernel.inplace).
"""
from __future__ import annotations

import numpy as np

from .. import qmath
from ..emit import c_float, c_float_limit
from ..tflite_model import Operator, TFLiteModel
from .common import (Kernel, broadcast_c, elementwise_operands, fused_activation,
                     int16_zero_points, operand, per_tensor, unsupported)

SUPPORTED = ("ADD/MUL int8, int16 (zero points 0) and float32 (broadcasting)",)
KERNEL_HEADERS = ("add.h", "mul.h")


def float_binary(op: Operator, a, b, out, act: str, pname: str, bc: str, fn: str, shapes: str,
                 headers: tuple = ()) -> Kernel:
    """The float32 kernel of a broadcasting binary op (ADD, MUL, SUB): qe_<fn>_f32 with the
    fused activation's range; `bc` the broadcast initializer (broadcast_c)."""
    consts: list[str] = []
    lo, hi = qmath.activation_range_float(act)
    pa, pb = (operand(t, "float", c_float, consts) for t in (a, b))
    params = (f"static const qe_binary_f32_params_t {pname} = {{\n{bc}"
              f"    .activation_min = {c_float_limit(lo)},\n"
              f"    .activation_max = {c_float_limit(hi)},\n}};\n")
    call = f"qe_{fn}_f32(&{pname}, {pa}, {pb}, (float *)@T{out.index}@);"
    cb = sum(4 * t.size for t in (a, b) if t.is_constant)
    return Kernel(op, call, params, consts, cb, f"{op.opcode} float32: {shapes}",
                  inplace=not a.is_constant, headers=headers)


def lower_binary(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """ADD and MUL, int8 and int16 (TFLM's rescaling) and float32, with broadcasting."""
    a, b, out = elementwise_operands(op, model)
    act = fused_activation(op, model)
    bc = broadcast_c(op, model, a, b, out)
    shapes = f"{a.describe()} {'+' if op.opcode == 'ADD' else '*'} {b.describe()} -> {out.describe()}, {act}"
    consts: list[str] = []
    fn = op.opcode.lower()
    inplace = not a.is_constant
    if a.dtype == "float32":
        return float_binary(op, a, b, out, act, pname, bc, fn, shapes)
    if a.dtype not in ("int8", "int16"):
        raise unsupported(op, model, f"{a.dtype} {op.opcode}; supported: int8, int16 and float32")
    for t, what in ((a, "input 1"), (b, "input 2"), (out, "output")):
        per_tensor(t, op, model, what)
    s16 = a.dtype == "int16"
    if s16:
        int16_zero_points(op, model, (a, b, out))
    ctype, sfx = ("int16_t", "s16") if s16 else ("int8_t", "s8")
    lo, hi = qmath.activation_range_quantized(act, out.scale, out.zero_point,
                                              *((-32768, 32767) if s16 else (-128, 127)))
    pa, pb = (operand(t, ctype, lambda v: str(int(v)), consts) for t in (a, b))
    head = (f"{bc}    .input1_offset = {-a.zero_point},\n    .input2_offset = {-b.zero_point},\n"
            f"    .output_offset = {out.zero_point},\n")
    tail = f"    .activation_min = {lo},\n    .activation_max = {hi},\n}};\n"
    if op.opcode == "ADD":
        left_shift = 15 if s16 else 20
        try:
            (m1, s1), (m2, s2), (mo, so) = add_params_s8(a.scale, b.scale, out.scale,
                                                               left_shift)
        except ValueError as exc:
            raise unsupported(op, model, str(exc)) from None
        params = (f"static const qe_add_{sfx}_params_t {pname} = {{\n{head}"
                  f"    .left_shift = {left_shift},\n"
                  f"    .input1_multiplier = {m1},\n    .input1_shift = {s1},\n"
                  f"    .input2_multiplier = {m2},\n    .input2_shift = {s2},\n"
                  f"    .output_multiplier = {mo},\n    .output_shift = {so},\n{tail}")
    else:
        real = (float(np.float32(a.scale)) * float(np.float32(b.scale)) / float(np.float32(out.scale)))
        m, sh = qmath.quantize_multiplier(real)
        if not -31 <= sh <= 30:
            raise unsupported(op, model, f"requantization scale {real:g} is out of range")
        params = (f"static const qe_mul_{sfx}_params_t {pname} = {{\n{head}"
                  f"    .output_multiplier = {m},\n    .output_shift = {sh},\n{tail}")
    call = f"qe_{fn}_{sfx}(&{pname}, {pa}, {pb}, ({ctype} *)@T{out.index}@);"
    cb = sum(t.size * (2 if s16 else 1) for t in (a, b) if t.is_constant)
    return Kernel(op, call, params, consts, cb, f"{op.opcode} {a.dtype}: {shapes}",
                  inplace=inplace)


def add_params_s8(s1: float, s2: float, s_out: float, left_shift: int = 20, op: str = "ADD"):
    """TFLM int8 ADD Prepare: ((m1, shift1), (m2, shift2), (m_out, shift_out)), all shifts <= 0
    (QuantizeMultiplierSmallerThanOneExp). Raises ValueError where TFLM's checks would fail.
    int16 ADD and SUB use the same with left_shift 15 (add_common.cc, sub_common.cc)."""
    s1, s2, s_out = (float(np.float32(v)) for v in (s1, s2, s_out))
    twice_max = 2.0 * max(s1, s2)
    reals = (s1 / twice_max, s2 / twice_max, twice_max / (float(1 << left_shift) * s_out))
    res = []
    for r in reals:
        if not 0.0 < r < 1.0:
            raise ValueError(f"{op} rescaling multiplier {r:g} is not in (0, 1): the output scale "
                             f"{s_out:g} is too small for input scales {s1:g}, {s2:g}")
        res.append(qmath.quantize_multiplier(r))
    return res
