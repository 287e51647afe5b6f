"""PAD and PADV2 (constant padding): firmware/core/kernels/pad.c, TFLM's pad.cc
(reference_ops::Pad, PadImageStyle).

- float32, int8, int16, int32 (TFLM's types), up to 5-D (TFLM's limit), constant paddings
  (int32/int64, non-negative: TFLM checks output = input + before + after);
- PAD pads with 0 (int8: the output zero point, i.e. real 0); PADV2 with its constant value
  input (int8: TFLM requires its quantization to be the output's, and so do we);
- int8/int16 input and output share one quantization (bytes are copied, never rescaled).
"""
from __future__ import annotations

import numpy as np

from ...core.errors import ModelError

from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, const_int_input, copy_io, dims_c, per_tensor, u16, unsupported

SUPPORTED = ("PAD/PADV2 float32, int8, int16, int32 (constant paddings, up to 5-D)",)
KERNEL_HEADERS = ()
OP_HEADERS = ("pad.h",)
_DTYPES = ("float32", "int8", "int16", "int32")


def _pad_value_bits(op, model, x, y) -> tuple[int, str]:
    """The pad element's bits (as the kernel's uint32_t) and its description."""
    if op.opcode == "PAD" or len(op.inputs) < 3 or op.inputs[2] < 0:
        if op.opcode == "PADV2" and (len(op.inputs) < 3 or op.inputs[2] < 0):
            raise unsupported(op, model, "PADV2 without a constant value input")
        v = y.zero_point if x.dtype == "int8" else 0
        return int(np.array(v, x.dtype).view({1: np.uint8, 2: np.uint16, 4: np.uint32}[x.itemsize])), str(v)
    c = model.tensors[op.inputs[2]]
    if not c.is_constant:
        raise unsupported(op, model, f"constant value '{c.name}' is not a constant")
    if c.dtype != x.dtype or c.size != 1:
        raise unsupported(op, model, f"constant value '{c.name}' must be one {x.dtype} element")
    if x.dtype == "int8":
        per_tensor(c, op, model, "constant value")
        if (float(c.scale), c.zero_point) != (float(y.scale), y.zero_point):
            raise unsupported(op, model, "int8 constant value and output quantizations differ "
                                         "(TFLM requires them equal)")
    v = np.asarray(c.data).reshape(1)
    bits = int(v.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[x.itemsize])[0])
    return bits, repr(v[0].item())


def lower_pad(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    if len(op.inputs) not in (2, 3):
        raise unsupported(op, model, "expected an input, paddings and an optional constant value")
    x, y = copy_io(op, model, _DTYPES)
    rank = len(x.shape)
    if not 1 <= rank <= 5:
        raise unsupported(op, model, f"{rank}-D input; TFLM's PAD handles 1 to 5 dimensions")
    pads = const_int_input(op, model, 1, "paddings")
    if pads.size != 2 * rank:
        raise ModelError(f"op {op.index} {op.opcode}: paddings has {pads.size} values for a "
                         f"{rank}-D input")
    pads = pads.reshape(rank, 2)
    if (pads < 0).any():
        raise unsupported(op, model, f"negative paddings {pads.tolist()}")
    want = [int(d + a + b) for d, (a, b) in zip(x.shape, pads)]
    if want != list(y.shape):
        raise ModelError(f"op {op.index} {op.opcode}: input {list(x.shape)} padded by "
                         f"{pads.tolist()} is {want}, the output is {list(y.shape)}")
    for d in x.shape:
        u16(op, model, "input dimension", max(int(d), 1))
    bits, vdesc = _pad_value_bits(op, model, x, y)
    strides = [int(np.prod(y.shape[d + 1:], dtype=np.int64)) for d in range(rank)]
    base = sum(int(pads[d, 0]) * strides[d] for d in range(rank))
    fill = lambda v, n=5: list(v) + [0] * (n - len(v))  # noqa: E731
    params = (f"static const qe_pad_params_t {pname} = {{\n"
              f"    .out_size = {y.size}u,\n    .base = {base}u,\n    .row = {x.shape[-1]}u,\n"
              f"    .out_strides = {dims_c(fill(strides))},\n    .in_dims = {dims_c(fill(x.shape))},\n"
              f"    .ndims = {rank}u,\n    .elem_size = {x.itemsize}u,\n    .value = {bits}u,\n}};\n")
    call = f"qe_pad(&{pname}, @T{x.index}@, @T{y.index}@);"
    what = (f"{op.opcode} {x.dtype}: {x.describe()} -> {y.describe()}, paddings "
            f"{pads.tolist()}, value {vdesc}")
    return Kernel(op, call, params, [], 0, what, headers=OP_HEADERS)
