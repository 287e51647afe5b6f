"""QUANTIZE and DEQUANTIZE: firmware/core/kernels/quantize.c and dequantize.c, TFLM's
reference_ops::AffineQuantize and reference_ops::Dequantize (kernels quantize.cc, dequantize.cc).

- QUANTIZE float32 -> int8 or int16, DEQUANTIZE int8 or int16 -> float32, per-tensor
  quantization only; the int16 tensor's zero point must be 0 (TFLM's int16 kernels need it);
- QUANTIZE int8/int16 -> int8/int16 (a requantization to another scale, as the converter puts
  between int16 and int8 parts of a graph, or before a CONCATENATION of differing scales), and
  TFLM's pairs with int32 on one side (int8/int16 -> int32, int32 -> int8/int16; no int32 ->
  int32): TFLM's reference_ops::Requantize, the multiplier from QuantizeMultiplier(input scale /
  output scale) with both float32 scales widened to double;
- the input is an activation (a constant float16 DEQUANTIZE is a float16-weight model: refused,
  use the fp32 or a full-integer model); input and output have the same number of elements.
"""
from __future__ import annotations

from ...core.errors import ModelError

from ..emit import c_float
from ..qmath import quantize_multiplier
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, per_tensor, unsupported

SUPPORTED = ("QUANTIZE float32->int8/int16", "QUANTIZE int8/int16->int8/int16 (requantize)",
             "QUANTIZE int8/int16->int32 and int32->int8/int16 (requantize)",
             "DEQUANTIZE int8/int16->float32")
KERNEL_HEADERS = ("quantize.h",)

_AFFINE = {
    ("QUANTIZE", "float32", "int8"): ("qe_quantize_f32_s8", "float", "int8_t"),
    ("QUANTIZE", "float32", "int16"): ("qe_quantize_f32_s16", "float", "int16_t"),
    ("DEQUANTIZE", "int8", "float32"): ("qe_dequantize_s8_f32", "int8_t", "float"),
    ("DEQUANTIZE", "int16", "float32"): ("qe_dequantize_s16_f32", "int16_t", "float"),
}


def lower_quantize(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """QUANTIZE and DEQUANTIZE: one qe_affine_params_t (the quantized side's scale, zero point)."""
    if len(op.inputs) != 1 or len(op.outputs) != 1:
        raise unsupported(op, model, "expected one input and one output")
    src, dst = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    if op.opcode == "DEQUANTIZE" and src.dtype == "float16":
        raise unsupported(op, model, "float16 weights (an fp16-quantized model) are not supported; "
                                     "use the fp32 or a full-integer model")
    if op.opcode == "QUANTIZE" and src.dtype in _REQUANTIZE and dst.dtype in _REQUANTIZE \
            and not src.is_constant and (src.dtype, dst.dtype) != ("int32", "int32"):
        return _lower_requantize(op, model, pname, src, dst)
    entry = _AFFINE.get((op.opcode, src.dtype, dst.dtype))
    if entry is None or src.is_constant:
        raise unsupported(op, model)
    fn, ctypes = entry[0], entry[1:]
    q = dst if op.opcode == "QUANTIZE" else src
    per_tensor(q, op, model, "tensor")
    if "int16" in (src.dtype, dst.dtype) and q.zero_point != 0:
        raise unsupported(op, model, f"int16 tensor '{q.name}' has zero point {q.zero_point}; "
                                     "TFLM's int16 kernels need 0")
    if src.size != dst.size:
        raise ModelError(f"op {op.index} {op.opcode}: input has {src.size} elements, output {dst.size}")
    params = (f"static const qe_affine_params_t {pname} = {{\n"
              f"    .scale = {c_float(q.scale)},\n    .zero_point = {q.zero_point},\n"
              f"    .size = {src.size}u,\n}};\n")
    call = (f"{fn}(&{pname}, (const {ctypes[0]} *)@T{src.index}@, ({ctypes[1]} *)@T{dst.index}@);")
    comment = f"{op.opcode}: {src.describe()} -> {dst.describe()} (scale {q.scale:.9g}, zero point {q.zero_point})"
    return Kernel(op, call, params, [], 0, comment)


_REQUANTIZE = {"int8": ("s8", "int8_t"), "int16": ("s16", "int16_t"),
               "int32": ("s32", "int32_t")}


def _lower_requantize(op: Operator, model: TFLiteModel, pname: str, src, dst) -> Kernel:
    """QUANTIZE between int8, int16 and int32 (not int32 -> int32): one
    qe_requantize_params_t."""
    for t in (src, dst):
        per_tensor(t, op, model, "tensor")
    if src.size != dst.size:
        raise ModelError(f"op {op.index} {op.opcode}: input has {src.size} elements, output {dst.size}")
    # TFLM: static_cast<double>(input scale) / static_cast<double>(output scale)
    multiplier, shift = quantize_multiplier(float(src.scale) / float(dst.scale))
    (a, a_t), (b, b_t) = _REQUANTIZE[src.dtype], _REQUANTIZE[dst.dtype]
    params = (f"static const qe_requantize_params_t {pname} = {{\n"
              f"    .multiplier = {multiplier},\n    .shift = {shift},\n"
              f"    .input_zero_point = {src.zero_point},\n"
              f"    .output_zero_point = {dst.zero_point},\n    .size = {src.size}u,\n}};\n")
    call = f"qe_requantize_{a}_{b}(&{pname}, (const {a_t} *)@T{src.index}@, ({b_t} *)@T{dst.index}@);"
    comment = (f"QUANTIZE: {src.describe()} -> {dst.describe()} (requantize: scale "
               f"{src.scale:.9g} -> {dst.scale:.9g}, zero point {src.zero_point} -> {dst.zero_point})")
    return Kernel(op, call, params, [], 0, comment)
