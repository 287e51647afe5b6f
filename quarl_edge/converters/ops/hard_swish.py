"""HARD_SWISH: firmware/core/kernels/hard_swish.c, TFLM's hard_swish.cc (reference_ops::HardSwish).

- float32: x * min(6, max(0, x + 3)) / 6;
- int8 with TFLM's int16 fixed-point arithmetic and its Prepare's multipliers
  (hard_swish_params_s8 below, and the Python twin hard_swish_s8); input and
  output may have different quantizations, except where TFLM's Prepare refuses: an output
  rescaling that would need a left shift (output scale below input scale / 128);
- not int16 or uint8 (TFLM's reference kernel is int8/uint8 only);
- element-wise: the output may be written over the input (Kernel.inplace).
"""
from __future__ import annotations

import numpy as np

from .. import qmath
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, per_tensor, same_shape_io, unsupported

SUPPORTED = ("HARD_SWISH float32 and int8",)
KERNEL_HEADERS = ()
OP_HEADERS = ("hard_swish.h",)


def lower_hard_swish(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    x, y = same_shape_io(op, model)
    what = f"HARD_SWISH {x.dtype}: {x.describe()} -> {y.describe()}"
    n, src, dst = x.size, f"@T{x.index}@", f"@T{y.index}@"
    if x.dtype == "float32":
        call = f"qe_hard_swish_f32({n}u, (const float *){src}, (float *){dst});"
        return Kernel(op, call, "", [], 0, what, inplace=True, headers=OP_HEADERS)
    if x.dtype != "int8":
        raise unsupported(op, model, f"{x.dtype} HARD_SWISH; supported: float32 and int8")
    per_tensor(x, op, model, "input")
    per_tensor(y, op, model, "output")
    try:
        m_out, e_out, m_relu, e_relu = hard_swish_params_s8(x.scale, y.scale)
    except ValueError as exc:
        raise unsupported(op, model, f"input scale {x.scale:g}, output scale {y.scale:g}: {exc}") from None
    params = (f"static const qe_hard_swish_params_t {pname} = {{\n"
              f"    .input_zero_point = {x.zero_point},\n    .output_zero_point = {y.zero_point},\n"
              f"    .output_multiplier = {m_out},\n    .reluish_multiplier = {m_relu},\n"
              f"    .output_exponent = {e_out},\n    .reluish_exponent = {e_relu},\n}};\n")
    call = f"qe_hard_swish_s8(&{pname}, {n}u, (const int8_t *){src}, (int8_t *){dst});"
    return Kernel(op, call, params, [], 0, what, inplace=True, headers=OP_HEADERS)


# ------------------------------------------- Prepare and the Python twin, int16 fixed point
def _wrap_int16(x: int) -> int:
    return ((int(x) + (1 << 15)) & 0xFFFF) - (1 << 15)


def _srdhm16(a: int, b: int) -> int:
    """gemmlowp's int16 SaturatingRoundingDoublingHighMul: round(a * b / 2^15), ties away."""
    if a == b == -(1 << 15):
        return (1 << 15) - 1
    ab = a * b
    nudge = (1 << 14) if ab >= 0 else 1 - (1 << 14)
    return _wrap_int16(qmath.trunc_div(ab + nudge, 1 << 15))


def _rdbpot16(x: int, exponent: int) -> int:
    """gemmlowp's RoundingDivideByPOT instantiated for int16 (mask and threshold are int16
    too, which matters only for exponents above 14)."""
    mask = _wrap_int16((1 << exponent) - 1)
    remainder = _wrap_int16(x & mask)
    threshold = _wrap_int16((mask >> 1) + (1 if x < 0 else 0))
    return _wrap_int16((x >> exponent) + (1 if remainder > threshold else 0))


def _sat_left_shift16(x: int, amount: int) -> int:
    return max(-(1 << 15), min((1 << 15) - 1, x * (1 << amount)))


def _downscale_multiplier16(m: int) -> int:
    """TFLM's DownScaleInt32ToInt16Multiplier: the Q31 multiplier rounded to Q15."""
    if m >= qmath.INT32_MAX - (1 << 15):
        return (1 << 15) - 1
    return (m + (1 << 15)) >> 16


def hard_swish_params_s8(input_scale: float, output_scale: float) -> tuple[int, int, int, int]:
    """TFLM's HardSwishPrepare for int8: (output multiplier Q15, its exponent (<= 0), reluish
    multiplier Q15, its exponent), from float32 scales: the input on a 2^7 finer "hires" scale,
    the reluish scale 3/32768 (so that 3.0 is 32768). Raises ValueError where TFLM refuses."""
    hires = np.float32(1.0 / 128.0) * np.float32(input_scale)
    with np.errstate(all="ignore"):
        out_real = float(hires / np.float32(output_scale))
        relu_real = float(hires / np.float32(3.0 / 32768.0))
    m_out, e_out = qmath.quantize_multiplier(out_real)
    m_relu, e_relu = qmath.quantize_multiplier(relu_real)
    if e_out > 0:
        raise ValueError(f"output rescaling {out_real:g} needs a left shift (exponent {e_out}), "
                         f"which TFLM's kernel refuses")
    if e_out < -31 or not -31 <= e_relu <= 31:
        raise ValueError(f"rescaling exponents {e_out}, {e_relu} are outside TFLM's [-31, 31]")
    return _downscale_multiplier16(m_out), e_out, _downscale_multiplier16(m_relu), e_relu


def hard_swish_s8(q: int, input_zp: int, output_zp: int, out_m16: int, out_exp: int,
                  relu_m16: int, relu_exp: int) -> int:
    """reference_ops::HardSwish for one int8 value, in TFLM's int16 fixed point: the Python
    twin of firmware/core/kernels/hard_swish.c."""
    v = _wrap_int16(int(q) - input_zp)
    hires = _wrap_int16(v * (1 << 7))
    preshift_out = _srdhm16(hires, out_m16)
    r = hires
    if relu_exp > 0:
        r = _sat_left_shift16(r, relu_exp - 1)
    r = _srdhm16(r, relu_m16)
    if relu_exp > 0:
        r = _sat_left_shift16(r, 1)
    if relu_exp < 0:
        r = _rdbpot16(r, -relu_exp)
    r = (r + (1 << 15)) >> 1                          # [-1, 1] -> [0, 1] in Q15
    pre = _wrap_int16(qmath.trunc_div(r * preshift_out, 1 << 15))   # SaturatingDoublingHighMul
    out = _rdbpot16(pre, -out_exp)
    out = _wrap_int16(out + output_zp)                # TFLM adds into an int16_t
    return max(-128, min(127, out))
