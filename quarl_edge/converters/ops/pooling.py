"""MAX_POOL_2D and AVERAGE_POOL_2D: firmware/core/kernels/max_pool.c and average_pool.c
(pooling.h), TFLM's pooling.cc (reference_integer_ops::MaxPool / AveragePool for int8,
reference_ops::MaxPool / AveragePool for float32).

- int8 with equal input and output quantization (TFLM does not rescale); the average rounds
  half away from zero by integer division; float32;
- NHWC, any window and stride, SAME/VALID padding, no dilation; the window is clipped to the
  image (padding is never counted) and no window may lie entirely in the padding (TFLM's
  AveragePool fails on an empty one); fused NONE/RELU/RELU6/RELU_N1_TO_1.
"""
from __future__ import annotations

from ...core.errors import ModelError

from .. import qmath
from ..emit import c_float_limit
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, fused_activation, opt, per_tensor, unsupported, window, window_c

SUPPORTED = ("MAX_POOL_2D/AVERAGE_POOL_2D int8 and float32",)
KERNEL_HEADERS = ("pooling.h",)


def lower_pool(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    if len(op.inputs) != 1 or len(op.outputs) != 1:
        raise unsupported(op, model, "expected one input and one output")
    x, out = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    if x.is_constant or x.dtype != out.dtype:
        raise unsupported(op, model, "input must be an activation of the output's type")
    act = fused_activation(op, model)
    k_h, k_w = int(opt(op, "filterHeight", 0)), int(opt(op, "filterWidth", 0))
    if min(k_h, k_w) < 1:
        raise unsupported(op, model, f"window {k_h}x{k_w}")
    g, desc = window(op, model, x, out, k_h, k_w)
    if g["dil_h"] != 1 or g["dil_w"] != 1:
        raise unsupported(op, model, "dilated pooling")
    if g["out_c"] != g["in_c"]:
        raise ModelError(f"op {op.index} {op.opcode}: input depth {g['in_c']}, output {g['out_c']}")
    # every window must overlap the image (TFLM's AveragePool fails on an empty one)
    for o, s, pad, k, i in ((g["out_h"], g["stride_h"], g["pad_top"], k_h, g["in_h"]),
                            (g["out_w"], g["stride_w"], g["pad_left"], k_w, g["in_w"])):
        for j in range(o):
            start = j * s - pad
            if min(start + k, i) - max(start, 0) <= 0:
                raise unsupported(op, model, "a pooling window lies entirely in the padding")
    kind = "max" if op.opcode == "MAX_POOL_2D" else "average"
    comment = f"{op.opcode} {x.dtype}: {x.describe()} -> {out.describe()}; {desc}, {act}"
    if x.dtype == "float32":
        lo, hi = qmath.activation_range_float(act)
        params = (f"static const qe_pool_f32_params_t {pname} = {{\n" + window_c(g)
                  + f"    .activation_min = {c_float_limit(lo)},\n"
                  f"    .activation_max = {c_float_limit(hi)},\n}};\n")
        call = (f"qe_{kind}_pool_f32(&{pname}, (const float *)@T{x.index}@, "
                f"(float *)@T{out.index}@);")
        return Kernel(op, call, params, [], 0, comment)
    if x.dtype != "int8":
        raise unsupported(op, model, f"{x.dtype} {op.opcode}; supported: int8 and float32")
    per_tensor(x, op, model, "input")
    per_tensor(out, op, model, "output")
    if (float(x.scale), x.zero_point) != (float(out.scale), out.zero_point):
        raise unsupported(op, model, "int8 pooling with different input and output quantization "
                                     "(TFLM's kernel does not rescale)")
    lo, hi = qmath.activation_range_quantized(act, out.scale, out.zero_point)
    params = (f"static const qe_pool_s8_params_t {pname} = {{\n" + window_c(g)
              + f"    .activation_min = {lo},\n    .activation_max = {hi},\n}};\n")
    call = f"qe_{kind}_pool_s8(&{pname}, (const int8_t *)@T{x.index}@, (int8_t *)@T{out.index}@);"
    return Kernel(op, call, params, [], 0, comment)
