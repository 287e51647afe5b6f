"""TRANSPOSE: firmware/core/kernels/transpose.c, TFLM's transpose.cc (reference_ops::Transpose).

- float32, int8, int16 (TFLM's types), 1 to 5 dimensions (TFLM's limit), a constant
  permutation (int32/int64, a permutation of 0..rank-1);
- int8/int16 input and output share one quantization (bytes are copied, never rescaled).
"""
from __future__ import annotations

import numpy as np

from ...core.errors import ModelError

from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, const_int_input, copy_io, dims_c, u16, unsupported

SUPPORTED = ("TRANSPOSE float32, int8, int16 (up to 5-D)",)
KERNEL_HEADERS = ()
OP_HEADERS = ("transpose.h",)


def lower_transpose(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    if len(op.inputs) != 2:
        raise unsupported(op, model, "expected an input and a permutation")
    x, y = copy_io(op, model, ("float32", "int8", "int16"))
    rank = len(x.shape)
    if not 1 <= rank <= 5:
        raise unsupported(op, model, f"{rank}-D input; TFLM's TRANSPOSE handles 1 to 5 dimensions")
    perm = [int(v) for v in const_int_input(op, model, 1, "permutation")]
    if sorted(perm) != list(range(rank)):
        raise unsupported(op, model, f"permutation {perm} is not a permutation of 0..{rank - 1}")
    want = [int(x.shape[p]) for p in perm]
    if want != list(y.shape):
        raise ModelError(f"op {op.index} TRANSPOSE: input {list(x.shape)} permuted by {perm} is "
                         f"{want}, the output is {list(y.shape)}")
    for d in y.shape:
        u16(op, model, "output dimension", max(int(d), 1))
    in_strides = [int(np.prod(x.shape[d + 1:], dtype=np.int64)) for d in range(rank)]
    strides = [in_strides[p] for p in perm]
    fill = lambda v: list(v) + [0] * (5 - len(v))  # noqa: E731
    params = (f"static const qe_transpose_params_t {pname} = {{\n    .size = {y.size}u,\n"
              f"    .in_strides = {dims_c(fill(strides))},\n    .out_dims = {dims_c(fill(y.shape))},\n"
              f"    .ndims = {rank}u,\n    .elem_size = {x.itemsize}u,\n}};\n")
    call = f"qe_transpose(&{pname}, @T{x.index}@, @T{y.index}@);"
    what = f"TRANSPOSE {x.dtype}: {x.describe()} -> {y.describe()}, perm {perm}"
    return Kernel(op, call, params, [], 0, what, headers=OP_HEADERS)
