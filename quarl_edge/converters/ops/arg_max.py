"""ARG_MAX: firmware/core/kernels/arg_max.c, TFLM's arg_min_max.cc (reference_ops::ArgMinMax with
std::greater).

- along one axis (a constant int32/int64 input); int8 or float32 input, int32 output (the
  protocol carries int32: convert with tf.argmax(..., output_type=tf.int32)); the first maximum
  wins; the input's quantization is not read (argmax does not depend on it).
"""
from __future__ import annotations

from ...core.errors import ModelError

from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, axis_values, outer_inner, unsupported

SUPPORTED = ("ARG_MAX int8/float32 -> int32",)
KERNEL_HEADERS = ("arg_max.h",)


def lower_arg_max(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    x, out = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    axes = axis_values(op, model, len(x.shape))
    if len(axes) != 1:
        raise unsupported(op, model, f"axes {axes}; ARG_MAX takes one")
    if x.is_constant or x.dtype not in ("int8", "float32"):
        raise unsupported(op, model, f"{x.dtype} input; supported: int8 and float32")
    if out.dtype != "int32":
        raise unsupported(op, model, f"{out.dtype} output (the protocol carries int32: convert "
                                     f"with tf.argmax(..., output_type=tf.int32))")
    outer, n, inner = outer_inner(x.shape, axes[0], axes[0])
    if out.size != outer * inner or n == 0:
        raise ModelError(f"op {op.index} ARG_MAX: output {list(out.shape)} for {list(x.shape)}")
    ct = "int8_t" if x.dtype == "int8" else "float"
    params = (f"static const qe_arg_max_params_t {pname} = {{\n    .outer = {outer}u,\n"
              f"    .axis = {n}u,\n    .inner = {inner}u,\n}};\n")
    call = (f"qe_arg_max_{'s8' if x.dtype == 'int8' else 'f32'}(&{pname}, (const {ct} *)@T{x.index}@, "
            f"(int32_t *)@T{out.index}@);")
    return Kernel(op, call, params, [], 0,
                  f"ARG_MAX {x.dtype}: {x.describe()} along axis {axes[0]} -> {out.describe()}")
