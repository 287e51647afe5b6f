"""LEAKY_RELU: firmware/core/kernels/leaky_relu.c, TFLM's leaky_relu.cc (reference_ops::LeakyRelu,
QuantizeLeakyRelu).

- float32: x > 0 ? x : x * alpha, any finite alpha;
- int8 and int16 with TFLM's two multipliers (QuantizeMultiplier of the float32 ratios
  s_in / s_out and s_in * alpha / s_out, as its Prepare computes them), any finite alpha
  (negative: TFLM rescales by |multiplier| and negates, and so do we); input and output may
  have different quantizations;
- element-wise: the output may be written over the input (Kernel.inplace).
"""
from __future__ import annotations

import numpy as np

from .. import qmath
from ..emit import c_float
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, opt, per_tensor, same_shape_io, unsupported

SUPPORTED = ("LEAKY_RELU float32, int8 and int16",)
KERNEL_HEADERS = ()
OP_HEADERS = ("leaky_relu.h",)
_MAX_ABS_INPUT = {"int8": 255, "int16": 65535}      # |q - zero point|


def lower_leaky_relu(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    x, y = same_shape_io(op, model)
    alpha = np.float32(opt(op, "alpha", 0.0))
    if not np.isfinite(alpha):
        raise unsupported(op, model, f"alpha {alpha}")
    what = f"LEAKY_RELU {x.dtype}, alpha {float(alpha):.9g}: {x.describe()} -> {y.describe()}"
    n, src, dst = x.size, f"@T{x.index}@", f"@T{y.index}@"
    if x.dtype == "float32":
        call = f"qe_leaky_relu_f32({n}u, {c_float(alpha)}, (const float *){src}, (float *){dst});"
        return Kernel(op, call, "", [], 0, what, inplace=True, headers=OP_HEADERS)
    if x.dtype not in _MAX_ABS_INPUT:
        raise unsupported(op, model, f"{x.dtype} LEAKY_RELU; supported: float32, int8, int16")
    per_tensor(x, op, model, "input")
    per_tensor(y, op, model, "output")
    # in double, from the float32 scales and alpha, as the interpreter's Prepare (the sources
    # we read multiply in float32; one ulp there moves int16 outputs, which the test pins)
    s_in, s_out = float(np.float32(x.scale)), float(np.float32(y.scale))
    ratios = {"identity": s_in / s_out, "alpha": s_in * float(alpha) / s_out}
    fields = {}
    for name, real in ratios.items():
        try:
            m, sh = qmath.quantize_multiplier(real)
        except ValueError as exc:
            raise unsupported(op, model, f"{name} rescaling: {exc}") from None
        if m == -(1 << 31):
            # TFLM negates the multiplier of a negative alpha: -(-2^31) overflows int32
            raise unsupported(op, model, f"alpha rescaling {real:g} rounds to the multiplier -2^31, "
                                         f"whose magnitude TFLM's kernel cannot represent")
        limit = 31 - int(_MAX_ABS_INPUT[x.dtype]).bit_length()
        if not -31 <= sh <= limit:
            raise unsupported(op, model, f"{name} rescaling {real:g} is out of range (shift {sh}; "
                                         f"TFLM's int32 arithmetic overflows beyond {limit})")
        fields[name] = (abs(m), sh)
    params = (f"static const qe_leaky_relu_params_t {pname} = {{\n"
              f"    .input_zero_point = {x.zero_point},\n    .output_zero_point = {y.zero_point},\n"
              f"    .identity_multiplier = {fields['identity'][0]},\n"
              f"    .identity_shift = {fields['identity'][1]},\n"
              f"    .alpha_multiplier = {fields['alpha'][0]},\n    .alpha_shift = {fields['alpha'][1]},\n"
              f"    .alpha_negative = {int(ratios['alpha'] < 0)},\n}};\n")
    ct, fn = ("int8_t", "s8") if x.dtype == "int8" else ("int16_t", "s16")
    call = f"qe_leaky_relu_{fn}(&{pname}, {n}u, (const {ct} *){src}, ({ct} *){dst});"
    return Kernel(op, call, params, [], 0, what, inplace=True, headers=OP_HEADERS)
