"""QUANTIZE float32 -> int8 on the cortex-m0 (and rv32) variant (firmware/core/kernels/optimized/
cortex-m0/quantize.c): the reference lowering's call as qe_quantize_f32_s8_inv, with the
divisor's reciprocal the kernel would otherwise compute by long division on every call."""
from __future__ import annotations

import dataclasses

import numpy as np

from ...quantize import lower_quantize
from ....tflite_model import Operator, TFLiteModel


def scale_inverse(scale: float) -> int:
    """floor(2^48 / m) for float32(scale) = m * 2^e with its 24-bit significand m, or 0 (the
    kernel's float path) for a scale that is not a normal positive float."""
    bits = int(np.array([scale], np.float32).view(np.uint32)[0])
    exp = (bits >> 23) & 0xFF
    if bits >> 31 or exp in (0, 0xFF):
        return 0
    return (1 << 48) // ((bits & 0x7FFFFF) | 0x800000)


def lower_quantize_inv(op: Operator, model: TFLiteModel, pname: str):
    kernel = lower_quantize(op, model, pname)          # validates the op completely
    if not kernel.call.startswith("qe_quantize_f32_s8("):
        return kernel
    inv = scale_inverse(model.tensors[op.outputs[0]].scale)
    call = kernel.call.replace("qe_quantize_f32_s8(", "qe_quantize_f32_s8_inv(", 1) \
                      .replace(f"(&{pname}, ", f"(&{pname}, {inv}u, ", 1)
    return dataclasses.replace(kernel, call=call)
