"""MEAN: firmware/core/kernels/mean.c, TFLM's reduce.cc (reference_ops::QuantizedMeanOrSum for
int8, reference_ops::Mean for float32).

- over one contiguous run of axes (e.g. the spatial axes of NHWC), keep_dims or not; the axes
  are a constant int32/int64 input; the input is viewed as [outer][reduce][inner];
- int8 -> int8: an int32 sum minus zero point x n, rescaled with 1/n folded into the Q31
  multiplier as TFLM does (mean_params_s8 below); the sum must not be able to
  overflow int32; float32 -> float32.
"""
from __future__ import annotations

import numpy as np

from ...core.errors import ModelError

from .. import qmath
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, axis_values, outer_inner, per_tensor, unsupported

SUPPORTED = ("MEAN over contiguous axes int8 and float32",)
KERNEL_HEADERS = ("mean.h",)


def lower_mean(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    x, out = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    axes = axis_values(op, model, len(x.shape))
    if x.is_constant or x.dtype != out.dtype:
        raise unsupported(op, model, "input must be an activation of the output's type")
    if not axes or axes != list(range(axes[0], axes[-1] + 1)):
        raise unsupported(op, model, f"axes {axes} are not one contiguous run of dimensions")
    outer, reduce, inner = outer_inner(x.shape, axes[0], axes[-1])
    if out.size != outer * inner or reduce == 0:
        raise ModelError(f"op {op.index} MEAN: output {list(out.shape)} for {list(x.shape)} over {axes}")
    what = (f"MEAN {x.dtype}: {x.describe()} over axes {axes} -> {out.describe()} "
            f"({outer} x {reduce} x {inner})")
    if x.dtype == "float32":
        params = (f"static const qe_mean_params_t {pname} = {{\n    .outer = {outer}u,\n"
                  f"    .reduce = {reduce}u,\n    .inner = {inner}u,\n}};\n")
        call = f"qe_mean_f32(&{pname}, (const float *)@T{x.index}@, (float *)@T{out.index}@);"
        return Kernel(op, call, params, [], 0, what)
    if x.dtype != "int8":
        raise unsupported(op, model, f"{x.dtype} MEAN; supported: int8 and float32")
    per_tensor(x, op, model, "input")
    per_tensor(out, op, model, "output")
    if reduce * 255 > qmath.INT32_MAX:
        raise unsupported(op, model, f"MEAN over {reduce} values could overflow the int32 sum")
    try:
        mult, shift = mean_params_s8(x.scale, out.scale, reduce)
    except ValueError as exc:
        raise unsupported(op, model, str(exc)) from None
    params = (f"static const qe_mean_params_t {pname} = {{\n    .outer = {outer}u,\n"
              f"    .reduce = {reduce}u,\n    .inner = {inner}u,\n"
              f"    .sum_offset = {-x.zero_point * reduce},\n"
              f"    .multiplier = {mult},\n    .shift = {shift},\n"
              f"    .output_zero_point = {out.zero_point},\n}};\n")
    call = f"qe_mean_s8(&{pname}, (const int8_t *)@T{x.index}@, (int8_t *)@T{out.index}@);"
    return Kernel(op, call, params, [], 0, what)


def mean_params_s8(input_scale: float, output_scale: float, n: int) -> tuple[int, int]:
    """TFLM int8 MEAN (reference_ops::QuantizedMeanOrSum): QuantizeMultiplier of
    (double)input_scale / (double)output_scale, then 1/n folded in: k = min(floor(log2 n), 32,
    31 + shift); multiplier * 2^k / n (int64, truncating), shift - k."""
    real = float(np.float32(input_scale)) / float(np.float32(output_scale))
    multiplier, shift = qmath.quantize_multiplier(real)
    if not -31 <= shift <= 30:
        raise ValueError(f"MEAN rescaling {real:g} is out of range")
    k = min(int(n).bit_length() - 1, 32, 31 + shift)
    return int((multiplier << k) // int(n)), shift - k
