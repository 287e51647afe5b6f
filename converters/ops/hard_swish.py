"""HARD_SWISH: firmware/core/kernels/hard_swish.c, TFLM's hard_swish.cc (reference_ops::HardSwish).

- float32: x * min(6, max(0, x + 3)) / 6;
- int8 with TFLM's int16 fixed-point arithmetic and its Prepare's multipliers
  (converters/qmath.py: hard_swish_params_s8, and the Python twin hard_swish_s8); input and
  output may have different quantizations, except where TFLM's Prepare refuses: an output
  rescaling that would need a left shift (output scale below input scale / 128);
- not int16 or uint8 (TFLM's reference kernel is int8/uint8 only);
- element-wise: the output may be written over the input (Kernel.inplace).
"""
from __future__ import annotations

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
        m_out, e_out, m_relu, e_relu = qmath.hard_swish_params_s8(x.scale, y.scale)
    except ValueError as exc:
        raise unsupported(op, model, f"input scale {x.scale:g}, output scale {y.scale:g}: {exc}") from None
    params = (f"static const qe_hard_swish_params_t {pname} = {{\n"
              f"    .input_zero_point = {x.zero_point},\n    .output_zero_point = {y.zero_point},\n"
              f"    .output_multiplier = {m_out},\n    .reluish_multiplier = {m_relu},\n"
              f"    .output_exponent = {e_out},\n    .reluish_exponent = {e_relu},\n}};\n")
    call = f"qe_hard_swish_s8(&{pname}, {n}u, (const int8_t *){src}, (int8_t *){dst});"
    return Kernel(op, call, params, [], 0, what, inplace=True, headers=OP_HEADERS)
