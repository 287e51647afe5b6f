"""SOFTMAX over the last axis: firmware/core/kernels/softmax.c, TFLM's softmax.cc
(reference_ops::Softmax, int8 and float32).

- int8 -> int8 with TFLM's output quantization (scale 1/256, zero point -128) and its gemmlowp
  fixed-point arithmetic; the exp of every possible difference to the row max is precomputed
  here (converters/qmath.py) as a 256-entry int32 table; at most 511 values per row (the Q12
  sum and TFLM's final shift stay in range);
- int8 -> int16 (scale 1/65536 within TFLM's 0.1 %, zero point -32768): the same arithmetic and
  table, TFLM's Softmax<int8_t, int16_t> final shift and clamp (qe_softmax_s8_s16; a public
  keyword-spotting model ends so); not in place (the output is wider than the input);
- float32 with expf, passed in by the generated code (such a model links with -lm);
- beta from the options (0 without options, as TFLM); element-wise in memory (Kernel.inplace).
"""
from __future__ import annotations

import numpy as np

from quarl_edge.errors import ModelError

from .. import qmath
from ..emit import c_array, c_float
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, opt, per_tensor, same_shape_io, unsupported

SUPPORTED = ("SOFTMAX int8 -> int8 (output 1/256, -128), int8 -> int16 (output 1/65536, -32768) "
             "and float32",)
KERNEL_HEADERS = ("softmax.h",)


def lower_softmax(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    x, y = _io(op, model)
    if not x.shape:
        raise unsupported(op, model, "a scalar input")
    depth = x.shape[-1]
    outer = x.size // depth if depth else 0
    beta = float(np.float32(opt(op, "beta", 0.0)))   # TFLM: 0 without options
    what = f"SOFTMAX {x.dtype}: {x.describe()} -> {y.describe()}, beta {beta:g}, over the last axis"
    if x.dtype == "float32":
        params = (f"static const qe_softmax_f32_params_t {pname} = {{\n    .beta = {c_float(beta)},\n"
                  f"    .outer = {outer}u,\n    .depth = {depth}u,\n}};\n")
        call = f"qe_softmax_f32(&{pname}, qe_libm_expf, (const float *)@T{x.index}@, (float *)@T{y.index}@);"
        return Kernel(op, call, params, [], 0, what, inplace=True)
    if x.dtype != "int8":
        raise unsupported(op, model, f"{x.dtype} SOFTMAX; supported: int8 and float32")
    per_tensor(x, op, model, "input")
    per_tensor(y, op, model, "output")
    s16 = y.dtype == "int16"
    if s16 and (y.zero_point != -32768
                or abs(np.float32(y.scale) - np.float32(1.0 / 65536)) > np.float32(0.001 / 65536)):
        raise unsupported(op, model, f"int8 -> int16 SOFTMAX output '{y.name}' has scale {y.scale:g} "
                                     f"and zero point {y.zero_point}; TFLM needs scale 1/65536 "
                                     f"(within 0.1 %), zero point -32768")
    if not s16 and (float(y.scale), y.zero_point) != (1.0 / 256, -128):
        raise unsupported(op, model, f"int8 SOFTMAX output '{y.name}' has scale {y.scale:g} and zero "
                                     f"point {y.zero_point}; TFLM needs scale 1/256, zero point -128")
    if not 1 <= depth <= 511:
        raise unsupported(op, model, f"int8 SOFTMAX over {depth} values; at most 511 (the Q12 sum "
                                     f"and TFLM's final shift stay in range)")
    try:
        mult, shift, diff_min = qmath.softmax_params_s8(x.scale, beta)
    except ValueError as exc:
        raise unsupported(op, model, f"input scale {x.scale:g}: {exc}") from None
    table = qmath.softmax_exp_table_s8(mult, shift, diff_min)
    tname = f"{pname}_exp"
    consts = [f"/* SOFTMAX int8, input scale {x.scale:.9g}, beta {beta:g}: exp of -k input steps "
              f"in Q0.31 (TFLM multiplier {mult}, left shift {shift}, diff_min {diff_min}) */\n"
              + c_array("int32_t", tname, table, 6, str)]
    params = (f"static const qe_softmax_s8_params_t {pname} = {{\n    .exp_table = {tname},\n"
              f"    .outer = {outer}u,\n    .depth = {depth}u,\n}};\n")
    if s16:
        call = f"qe_softmax_s8_s16(&{pname}, (const int8_t *)@T{x.index}@, (int16_t *)@T{y.index}@);"
        return Kernel(op, call, params, consts, 4 * 256, what)
    call = f"qe_softmax_s8(&{pname}, (const int8_t *)@T{x.index}@, (int8_t *)@T{y.index}@);"
    return Kernel(op, call, params, consts, 4 * 256, what, inplace=True)


def _io(op: Operator, model: TFLiteModel):
    """(input, output): same_shape_io's checks, with int8 -> int16 the one pair of types that
    may differ (TFLM's int8 SOFTMAX with an int16 output)."""
    if len([i for i in op.inputs if i >= 0]) >= 1 and len(op.outputs) == 1:
        x, y = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
        if (x.dtype, y.dtype) == ("int8", "int16") and not x.is_constant:
            if x.size != y.size:
                raise ModelError(f"op {op.index} {op.opcode}: input has {x.size} elements, "
                                 f"output {y.size}")
            return x, y
    return same_shape_io(op, model)
