"""FULLY_CONNECTED with int4 weights: firmware/core/kernels/fully_connected_s4.c.

TFLite's INT4 tensors hold two weights per byte (element e in byte e // 2, the low nibble for
even e); the reader keeps such a buffer as its raw bytes, and this lowering checks its size
against the shape and emits it as it is: the generated C holds the packed weights in flash
(half the bytes of int8) and the kernel unpacks them one by one. TF Lite Micro unpacks them to
int8 at Prepare and runs its int8 FullyConnected, so the arithmetic is that of
qe_fully_connected_s8 (the same parameters): int8 input and output per tensor, int4 weights per
tensor (TFLM's FULLY_CONNECTED refuses per-channel int4), int32 bias.
"""
from __future__ import annotations

import numpy as np

from ...core.errors import ModelError

from .. import qmath
from ..emit import c_array, c_comment
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, activation_tensor, bias_array, per_tensor, unsupported

KERNEL_HEADER = "fully_connected_s4.h"


def packed_int4(op: Operator, w, what: str) -> np.ndarray:
    """The raw bytes of an INT4 constant, checked to hold exactly its shape's packed size."""
    raw = np.asarray(w.data, dtype=np.uint8).ravel()
    want = (w.size + 1) // 2
    if raw.size != want:
        raise ModelError(f"op {op.index} {op.opcode}: int4 {what} '{w.name}' {list(w.shape)} "
                         f"needs {want} packed bytes, its buffer holds {raw.size}")
    return raw


def unpack_int4(raw: np.ndarray, n: int) -> np.ndarray:
    """TFLite's packing undone: n int4 values (int8), low nibble first."""
    pairs = np.stack([raw & 15, raw >> 4], axis=-1).ravel()[:n].astype(np.int16)
    return ((pairs ^ 8) - 8).astype(np.int8)


def offset_int4_rows(w: np.ndarray, bias: np.ndarray | None, input_offset: int,
                     filter_offset: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """What the kernel variants' int4 layouts store of int4 weights [rows][depth] (integers):
    w' = w + filter_offset and bias' = bias + input_offset * sum_d w' (both offsets folded at
    generation time), rows zero-padded to a multiple of `group` (int64 arrays [rows'][depth] and
    [rows']). Raises ValueError when some w' is no int4 (the variant then takes the reference)."""
    rows, depth = w.shape
    wp = w.astype(np.int64) + filter_offset
    if wp.size and (wp.min() < -8 or wp.max() > 7):
        raise ValueError("weights + filter_offset outside int4")
    b = (np.zeros(rows, np.int64) if bias is None else bias.astype(np.int64)) \
        + input_offset * wp.sum(axis=1)
    r_pad = -(-rows // group) * group
    full = np.zeros((r_pad, depth), np.int64)
    full[:rows] = wp
    bias_p = np.zeros(r_pad, np.int64)
    bias_p[:rows] = b
    assert np.abs(bias_p).max(initial=0) <= qmath.INT32_MAX
    return full, bias_p


def int4_reference_bytes(w, bias) -> int:
    """The flash the reference lowering gives this op's constants: the packed int4 weights (two
    a byte) and the int32 bias; a variant's layout reports its bytes beyond these."""
    return (w.size + 1) // 2 + (4 * bias.size if bias is not None else 0)


def lower_fc_s4(op, model: TFLiteModel, pname, x, w, bias, out, act, batches, accum_depth,
                output_depth, wname, comment_shapes) -> Kernel:
    """int8 input and output, packed int4 weights per tensor (see the module's docstring)."""
    activation_tensor(op, model, x.index, "int8", "input")
    activation_tensor(op, model, out.index, "int8", "output")
    for t, what in ((x, "input"), (w, "weights"), (out, "output")):
        if t is w and t.quantization is not None and t.quantization.per_channel:
            raise unsupported(op, model, f"int4 weights '{w.name}' are quantized per channel; "
                                         f"TF Lite Micro's FULLY_CONNECTED runs int4 weights per "
                                         f"tensor only")
        per_tensor(t, op, model, what)
    raw = packed_int4(op, w, "weights")
    if bias is not None and (bias.dtype != "int32" or bias.size != output_depth):
        raise unsupported(op, model, f"bias '{bias.name}' {bias.dtype} {list(bias.shape)}, "
                                     f"expected int32 [{output_depth}]")
    if bias is not None:
        product = float(np.float32(x.scale)) * float(np.float32(w.scale))
        if abs(product - bias.scale) / out.scale > 0.02:
            raise ModelError(f"op {op.index} FULLY_CONNECTED: bias scale {bias.scale:g} is "
                             f"not input scale x weight scale ({product:g})")
    worst = (accum_depth * (8 + abs(w.zero_point)) * (128 + abs(x.zero_point))
             + (int(np.abs(bias.data.astype(np.int64)).max()) if bias is not None else 0))
    if worst > qmath.INT32_MAX:
        raise unsupported(op, model, f"the int32 accumulator could overflow "
                                     f"(accum_depth {accum_depth})")
    real = qmath.effective_scale(x.scale, w.scale, out.scale)
    multiplier, shift = qmath.quantize_multiplier(real)
    if not -31 <= shift <= 30:
        raise unsupported(op, model, f"requantization scale {real:g} is out of range")
    act_min, act_max = qmath.activation_range_quantized(act, out.scale, out.zero_point)
    consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g}, packed two per byte "
              f"(low nibble first) */\n"
              + c_array("uint8_t", wname, raw, 16, lambda v: f"0x{int(v):02x}")]
    bname, bias_bytes = bias_array(bias, "int32_t", lambda v: str(int(v)), 8, consts)
    params = (f"static const qe_fc_s8_params_t {pname} = {{\n"
              f"    .input_offset = {-x.zero_point},\n"
              f"    .filter_offset = {-w.zero_point},\n"
              f"    .output_offset = {out.zero_point},\n"
              f"    .output_multiplier = {multiplier},  /* {real:.17g} = m * 2^(shift - 31) */\n"
              f"    .output_shift = {shift},\n"
              f"    .activation_min = {act_min},\n"
              f"    .activation_max = {act_max},\n"
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .output_depth = {output_depth}u,\n}};\n")
    call = (f"qe_fully_connected_s4(&{pname}, (const int8_t *)@T{x.index}@, {wname}, "
            f"{bname}, (int8_t *)@T{out.index}@);")
    return Kernel(op, call, params, consts, raw.size + bias_bytes,
                  "FULLY_CONNECTED int8 x int4 weights: " + comment_shapes,
                  headers=(KERNEL_HEADER,))
