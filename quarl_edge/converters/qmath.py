"""Python twins of the integer arithmetic in the C kernels (and in TF Lite Micro's reference kernels).

Everything here is bit-exact with `firmware/core/requant.c` and the kernels under
`firmware/core/kernels/`, which are bit-exact with the TFLM reference kernels. The generator
uses these functions to precompute kernel parameters; the tests use them as a third opinion.
This file holds the shared math (QuantizeMultiplier, the output stage, rounding, gemmlowp
fixed point); an op's own Prepare math lives in its lowering, quarl_edge/converters/ops/<op>.py, as in
TFLM (e.g. ops/softmax.py: softmax_params_s8 and its twin softmax_s8).

Rounding variant
----------------
TFLM's `MultiplyByQuantizedMultiplier` has two builds, selected by `TFLITE_SINGLE_ROUNDING`:

* double rounding (the default, `TFLITE_SINGLE_ROUNDING=0`): gemmlowp's
  `SaturatingRoundingDoublingHighMul` (round half up on the Q31 product) followed by
  `RoundingDivideByPOT` (round half away from zero on the right shift);
* single rounding: one 64-bit product, one `+ 2^(n-1)` and one arithmetic shift (round half up).

The host interpreter in the pinned `tflite-micro` pip package uses **double rounding**. That was
established empirically against the interpreter (tests/test_qmath.py):
`test_tflm_interpreter_uses_double_rounding` runs an int8 FULLY_CONNECTED with scales 1, 1, 4
(multiplier 2^30, shift -1): accumulators -2, -6, -10 come out -1, -2, -3, where single rounding
gives 0, -1, -2; it then runs every int8 input through FCs with non-power-of-two multipliers.
`test_tflm_rounding_on_random_multipliers` drives random multipliers with bias-chosen
accumulators at which double rounding, single rounding (half up) and a single round-half-away
disagree: only double rounding matches every output.

Only the double-rounding variant exists in C (firmware/core/requant.c); the single-rounding
twin is kept here so the tests can show they tell the two apart.

The effective FULLY_CONNECTED scale is a double product (see `effective_scale`), also settled
against the interpreter.
"""
from __future__ import annotations

import math

import numpy as np

from .sigmoid_table_u16 import TABLE as SIGMOID_TABLE_U16

ROUNDING = "double"  # gemmlowp SRDHM + RoundingDivideByPOT, as TFLM's default build

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


# ------------------------------------------------------------------------------ helpers
def _round_half_away(x: float) -> float:
    """std::round / TfLiteRound on a double: half away from zero."""
    return math.copysign(math.floor(abs(x) + 0.5), x)


def wrap_int32(x: int) -> int:
    """Two's-complement wrap, what an int32 overflow does on every target we build for."""
    return ((x + (1 << 31)) % (1 << 32)) - (1 << 31)


def trunc_div(n: int, d: int) -> int:
    """C integer division (truncation toward zero), d > 0."""
    q = abs(n) // d
    return q if n >= 0 else -q


