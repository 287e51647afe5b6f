"""RESHAPE, SQUEEZE, EXPAND_DIMS: no kernel (TFLM's reshape.cc, squeeze.cc, expand_dims.cc copy
the bytes, or nothing when the buffers coincide).

The output aliases the input's bytes: no code is emitted and the memory plan gives both tensors
one buffer (Kernel.alias). Same type and element count; a quantized input and output must have
the same scale and zero point.
"""
from __future__ import annotations

from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, same_shape_io, unsupported

SUPPORTED = ("RESHAPE/SQUEEZE/EXPAND_DIMS (alias)",)
KERNEL_HEADERS = ()


def lower_reshape(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """RESHAPE, SQUEEZE, EXPAND_DIMS: the output is the input's bytes, no code (an alias)."""
    x, y = same_shape_io(op, model)
    if y.quantization is not None or x.quantization is not None:
        if (x.scale, x.zero_point) != (y.scale, y.zero_point):
            raise unsupported(op, model, "input and output quantization differ")
    return Kernel(op, "", "", [], 0, f"{op.opcode}: {x.describe()} -> {y.describe()} (alias, no code)",
                  alias=True)
