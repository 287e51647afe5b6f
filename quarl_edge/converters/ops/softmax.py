"""SOFTMAX over the last axis: firmware/core/kernels/softmax.c, TFLM's softmax.cc
(reference_ops::Softmax, int8 and float32).

- int8 -> int8 with TFLM's output quantization (scale 1/256, zero point -128) and its gemmlowp
  fixed-point arithmetic; the exp of every possible difference to the row max is precomputed
  here (softmax_params_s8, softmax_exp_table_s8 below; softmax_s8 is the Python twin) as a 256-entry int32 table; at most 511 values per row (the Q12
  sum and TFLM's final shift stay in range);
- int8 -> int16 (scale 1/65536 within TFLM's 0.1 %, zero point -32768): the same arithmetic and
  table, TFLM's Softmax<int8_t, int16_t> final shift and clamp (qe_softmax_s8_s16; a public
  keyword-spotting model ends so); not in place (the output is wider than the input);
- float32 with expf, passed in by the generated code (such a model links with -lm);
- beta from the options (0 without options, as TFLM); element-wise in memory (Kernel.inplace).
"""
from __future__ import annotations

import math

import numpy as np

from ...core.errors import ModelError

from ..qmath import (INT32_MAX, exp_on_negative_values, newton_reciprocal, quantize_multiplier,
                     rdbp, rounding_half_sum, sat_mul_pot, srdhm, wrap_int32)
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
        mult, shift, diff_min = softmax_params_s8(x.scale, beta)
    except ValueError as exc:
        raise unsupported(op, model, f"input scale {x.scale:g}: {exc}") from None
    table = softmax_exp_table_s8(mult, shift, diff_min)
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


# ------------------------------------------------------------- Prepare and the Python twin
SOFTMAX_SCALED_DIFF_BITS = 5       # kScaledDiffIntegerBits
SOFTMAX_ACCUM_BITS = 12            # kAccumulationIntegerBits


def softmax_params_s8(input_scale: float, beta: float) -> tuple[int, int, int]:
    """TFLM int8 SOFTMAX Prepare (PreprocessSoftmaxScaling, CalculateInputRadius), double
    rounding build: (input_multiplier, input_left_shift, diff_min).

    real = min(beta * input_scale * 2^26, 2^31 - 1) in double (beta and scale are float32
    values widened), quantized with QuantizeMultiplier (the shift must be >= 0);
    diff_min = -floor((2^5 - 1) * 2^26 / 2^left_shift)."""
    real = float(np.float32(beta)) * float(np.float32(input_scale)) * float(1 << (31 - SOFTMAX_SCALED_DIFF_BITS))
    real = min(real, float((1 << 31) - 1))
    multiplier, shift = quantize_multiplier(real)
    if shift < 0:
        raise ValueError(f"beta * input scale {real / 2 ** 26:g} is too small (left shift {shift} < 0)")
    radius = math.floor(((1 << SOFTMAX_SCALED_DIFF_BITS) - 1)
                        * float(1 << (31 - SOFTMAX_SCALED_DIFF_BITS)) / float(1 << shift))
    return multiplier, shift, -int(radius)


def _count_leading_zeros32(x: int) -> int:
    x &= 0xFFFFFFFF
    return 32 - x.bit_length()


def softmax_s8(x, multiplier: int, left_shift: int, diff_min: int,
               out_dtype: str = "int8") -> np.ndarray:
    """TFLM reference_ops::Softmax for int8 -> int8 (output scale 1/256, zero point -128) or,
    with out_dtype "int16", int8 -> int16 (1/65536, -32768) over the last axis: gemmlowp exp on
    the rescaled differences to the row max, a Q12 sum, its reciprocal (one_over_one_plus_x)
    and a final rounding shift by num_bits_over_unit + 31 - the output's bits. Slow (pure
    Python)."""
    bits = {"int8": 8, "int16": 16}[out_dtype]
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    x = np.asarray(x, dtype=np.int64)
    depth = x.shape[-1]
    rows = x.reshape(-1, depth)
    out = np.empty_like(rows)
    for r, row in enumerate(rows):
        mx = int(row.max())
        exps = []
        total = 0
        for v in row:
            diff = int(v) - mx
            if diff >= diff_min:
                scaled = srdhm(wrap_int32(diff << left_shift), multiplier)
                e = exp_on_negative_values(scaled, SOFTMAX_SCALED_DIFF_BITS)
                total = wrap_int32(total + rdbp(e, SOFTMAX_ACCUM_BITS))
                exps.append(e)
            else:
                exps.append(None)
        headroom_plus_one = _count_leading_zeros32(total)
        num_bits_over_unit = SOFTMAX_ACCUM_BITS - headroom_plus_one
        shifted_minus_one = wrap_int32(((total << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31))
        recip = sat_mul_pot(newton_reciprocal(rounding_half_sum(shifted_minus_one, INT32_MAX)), 1)
        for c, e in enumerate(exps):
            if e is None:
                out[r, c] = lo
            else:
                y = rdbp(srdhm(recip, e), num_bits_over_unit + 31 - bits) + lo
                out[r, c] = min(max(y, lo), hi)
    return out.reshape(x.shape).astype(out_dtype)


def softmax_exp_table_s8(multiplier: int, left_shift: int, diff_min: int) -> np.ndarray:
    """exp of every int8 difference to the row max, as TFLM computes it inside its int8 SOFTMAX:
    table[k] = exp_on_negative_values(SRDHM(-k * 2^left_shift, multiplier)) in Q0.31 (5 integer
    bits in), for k = 0..255; 0 where -k < diff_min (TFLM skips those elements, and a 0 there
    gives the same sum and the same -128 output)."""
    out = np.zeros(256, np.int64)
    for k in range(256):
        if -k >= diff_min:
            scaled = srdhm(wrap_int32(-k << left_shift), multiplier)
            out[k] = exp_on_negative_values(scaled, SOFTMAX_SCALED_DIFF_BITS)
    return out