# ------------------------------------------------------------------- QuantizeMultiplier
def quantize_multiplier(real: float, single_rounding: bool = False) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: real ~= multiplier * 2^(shift - 31), multiplier in [2^30, 2^31).

    frexp, round half away from zero on q * 2^31, the q == 2^31 case (halve, shift + 1), and
    shifts below -31 flushed to (0, 0). `single_rounding=True` adds the clamp of shifts above 30
    that only the single-rounding build does.
    """
    real = float(real)
    if not math.isfinite(real):
        raise ValueError(f"cannot quantize a non-finite multiplier ({real})")
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = int(_round_half_away(q * float(1 << 31)))
    assert abs(q_fixed) <= (1 << 31)
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        shift, q_fixed = 0, 0
    if single_rounding and shift > 30:
        shift, q_fixed = 30, (1 << 31) - 1
    return q_fixed, shift


def effective_scale(input_scale: float, filter_scale: float, output_scale: float) -> float:
    """The real FULLY_CONNECTED multiplier exactly as the pinned TFLM computes it:
    (double)input_scale * (double)filter_scale / (double)output_scale, all three float32 values
    widened to double first.

    Some TFLite/TFLM sources (`GetQuantizedConvolutionMultipler`) multiply the two scales in
    float32 before widening; the TFLM interpreter we test against does not, tflite-runtime 2.14
    does (tests/test_qmath.py::test_tflite_runtime_reference_kernels_multiply_the_scales_in_float32). This was settled
    empirically (tests/test_qmath.py::test_tflm_effective_scale_is_a_double_product): over
    bias-driven accumulators where the variants' multipliers round differently, only the
    double product reproduces every TFLM output.
    """
    return float(np.float32(input_scale)) * float(np.float32(filter_scale)) / float(np.float32(output_scale))


# ------------------------------------------------------- MultiplyByQuantizedMultiplier
def saturating_rounding_doubling_high_mul(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul on int32: round(a * b / 2^31), ties up."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return trunc_div(ab + nudge, 1 << 31)


def rounding_divide_by_pot(x: int, exponent: int) -> int:
    """gemmlowp RoundingDivideByPOT: x / 2^exponent, ties away from zero."""
    if not 0 <= exponent <= 31:
        raise ValueError(f"exponent {exponent} outside [0, 31]")
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def multiply_by_quantized_multiplier(x: int, multiplier: int, shift: int) -> int:
    """TFLM's MultiplyByQuantizedMultiplier(int32 x, ...), default (double-rounding) build.

    A positive shift multiplies x by 2^shift first, in int32 (wrapping, as the C does).
    """
    x, multiplier, shift = int(x), int(multiplier), int(shift)
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    return rounding_divide_by_pot(
        saturating_rounding_doubling_high_mul(wrap_int32(x << left), multiplier), right)


def multiply_by_quantized_multiplier_single(x: int, multiplier: int, shift: int) -> int:
    """The single-rounding build (TFLITE_SINGLE_ROUNDING=1), for comparison only."""
    total_shift = 31 - int(shift)
    return (int(x) * int(multiplier) + (1 << (total_shift - 1))) >> total_shift


def multiply_by_quantized_multiplier_np(x, multiplier: int, shift: int) -> np.ndarray:
    """Vectorised `multiply_by_quantized_multiplier` over an int32 array (one multiplier)."""
    x = np.asarray(x, dtype=np.int64)
    multiplier, shift = int(multiplier), int(shift)
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    a = ((x << left) + (1 << 31)) % (1 << 32) - (1 << 31)          # int32 wrap
    ab = a * multiplier                                              # |ab| < 2^62
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    n = ab + nudge
    high = np.where(n >= 0, n >> 31, -((-n) >> 31))                  # truncating division
    if multiplier == INT32_MIN:
        high = np.where(a == INT32_MIN, INT32_MAX, high)
    mask = (1 << right) - 1
    remainder = high & mask
    threshold = (mask >> 1) + (high < 0)
    return ((high >> right) + (remainder > threshold)).astype(np.int64)


# ------------------------------------------------------------------------- output stage
def offset_clamp(scaled: int, offset: int, act_min: int, act_max: int) -> int:
    """The kernels' output stage after requantization (firmware/core/requant.h:qe_offset_clamp):
    min(max(scaled + offset, act_min), act_max) with exact (unbounded) integers.

    TFLM adds `scaled + offset` in int32 and clamps: the same value wherever that sum does not
    overflow (where it does, TFLM's behaviour is undefined and ours is this saturated value).
    Max first, then min, as TFLM's std::min(std::max(...)): act_max wins if act_min > act_max.
    The C computes it as clamp(scaled, act_min - offset, act_max - offset) + offset, exact and
    overflow-free for offset, act_min, act_max in int16 range (the generator's zero points and
    activation bounds always are).
    """
    return min(max(int(scaled) + int(offset), int(act_min)), int(act_max))


def requantize_output(acc: int, multiplier: int, shift: int, offset: int, act_min: int,
                      act_max: int) -> int:
    """The whole int8 output stage of a kernel with an int32 accumulator
    (firmware/core/requant.h:qe_requantize_output): `multiply_by_quantized_multiplier(acc,
    multiplier, shift)` (TFLM's double rounding; a positive shift wraps acc * 2^shift in int32,
    as the C does), then `offset_clamp`: the exact clamp(requant(acc) + offset, act_min, act_max).

    Identical to TFLM's `MultiplyByQuantizedMultiplier(acc, m, s) + offset`, clamped, wherever
    TFLM's int32 arithmetic is defined: acc * 2^shift and the + offset do not overflow.
    """
    return offset_clamp(multiply_by_quantized_multiplier(acc, multiplier, shift), offset,
                        act_min, act_max)


# ---------------------------------------------------------------- quantize / dequantize
def round_half_away_f32(v) -> np.ndarray:
    """roundf() on float32 values (half away from zero), returned as float64 integers."""
    v = np.asarray(v, dtype=np.float32).astype(np.float64)   # exact
    return np.where(v >= 0, np.floor(v + 0.5), -np.floor(-v + 0.5))


def quantize_f32(x, scale: float, zero_point: int, qmin: int = -128, qmax: int = 127) -> np.ndarray:
    """TFLM AffineQuantize float32 -> int8: clamp(roundf(x / (float)scale) + zero_point).

    The division is float32. Where TFLM's float->int32 cast is undefined (|x / scale| >= 2^31,
    NaN) our kernel saturates finite values and maps NaN to qmin; this twin does the same.
    """
    q = np.asarray(x, dtype=np.float32) / np.float32(scale)
    r = round_half_away_f32(q)
    r = np.where(np.isnan(r), -np.inf, r)
    r = np.clip(r, -(1 << 20), 1 << 20)
    return np.clip(r.astype(np.int64) + int(zero_point), qmin, qmax).astype(np.int64)


def dequantize(q, scale: float, zero_point: int) -> np.ndarray:
    """TFLM Dequantize int8 -> float32: (float)((double)scale * (q - zero_point))."""
    q = np.asarray(q, dtype=np.int64)
    return (float(np.float32(scale)) * (q - int(zero_point)).astype(np.float64)).astype(np.float32)


def quantize_activation_bound(value: float, scale: float, zero_point: int) -> int:
    """`zero_point + (int)roundf(value / scale)` in float32, as CalculateActivationRangeQuantized."""
    q = np.float32(value) / np.float32(scale)
    r = float(round_half_away_f32(q))
    if not -2.0 ** 31 <= r <= 2.0 ** 31 - 1:
        raise ValueError(f"activation bound {value} overflows int32 at scale {scale}")
    return int(zero_point) + int(r)


ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


def activation_range_quantized(activation: str, scale: float, zero_point: int,
                               qmin: int = -128, qmax: int = 127) -> tuple[int, int]:
    """TFLM CalculateActivationRangeQuantized for a fused activation."""
    if activation == "NONE":
        return qmin, qmax
    if activation == "RELU":
        return max(qmin, quantize_activation_bound(0.0, scale, zero_point)), qmax
    if activation == "RELU6":
        return (max(qmin, quantize_activation_bound(0.0, scale, zero_point)),
                min(qmax, quantize_activation_bound(6.0, scale, zero_point)))
    if activation == "RELU_N1_TO_1":
        return (max(qmin, quantize_activation_bound(-1.0, scale, zero_point)),
                min(qmax, quantize_activation_bound(1.0, scale, zero_point)))
    raise ValueError(f"fused activation {activation} has no quantized range")


FLT_MAX = float(np.finfo(np.float32).max)


def activation_range_float(activation: str) -> tuple[float, float]:
    """TFLM CalculateActivationRange<float>: lowest()/max() when there is no activation."""
    return {
        "NONE": (-FLT_MAX, FLT_MAX),
        "RELU": (0.0, FLT_MAX),
        "RELU6": (0.0, 6.0),
        "RELU_N1_TO_1": (-1.0, 1.0),
    }[activation]


# ------------------------------------------------------------------ int16 / int64 paths
def quantize_f32_int16(x, scale: float, zero_point: int = 0) -> np.ndarray:
    """AffineQuantize float32 -> int16 (same arithmetic as int8, int16 clamp)."""
    return quantize_f32(x, scale, zero_point, -32768, 32767)


def multiply_by_quantized_multiplier_int64(x: int, multiplier: int, shift: int) -> int:
    """TFLM's MultiplyByQuantizedMultiplier(int64 x, ...) (the int16x8 FULLY_CONNECTED path):
    the Q31 multiplier is reduced to Q15 (rounding), then one 64-bit multiply, one `+ 2^(n-1)`
    and one arithmetic shift by 15 - shift; the result is truncated to int32."""
    multiplier, shift = int(multiplier), int(shift)
    if not -31 <= shift < 8:
        raise ValueError(f"shift {shift} outside [-31, 8)")
    reduced = (multiplier + (1 << 15)) >> 16 if multiplier < 0x7FFF0000 else 0x7FFF
    total = 15 - shift
    return wrap_int32((int(x) * reduced + (1 << (total - 1))) >> total)


def reduced_multiplier_q15(multiplier: int) -> int:
    return (int(multiplier) + (1 << 15)) >> 16 if int(multiplier) < 0x7FFF0000 else 0x7FFF


# ------------------------------------------------------- gemmlowp fixed-point functions
# Python twins of gemmlowp's fixedpoint.h scalar int32 arithmetic, as TFLM's int8 TANH and
# LOGISTIC use it (reference_integer_ops::Tanh / ::Logistic), and its int8 SOFTMAX
# (ops/softmax.py). A raw int32 with `ib` integer bits represents raw / 2^(31 - ib).
def srdhm(a: int, b: int) -> int:
    return saturating_rounding_doubling_high_mul(wrap_int32(a), wrap_int32(b))


def rdbp(x: int, e: int) -> int:
    return rounding_divide_by_pot(wrap_int32(x), e)


def sat_mul_pot(x: int, exponent: int) -> int:
    """SaturatingRoundingMultiplyByPOT<exponent> on int32."""
    x = wrap_int32(x)
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    if x > threshold:
        return INT32_MAX
    if x < -threshold:
        return INT32_MIN
    return wrap_int32(x << exponent)


def rounding_half_sum(a: int, b: int) -> int:
    s = a + b
    return trunc_div(s + (1 if s >= 0 else -1), 2)


def _exp_quarter(a: int) -> int:
    """exp(x) for x in [-1/4, 0), Q0.31 in and out."""
    constant_term, one_third = 1895147668, 715827883
    x = wrap_int32(a + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rdbp(x4, 2)
    poly = rdbp(wrap_int32(srdhm(wrap_int32(x4_over_4 + x3), one_third) + x2), 1)
    return wrap_int32(constant_term + srdhm(constant_term, wrap_int32(x + poly)))


_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a: int, ib: int) -> int:
    """gemmlowp exp_on_negative_values: a (ib integer bits, a <= 0) -> exp(a) in Q0.31."""
    frac = 31 - ib
    quarter = 1 << (frac - 2)
    a_mod = wrap_int32((a & (quarter - 1)) - quarter)
    result = _exp_quarter(sat_mul_pot(a_mod, ib))
    remainder = wrap_int32(a_mod - a)
    for exponent, mult in _EXP_BARREL:
        if ib > exponent and remainder & (1 << (frac + exponent)):
            result = srdhm(result, mult)
    if ib > 5 and a < -(1 << (36 - ib)):
        result = 0
    if a == 0:
        result = INT32_MAX
    return result


def newton_reciprocal(half_denominator: int) -> int:
    """The three Newton-Raphson steps shared by 1/(1+x) and (1-x)/(1+x); Q2.29 result."""
    x = wrap_int32(1515870810 + srdhm(half_denominator, -1010580540))
    for _ in range(3):
        hdx = srdhm(half_denominator, x)
        one_minus = wrap_int32((1 << 29) - hdx)
        x = wrap_int32(x + sat_mul_pot(srdhm(x, one_minus), 2))
    return x


def fixed_tanh(a: int, ib: int) -> int:
    """gemmlowp tanh: a with ib integer bits -> tanh(a) in Q0.31."""
    n = a if a < 0 else wrap_int32(-a)
    e = exp_on_negative_values(n, ib + 1)                       # ExactMulByPot<1>
    x = newton_reciprocal(rounding_half_sum(e, INT32_MAX))
    t = sat_mul_pot(wrap_int32(x - (1 << 29)), 2)               # Rescale<0>(x - 1)
    if a == 0:
        return 0
    return wrap_int32(-t) if a < 0 else t


def fixed_logistic(a: int, ib: int) -> int:
    """gemmlowp logistic: a with ib integer bits -> 1 / (1 + exp(-a)) in Q0.31."""
    abs_a = a if a > 0 else wrap_int32(-a)
    e = exp_on_negative_values(wrap_int32(-abs_a), ib)
    x = newton_reciprocal(rounding_half_sum(e, INT32_MAX))
    pos = sat_mul_pot(x, 1)                                      # Rescale<0>(ExactMulByPot<-1>)
    if a == 0:
        return 1 << 30
    return pos if a > 0 else wrap_int32(INT32_MAX - pos)


# -------------------------------------------------- int8 element-wise ops as lookup tables
def _frexp_multiplier(real: float) -> tuple[int, int]:
    """TFLM TANH/LOGISTIC Prepare: frexp, then (int32)round(q * 2^31) with no 2^31 fix-up."""
    q, shift = math.frexp(real)
    m = int(_round_half_away(q * float(1 << 31)))
    if m >= (1 << 31):
        raise ValueError(f"input multiplier {real!r} rounds to 2^31 (TFLM overflows int32 there)")
    return m, shift


def _input_radius(input_integer_bits: int, input_left_shift: int, total_signed_bits: int = 31) -> int:
    """TFLM CalculateInputRadius, in double as the C++ does."""
    if input_left_shift < 0:
        raise ValueError(f"input left shift {input_left_shift} < 0 (scale too small)")
    max_rescaled = (1.0 * ((1 << input_integer_bits) - 1)
                    * float(1 << (total_signed_bits - input_integer_bits)) / float(1 << input_left_shift))
    return int(math.floor(max_rescaled))


def tanh_logistic_lut_s8(kind: str, input_scale: float, input_zero_point: int) -> np.ndarray:
    """The 256 outputs (index: input + 128) of TFLM's int8 TANH or LOGISTIC for this input
    quantization. Output quantization is fixed by the op: TANH 1/128 and 0, LOGISTIC 1/256
    and -128."""
    real = float(np.float32(input_scale)) * float(1 << 27)       # kInputIntegerBits = 4
    multiplier, shift = _frexp_multiplier(real)
    radius = _input_radius(4, shift)
    out = np.empty(256, np.int64)
    for k, q in enumerate(range(-128, 128)):
        x = q - int(input_zero_point)
        if x <= -radius:
            out[k] = -128
        elif x >= radius:
            out[k] = 127
        else:
            a = multiply_by_quantized_multiplier(x, multiplier, shift)
            if kind == "TANH":
                y = rounding_divide_by_pot(fixed_tanh(a, 4), 31 - 7)
                out[k] = min(max(y, -128), 127)
            elif kind == "LOGISTIC":
                y = rounding_divide_by_pot(fixed_logistic(a, 4), 31 - 8)
                out[k] = min(max(y - 128, -128), 127)
            else:
                raise ValueError(kind)
    return out.astype(np.int8)


def checked_log2(x: float) -> tuple[int, bool]:
    """TFLite's CheckedLog2: log2(x) rounded half away from zero, and whether x is a power of two
    to within 1e-3 in the exponent."""
    x_log2 = math.log(x) * (1.0 / math.log(2.0))
    rounded = _round_half_away(x_log2)
    return int(rounded), abs(x_log2 - rounded) < 1e-3


def tanh_logistic_s16_params(kind: str, input_scale: float) -> tuple[int, int]:
    """(multiplier, shift) of TFLM's int16 TANH / LOGISTIC for an input of `input_scale`, as its
    Prepare computes them (tanh.cc, logistic_common.cc: the table wants the input at scale
    1/(3 * 4096)) and its Eval resolves the power-of-two case (multiplier 3 << shift, shift 0):
    the table index input is then (x * multiplier + round) >> shift."""
    scale = float(np.float32(input_scale))
    log2, pot = checked_log2(scale)
    shift = 12 + log2                                   # (15 - 3 integer bits) + log2
    pot = pot and (shift in (0, 1) if kind == "TANH" else shift == 0)
    if pot:
        return 3 << shift, 0
    multiplier, shift = scale * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        multiplier *= 2.0
    return int(multiplier), shift


def relu_lut_s8(input_scale: float, input_zp: int, output_scale: float, output_zp: int) -> np.ndarray:
    """TFLM int8 RELU (ReluQuantized: requantize, then clamp at 0), as a 256-entry table."""
    real = float(np.float32(input_scale)) / float(np.float32(output_scale))
    multiplier, shift = quantize_multiplier(real)
    lo = max(-128, int(output_zp) + int(round_half_away_f32(np.float32(0.0) / np.float32(output_scale))))
    out = np.empty(256, np.int64)
    for k, q in enumerate(range(-128, 128)):
        v = int(output_zp) + multiply_by_quantized_multiplier(q - int(input_zp), multiplier, shift)
        out[k] = min(max(v, lo), 127)
    return out.astype(np.int8)


def relu6_lut_s8(input_scale: float, input_zp: int) -> np.ndarray:
    """TFLM int8 RELU6 (no requantization: clamp to [zero, six] in the input's quantization)."""
    six = int(input_zp) + int(round_half_away_f32(np.float32(6.0) / np.float32(input_scale)))
    six = min(max(six, -128), 127)
    zero = int(input_zp)
    q = np.arange(-128, 128)
    return np.minimum(np.maximum(q, zero), six).astype(np.int8)


# ---------------------------------------------------------------- int16 sigmoid / tanh (LSTM)
def sigmoid_table_u16() -> tuple[int, ...]:
    """The 256-entry uint16 table of TFLM's int16 LOGISTIC and TANH (reference_integer_ops::
    Logistic / ::Tanh, which its integer LSTM runs for every gate and for tanh of the cell
    state): sigmoid(i / 24) in 0.16 fixed point, as TFLM's own comment says, but not exactly
    round(65536 * sigmoid(i / 24)): 44 of the 256 entries are one more than that (see
    sigmoid_table_formula_u16). So the values are measured, not computed:
    scripts/measure_sigmoid_table.py recovers every entry from the tflite-micro interpreter's
    int16 TANH and LOGISTIC outputs and writes quarl_edge/converters/sigmoid_table_u16.py;
    tests/test_lstm_int8_golden.py measures again and compares."""
    return SIGMOID_TABLE_U16


def sigmoid_table_formula_u16() -> list[int]:
    """round(65536 * sigmoid(i / 24)), i = 0..255: equal to the measured table except at 44
    entries, where the measured value is one higher (i = 4, 8, 12, 14, ..., 135 and 255).
    Kept to document that difference (scripts/measure_sigmoid_table.py prints it)."""
    return [math.floor(65536.0 / (1.0 + math.exp(-i / 24.0)) + 0.5) for i in range(256)]
