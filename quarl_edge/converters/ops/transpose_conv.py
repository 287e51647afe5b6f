"""TRANSPOSE_CONV: firmware/core/kernels/transpose_conv.c, TFLM's transpose_conv.cc
(reference_ops::TransposeConv for float32, reference_integer_ops::TransposeConv for int8 and
int16x8).

TFLM's operands: 0 the output shape (int32 [4]), 1 the filter [out_c][k_h][k_w][in_c], 2 the
input, 3 the optional bias; one output.

- float32; int8 with per-channel (along the filter's dimension 0) or per-tensor symmetric
  filters and int32 bias; int16x8: int16 activations (zero point 0), int8 symmetric filters,
  int64 bias (an int16 bias, which TFLM widens, is refused by name);
- NHWC, any stride, SAME/VALID padding exactly as TFLM computes it: ComputePaddingHeightWidth
  of the OUTPUT's height and width with the filter and the strides (dilation 1);
- fused NONE/RELU/RELU6/RELU_N1_TO_1, optional bias; constant filter and bias;
- the output shape: TFLM never reads operand 0 (its kernel takes the output tensor's static
  shape), so neither do we. A constant one must equal the output's shape (else the model is
  malformed: the TFLite interpreter would resize the output to it); one that is a graph input
  (tflite-micro's seanet models: input 0, an int32 [4]) is accepted and its values are ignored,
  as TFLM ignores them: they must equal the static output shape for the model to mean what it
  says, and nothing checks that they do;
- int8: the int32 accumulator must not be able to overflow, int16x8: the int64 one must stay
  within 48 bits (the 64-bit MultiplyByQuantizedMultiplier's range);
- the integer kernels accumulate in a scratch buffer of the output's size in int32 (int8) or
  int64 (int16x8), as TFLM's: Kernel.scratch_bytes, planned in the arena for this op only.
"""
from __future__ import annotations

import numpy as np

from ...core.errors import ModelError

from .. import qmath
from ..emit import c_array, c_comment, c_float, c_float_limit, c_ident, c_int64
from ..tflite_model import Operator, TFLiteModel
from .common import (Kernel, bias_array, fused_activation, opt, per_tensor, u16, unsupported,
                     weight_quantization, window_c)
from .conv import channel_multipliers, per_channel_conv

SUPPORTED = ("TRANSPOSE_CONV float32, int8 (per-channel or per-tensor symmetric weights) and "
             "int16x8",)
KERNEL_HEADERS = ()
OP_HEADERS = ("transpose_conv.h",)

_PADDING = {0: "SAME", 1: "VALID"}


def _tflm_padding(padding: str, size: int, k: int, s: int) -> int:
    """TFLM's ComputePaddingHeightWidth along one axis, with the output's size as its image:
    ComputeOutSize (0 where it fails), then ComputePaddingWithOffset's total // 2."""
    if padding == "SAME":
        out = (size + s - 1) // s
    else:
        v = size + s - k
        out = abs(v) // s * (1 if v >= 0 else -1)      # C++ division truncates
        out = max(out, 0)
    return max((out - 1) * s + k - size, 0) // 2


