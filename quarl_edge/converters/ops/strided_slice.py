"""STRIDED_SLICE: firmware/core/kernels/strided_slice.c, TFLM's strided_slice.cc
(reference_ops::StridedSlice over the input padded to 5-D).

- float32, int8, int16, int32 (TFLM's numeric types), 1 to 4 dimensions (TFLM's limit);
- constant begin, end and strides (int32, one value per input dimension, strides non-zero);
- begin_mask, end_mask and shrink_axis_mask exactly as TFLM's StridedSliceStartForAxis /
  EndForAxis resolve them (negative indices wrap, then clamp; a shrunk axis takes one
  element); ellipsis_mask, new_axis_mask and `offset` are refused: TFLM's kernel ignores them
  (it zeroes the first two), so its result would not be the model's;
- int8/int16 input and output share one quantization (bytes are copied, never rescaled).
"""
from __future__ import annotations

import numpy as np

from ...core.errors import ModelError

from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, const_int_input, copy_io, dims_c, opt, u16, unsupported

SUPPORTED = ("STRIDED_SLICE float32, int8, int16, int32 (constant begin/end/strides, "
             "begin/end/shrink-axis masks, up to 4-D)",)
KERNEL_HEADERS = ()
OP_HEADERS = ("strided_slice.h",)


def _clamp(v: int, lo: int, hi: int) -> int:
    return hi if hi < v else lo if v < lo else v


def _start(begin: int, stride: int, size: int, masked: bool) -> int:
    """TFLM's StridedSliceStartForAxis."""
    s = begin + size if begin < 0 else begin
    s = _clamp(s, 0, size) if stride > 0 else _clamp(s, -1, size - 1)
    if masked:
        s = 0 if stride > 0 else size - 1
    return s


def _end(end: int, start: int, stride: int, size: int, masked: bool, shrink: bool) -> int:
    """TFLM's StridedSliceEndForAxis (offset false)."""
    if shrink:
        return start if start >= size else start + 1
    e = end + size if end < 0 else end
    e = _clamp(e, 0, size) if stride > 0 else _clamp(e, -1, size - 1)
    if masked:
        e = size if stride > 0 else -1
    return e


def lower_strided_slice(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    if len(op.inputs) != 4:
        raise unsupported(op, model, "expected an input, begin, end and strides")
    x, y = copy_io(op, model, ("float32", "int8", "int16", "int32"))
    rank = len(x.shape)
    if not 1 <= rank <= 4:
        raise unsupported(op, model, f"{rank}-D input; TFLM's STRIDED_SLICE handles 1 to 4 dimensions")
    for key, name in (("ellipsisMask", "ellipsis_mask"), ("newAxisMask", "new_axis_mask")):
        if int(opt(op, key, 0)):
            raise unsupported(op, model, f"{name} {int(opt(op, key, 0))}: TFLM's kernel ignores it")
    if opt(op, "offset", False):
        raise unsupported(op, model, "offset = true: TFLM's kernel ignores it")
    vals = [const_int_input(op, model, k, w) for k, w in ((1, "begin"), (2, "end"), (3, "strides"))]
    if any(v.size != rank for v in vals):
        raise unsupported(op, model, f"begin/end/strides of {[v.size for v in vals]} values for a "
                                     f"{rank}-D input")
    begin, end, strides = ([int(a) for a in v] for v in vals)
    if 0 in strides:
        raise unsupported(op, model, "a stride of 0")
    bm, em, sm = (int(opt(op, k, 0)) for k in ("beginMask", "endMask", "shrinkAxisMask"))
    # TFLM pads to 5-D in front (begin 0, end 1, stride 1, begin and end masked): those axes
    # have size 1 and contribute one step each, so the rank-D walk below is the same walk
    in_strides = [int(np.prod(x.shape[d + 1:], dtype=np.int64)) for d in range(rank)]
    start, counts, steps = 0, [], []
    for d in range(rank):
        size, st = int(x.shape[d]), strides[d]
        s = _start(begin[d], st, size, bool(bm >> d & 1))
        e = _end(end[d], s, st, size, bool(em >> d & 1), bool(sm >> d & 1))
        n = max(0, -(-(e - s) // st)) if st > 0 else max(0, -(-(s - e) // -st))
        counts.append(n)
        steps.append(st * in_strides[d])
        start += s * in_strides[d] if n > 0 else 0
    size = int(np.prod(counts, dtype=np.int64))
    want = [c for d, c in enumerate(counts) if not sm >> d & 1]
    if size != y.size or (size > 0 and want != list(y.shape)):
        raise ModelError(f"op {op.index} STRIDED_SLICE: begin {begin}, end {end}, strides {strides} "
                         f"(masks {bm}/{em}/{sm}) of {list(x.shape)} give {want}, the output is "
                         f"{list(y.shape)}")
    for c in counts:
        u16(op, model, "output dimension", max(c, 1))
    fill = lambda v: list(v) + [0] * (5 - len(v))  # noqa: E731
    params = (f"static const qe_strided_slice_params_t {pname} = {{\n    .size = {size}u,\n"
              f"    .start = {start if size else 0}u,\n    .steps = {dims_c(fill(steps), '')},\n"
              f"    .counts = {dims_c(fill(counts))},\n    .ndims = {rank}u,\n"
              f"    .elem_size = {x.itemsize}u,\n}};\n")
    call = f"qe_strided_slice(&{pname}, @T{x.index}@, @T{y.index}@);"
    what = (f"STRIDED_SLICE {x.dtype}: {x.describe()} -> {y.describe()}, begin {begin}, end {end}, "
            f"strides {strides}, masks begin {bm} end {em} shrink {sm}")
    return Kernel(op, call, params, [], 0, what, headers=OP_HEADERS)