def lower_transpose_conv(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """TRANSPOSE_CONV float32, int8 and int16x8 (the module docstring), in TFLM's steps: the
    operands, the geometry, then per type the parameters and the kernel."""
    x, w, bias, out, act, shape_note = _operands(op, model)
    g, padding = _geometry(op, model, x, w, bias, out)
    comment = (f"TRANSPOSE_CONV {x.dtype}: {x.describe()} * {w.describe()}"
               + (f" + {bias.describe()}" if bias is not None else "")
               + f" -> {out.describe()}; {g['k_h']}x{g['k_w']} filter, stride "
               f"{g['stride_h']}x{g['stride_w']}, {padding} (pad top {g['pad_top']}, left "
               f"{g['pad_left']}), {act}; {shape_note}")
    if x.dtype == "float32":
        return _lower_f32(op, model, pname, x, w, bias, out, act, g, comment)
    return _lower_integer(op, model, pname, x, w, bias, out, act, g, comment)


def _operands(op: Operator, model: TFLiteModel):
    """(input, filter, bias or None, output, fused activation, what the C's comment says of
    the output-shape operand), checked: constant filter and bias, 4-D tensors, the output
    shape a constant equal to the output's or a graph input (the module docstring)."""
    ins = list(op.inputs) + [-1] * (4 - len(op.inputs))
    if not 3 <= len(op.inputs) <= 4 or len(op.outputs) != 1 or min(ins[:3]) < 0:
        raise unsupported(op, model, "expected output shape, filter, input, optional bias and "
                                     "one output")
    shape_t, w, x = (model.tensors[i] for i in ins[:3])
    bias = model.tensors[ins[3]] if ins[3] >= 0 else None
    out = model.tensors[op.outputs[0]]
    act = fused_activation(op, model)
    if not w.is_constant or (bias is not None and not bias.is_constant):
        raise unsupported(op, model, "the filter and bias must be constant")
    if x.is_constant:
        raise unsupported(op, model, f"input '{x.name}' is a constant")
    if x.dtype != out.dtype:
        raise unsupported(op, model, f"input {x.dtype}, output {out.dtype}")
    if len(x.shape) != 4 or len(out.shape) != 4 or len(w.shape) != 4:
        raise unsupported(op, model, f"input {list(x.shape)}, filter {list(w.shape)} and output "
                                     f"{list(out.shape)} must be 4-D (NHWC)")
    if shape_t.dtype != "int32" or list(shape_t.shape) != [4]:
        raise unsupported(op, model, f"output shape '{shape_t.name}' is {shape_t.dtype} "
                                     f"{list(shape_t.shape)}, expected int32 [4]")
    shape_note = "output shape constant"
    if shape_t.is_constant:
        if [int(v) for v in np.asarray(shape_t.data).ravel()] != [int(d) for d in out.shape]:
            raise ModelError(f"op {op.index} {op.opcode}: output shape operand "
                             f"{[int(v) for v in np.asarray(shape_t.data).ravel()]}, but the "
                             f"output tensor is {list(out.shape)}")
    elif shape_t.index in model.inputs:
        shape_note = (f"output shape from graph input '{shape_t.name}', not read (as TFLM): "
                      f"it must be {list(out.shape)}")
    else:
        raise unsupported(op, model, f"output shape '{shape_t.name}' is computed by the graph; "
                                     "supported: a constant or a graph input (TFLM ignores it)")
    return x, w, bias, out, act, shape_note


def _geometry(op: Operator, model: TFLiteModel, x, w, bias, out) -> tuple[dict, str]:
    """The window (ops/common.py: window_c's keys) with TFLM's padding, every field checked to
    fit the kernel's uint16, and the padding's name."""
    padding = _PADDING.get(opt(op, "padding", 0))
    if padding is None:
        raise unsupported(op, model, f"padding type {op.options.get('padding')}")
    sh, sw = int(opt(op, "strideH", 1)), int(opt(op, "strideW", 1))
    if min(sh, sw) < 1:
        raise unsupported(op, model, f"stride {sh}x{sw}")
    n, ih, iw, ic = (int(d) for d in x.shape)
    on, oh, ow, oc = (int(d) for d in out.shape)
    woc, k_h, k_w, wic = (int(d) for d in w.shape)
    if on != n:
        raise ModelError(f"op {op.index} {op.opcode}: input batch {n}, output batch {on}")
    if wic != ic or woc != oc:
        raise ModelError(f"op {op.index} {op.opcode}: filter {list(w.shape)} for input depth "
                         f"{ic} and output depth {oc}")
    if bias is not None and bias.size != oc:
        raise ModelError(f"op {op.index} {op.opcode}: bias has {bias.size} values, expected {oc}")
    pad_top, pad_left = _tflm_padding(padding, oh, k_h, sh), _tflm_padding(padding, ow, k_w, sw)
    g = dict(batches=n, in_h=ih, in_w=iw, in_c=ic, out_h=oh, out_w=ow, out_c=oc, k_h=k_h,
             k_w=k_w, stride_h=sh, stride_w=sw, dil_h=1, dil_w=1, pad_top=pad_top,
             pad_left=pad_left, depth_multiplier=1)
    for key, v in g.items():
        if key.startswith("pad_"):
            if v > 0xFFFF:
                raise unsupported(op, model, f"{key} {v} does not fit uint16")
        else:
            u16(op, model, key, v)
    if n * oh * ow * oc >= 1 << 31:
        raise unsupported(op, model, f"output of {n * oh * ow * oc} values")
    return g, padding


def _lower_f32(op, model, pname, x, w, bias, out, act, g, comment) -> Kernel:
    """float32: reference_ops::TransposeConv."""
    if w.dtype != "float32" or (bias is not None and bias.dtype != "float32"):
        raise unsupported(op, model, f"float32 input with {w.dtype} filter"
                          + (" (a hybrid model; use full int8 or float32)"
                             if w.dtype in ("int8", "uint8", "int4") else ""))
    wname = c_ident(w.name, f"w{w.index}_")
    lo, hi = qmath.activation_range_float(act)
    consts = [f"/* {c_comment(w.describe())} */\n" + c_array("float", wname, w.data, 6, c_float)]
    bname, bias_bytes = bias_array(bias, "float", c_float, 6, consts)
    params = (f"static const qe_conv_f32_params_t {pname} = {{\n" + window_c(g)
              + f"    .activation_min = {c_float_limit(lo)},\n"
              f"    .activation_max = {c_float_limit(hi)},\n}};\n")
    call = (f"qe_transpose_conv_f32(&{pname}, (const float *)@T{x.index}@, {wname}, {bname}, "
            f"(float *)@T{out.index}@);")
    return Kernel(op, call, params, consts, 4 * w.size + bias_bytes, comment,
                  headers=OP_HEADERS)


def _lower_integer(op, model, pname, x, w, bias, out, act, g, comment) -> Kernel:
    """int8 and int16x8: reference_integer_ops::TransposeConv, accumulating in an int32 / int64
    scratch of the output's size."""
    if x.dtype not in ("int8", "int16"):
        raise unsupported(op, model, f"{x.dtype} TRANSPOSE_CONV; supported: float32, int8, "
                                     "int16x8")
    if w.dtype != "int8":
        raise unsupported(op, model, f"{x.dtype} input with {w.dtype} filter")
    for t, what in ((x, "input"), (out, "output")):
        per_tensor(t, op, model, what)
        if x.dtype == "int16" and t.zero_point != 0:
            raise unsupported(op, model, f"int16 {what} '{t.name}' has zero point {t.zero_point}; "
                                         "TFLM's int16 kernels need 0")
    oc = g["out_c"]
    wq = weight_quantization(op, model, w, "filter", oc, 0)
    n_ch = len(wq.scale)
    if np.any(wq.zero_point != 0):
        raise unsupported(op, model, f"filter '{w.name}' is not symmetric (zero point "
                                     f"{int(wq.zero_point[0])}); TFLM's integer kernels need 0")
    # one output value receives at most ceil(k/s) taps per axis, of in_c products each
    taps = -(-g["k_h"] // g["stride_h"]) * -(-g["k_w"] // g["stride_w"]) * g["in_c"]
    out_values = g["batches"] * g["out_h"] * g["out_w"] * oc
    bias_max = int(np.abs(bias.data.astype(np.int64)).max()) if bias is not None else 0
    wname = c_ident(w.name, f"w{w.index}_")
    if x.dtype == "int8":
        if bias is not None and bias.dtype != "int32":
            raise unsupported(op, model, f"int8 TRANSPOSE_CONV with {bias.dtype} bias "
                                         f"'{bias.name}'; supported: int32")
        if taps * 128 * (128 + abs(x.zero_point)) + bias_max > qmath.INT32_MAX:
            raise unsupported(op, model, f"the int32 accumulator could overflow ({taps} taps)")
        mults, shifts = channel_multipliers(op, model, x, wq, out, oc, max_shift=30)
        act_min, act_max = qmath.activation_range_quantized(act, out.scale, out.zero_point)
        consts, bname, bias_bytes, params = per_channel_conv(
            pname, w, wname, n_ch, mults, shifts, bias, "int32_t", str, g, -x.zero_point,
            out.zero_point, act_min, act_max)
        scratch = 4 * out_values
        call = (f"qe_transpose_conv_s8(&{pname}, (const int8_t *)@T{x.index}@, {wname}, {bname}, "
                f"(int8_t *)@T{out.index}@, (int32_t *)@S{op.index}@);")
    else:
        if bias is not None and bias.dtype != "int64":
            raise unsupported(op, model, f"int16x8 TRANSPOSE_CONV with {bias.dtype} bias "
                                         f"'{bias.name}'; supported: int64 (the converter's "
                                         "int16x8 bias)")
        if taps * 128 * 32768 + bias_max > (1 << 47) - 1:
            raise unsupported(op, model, f"the int64 accumulator could leave 48 bits ({taps} taps)")
        mults, shifts = channel_multipliers(op, model, x, wq, out, oc, max_shift=7)
        act_min, act_max = qmath.activation_range_quantized(act, out.scale, 0, -32768, 32767)
        consts, bname, bias_bytes, params = per_channel_conv(
            pname, w, wname, n_ch, mults, shifts, bias, "int64_t", c_int64, g, 0, 0, act_min,
            act_max)
        scratch = 8 * out_values
        comment = comment.replace("TRANSPOSE_CONV int16:", "TRANSPOSE_CONV int16x8:")
        call = (f"qe_transpose_conv_s16(&{pname}, (const int16_t *)@T{x.index}@, {wname}, "
                f"{bname}, (int16_t *)@T{out.index}@, (int64_t *)@S{op.index}@);")
    return Kernel(op, call, params, consts, w.size + 5 * oc + bias_bytes,
                  comment + f"; {scratch} B of scratch", headers=OP_HEADERS,
                  scratch_bytes=scratch)
