"""CONV_2D and DEPTHWISE_CONV_2D: firmware/core/kernels/conv.c and depthwise_conv.c, TFLM's
conv.cc and depthwise_conv.cc (reference_integer_ops::ConvPerChannel /
DepthwiseConvPerChannel for int8, reference_ops::Conv / DepthwiseConv for float32).

One lowering for both: they differ only in the filter layout ([out_c][k_h][k_w][in_c] vs
[1][k_h][k_w][out_c], out_c = in_c * depth_multiplier) and in what a tap sums over.

- int8 with per-channel or per-tensor symmetric filters (zero point 0) and int32 bias; the
  int32 accumulator must not be able to overflow;
- CONV_2D int16x8: int16 activations (zero point 0), int8 symmetric filters, int64 bias, the
  int64 accumulator and the 64-bit MultiplyByQuantizedMultiplier (TFLM's ConvPerChannel for
  int16 input); an int32 bias is refused by name;
- float32 (float32 input with int8 filters, a hybrid model, is refused);
- NHWC, any stride and dilation, SAME/VALID padding (quarl_edge/converters/ops/common.py: window),
  fused NONE/RELU/RELU6/RELU_N1_TO_1, optional bias; constant filter and bias;
- CONV_2D without groups (the filter depth is the input depth); DEPTHWISE_CONV_2D with any depth
  multiplier (the option, when set, must agree with the shapes).

The lowering goes in TFLM's steps: conv_operands (the shape checks and the window),
int8_stage (the int8 Prepare: filter quantization, accumulator range, per-channel
multipliers), then the kernel's constants and parameters. The cortex-m-dsp variant's filter
layouts start from the same steps: quarl_edge/converters/ops/optimized/cortex_m_dsp/conv.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ...core.errors import ModelError

from .. import qmath
from ..emit import c_array, c_comment, c_float, c_float_limit, c_ident, c_int64
from ..tflite_model import Operator, Tensor, TFLiteModel
from .common import (Kernel, bias_array, opt, per_tensor, unsupported,
                     weight_quantization, weighted_operands, window, window_c)

SUPPORTED = ("CONV_2D/DEPTHWISE_CONV_2D int8 (per-channel or per-tensor symmetric weights) and float32",
             "CONV_2D int16x8")
KERNEL_HEADERS = ("conv.h", "depthwise_conv.h")


@dataclass(frozen=True)
class ConvOperands:
    """A CONV_2D / DEPTHWISE_CONV_2D whose shapes conv_operands has checked."""
    depthwise: bool
    x: Tensor
    w: Tensor
    bias: Tensor | None
    out: Tensor
    act: str
    g: dict         # the window (ops/common.py: window)
    dm: int         # the depth multiplier (1 for CONV_2D)
    qdim: int       # the filter's quantized dimension: its output channels
    wname: str      # the filter's C name
    comment: str    # the op, as the generated C's comment describes it

    @property
    def oc(self) -> int:
        return self.g["out_c"]

    @property
    def taps(self) -> int:
        """Products per output value."""
        return self.g["k_h"] * self.g["k_w"] * (1 if self.depthwise else self.g["in_c"])


class Int8Stage(NamedTuple):
    """The int8 output stage of int8_stage: one multiplier and shift per output channel."""
    n_ch: int       # filter scales: 1 (per tensor) or out_c (per channel)
    mults: list
    shifts: list
    act_min: int
    act_max: int


def lower_conv(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """CONV_2D and DEPTHWISE_CONV_2D: int8 (per-channel or per-tensor symmetric weights, int32
    bias) as TFLM's ConvPerChannel / DepthwiseConvPerChannel, int16x8 CONV_2D, and float32."""
    c = conv_operands(op, model)
    if c.x.dtype == "float32":
        return _lower_conv_f32(op, model, pname, c)
    if c.x.dtype == "int16" and not c.depthwise:
        return _lower_conv_s16(op, model, pname, c.x, c.w, c.bias, c.out, c.act, c.g, c.oc,
                               c.comment, c.wname)
    return conv_s8_kernel(op, pname, c, int8_stage(op, model, c))


def conv_operands(op: Operator, model: TFLiteModel) -> ConvOperands:
    """The shape checks of both ops (constant filter and bias, the filter's layout, the window,
    the depth multiplier, no groups), refused by name; the checked operands."""
    depthwise = op.opcode == "DEPTHWISE_CONV_2D"
    x, w, bias, out, act = weighted_operands(op, model, "filter")
    if not w.is_constant or (bias is not None and not bias.is_constant):
        raise unsupported(op, model, "the filter and bias must be constant")
    if x.is_constant:
        raise unsupported(op, model, f"input '{x.name}' is a constant")
    if x.dtype != out.dtype:
        raise unsupported(op, model, f"input {x.dtype}, output {out.dtype}")
    if x.dtype == "float32" and w.dtype in ("int8", "uint8", "int4"):
        raise unsupported(op, model, "float32 input with int8 weights is a hybrid (dynamic-range "
                                     "quantized) model; use full int8 or float32")
    if len(w.shape) != 4:
        raise unsupported(op, model, f"filter of shape {list(w.shape)}, expected 4-D")
    if depthwise:
        one, k_h, k_w, oc = w.shape
        ic = x.shape[3] if len(x.shape) == 4 else 0
        if one != 1 or ic == 0 or oc % ic:
            raise unsupported(op, model, f"depthwise filter {list(w.shape)} for input {list(x.shape)}")
        dm = oc // ic
        opt_dm = int(opt(op, "depthMultiplier", 0))
        if opt_dm not in (0, dm):
            raise unsupported(op, model, f"depth_multiplier option {opt_dm}, but the shapes give {dm}")
        g, desc = window(op, model, x, out, k_h, k_w, dm)
        qdim = 3
    else:
        oc, k_h, k_w, fic = w.shape
        g, desc = window(op, model, x, out, k_h, k_w)
        if fic != g["in_c"]:
            raise unsupported(op, model, f"grouped convolution (filter depth {fic}, input depth "
                                         f"{g['in_c']})")
        dm = 1
        qdim = 0
    if g["out_c"] != oc:
        raise ModelError(f"op {op.index} {op.opcode}: output depth {g['out_c']}, filter gives {oc}")
    if bias is not None and bias.size != oc:
        raise ModelError(f"op {op.index} {op.opcode}: bias has {bias.size} values, expected {oc}")
    kind = "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D"
    comment = (f"{kind} {x.dtype}: {x.describe()} * {w.describe()}"
               + (f" + {bias.describe()}" if bias is not None else "")
               + f" -> {out.describe()}; {desc}" + (f", depth multiplier {dm}" if depthwise else "")
               + f", {act}")
    return ConvOperands(depthwise, x, w, bias, out, act, g, dm, qdim,
                        c_ident(w.name, f"w{w.index}_"), comment)


def int8_stage(op: Operator, model: TFLiteModel, c: ConvOperands) -> Int8Stage:
    """TFLM's int8 Prepare: int8 input, output and symmetric filter, int32 bias, an accumulator
    that cannot overflow int32, QuantizeMultiplier per output channel, the fused activation's
    range. Any other integer type is refused here."""
    x, w, bias, out = c.x, c.w, c.bias, c.out
    if x.dtype != "int8":
        kind = "DEPTHWISE_CONV_2D" if c.depthwise else "CONV_2D"
        raise unsupported(op, model, f"{x.dtype} {kind}; supported: int8 and float32"
                                     + ("" if c.depthwise else ", int16x8"))
    if w.dtype != "int8":
        raise unsupported(op, model, f"int8 input with {w.dtype} filter")
    for t, what in ((x, "input"), (out, "output")):
        per_tensor(t, op, model, what)
    wq = weight_quantization(op, model, w, "filter", c.oc, c.qdim)
    if np.any(wq.zero_point != 0):
        raise unsupported(op, model, f"filter '{w.name}' is not symmetric (zero point "
                                     f"{int(wq.zero_point[0])}); TFLM's int8 kernels need 0")
    if bias is not None and bias.dtype != "int32":
        raise unsupported(op, model, f"bias '{bias.name}' is {bias.dtype}, expected int32")
    worst = c.taps * 128 * (128 + abs(x.zero_point)) + (
        int(np.abs(bias.data.astype(np.int64)).max()) if bias is not None else 0)
    if worst > qmath.INT32_MAX:
        raise unsupported(op, model, f"the int32 accumulator could overflow ({c.taps} taps)")
    mults, shifts = channel_multipliers(op, model, x, wq, out, c.oc, max_shift=30)
    act_min, act_max = qmath.activation_range_quantized(c.act, out.scale, out.zero_point)
    return Int8Stage(len(wq.scale), mults, shifts, act_min, act_max)


def conv_s8_kernel(op: Operator, pname: str, c: ConvOperands, s: Int8Stage) -> Kernel:
    """The reference int8 kernel: qe_conv_s8 / qe_depthwise_conv_s8 on the TFLite filter."""
    consts, bname, bias_bytes, params = per_channel_conv(
        pname, c.w, c.wname, s.n_ch, s.mults, s.shifts, c.bias, "int32_t", str, c.g,
        -c.x.zero_point, c.out.zero_point, s.act_min, s.act_max)
    fn = "qe_depthwise_conv" if c.depthwise else "qe_conv"
    call = (f"{fn}_s8(&{pname}, (const int8_t *)@T{c.x.index}@, {c.wname}, {bname}, "
            f"(int8_t *)@T{c.out.index}@);")
    return Kernel(op, call, params, consts, c.w.size + 5 * c.oc + bias_bytes, c.comment)


def _lower_conv_f32(op: Operator, model: TFLiteModel, pname: str, c: ConvOperands) -> Kernel:
    """float32: TFLM's reference_ops::Conv / DepthwiseConv."""
    x, w, bias, out, wname = c.x, c.w, c.bias, c.out, c.wname
    if w.dtype != "float32" or (bias is not None and bias.dtype != "float32"):
        raise unsupported(op, model, f"float32 input with {w.dtype} filter")
    lo, hi = qmath.activation_range_float(c.act)
    consts = [f"/* {c_comment(w.describe())} */\n" + c_array("float", wname, w.data, 6, c_float)]
    bname, bias_bytes = bias_array(bias, "float", c_float, 6, consts)
    params = (f"static const qe_conv_f32_params_t {pname} = {{\n" + window_c(c.g)
              + f"    .activation_min = {c_float_limit(lo)},\n"
              f"    .activation_max = {c_float_limit(hi)},\n}};\n")
    fn = "qe_depthwise_conv" if c.depthwise else "qe_conv"
    call = (f"{fn}_f32(&{pname}, (const float *)@T{x.index}@, {wname}, {bname}, "
            f"(float *)@T{out.index}@);")
    return Kernel(op, call, params, consts, 4 * w.size + bias_bytes, c.comment)


def channel_multipliers(op, model, x, wq, out, oc: int, max_shift: int):
    """QuantizeMultiplier of input scale x filter scale / output scale per output channel (one
    filter scale serves all for per-tensor filters); shifts beyond [-31, max_shift] refused."""
    n_ch = len(wq.scale)
    mults, shifts = [], []
    for c in range(oc):
        real = qmath.effective_scale(x.scale, float(wq.scale[c if n_ch > 1 else 0]), out.scale)
        m, sh = qmath.quantize_multiplier(real)
        if not -31 <= sh <= max_shift:
            raise unsupported(op, model, f"requantization scale {real:g} is out of range")
        mults.append(m)
        shifts.append(sh)
    return mults, shifts


def per_channel_conv(pname, w, wname, n_ch, mults, shifts, bias, bias_ctype, bias_fmt, g,
                      input_offset, output_offset, act_min, act_max):
    """The constants (filter, multipliers, shifts, bias) and the qe_conv_s8_params_t of an
    integer CONV_2D / DEPTHWISE_CONV_2D: (consts, bias name, bias bytes, params)."""
    consts = [f"/* {c_comment(w.describe())}, {n_ch} scale(s) */\n"
              + c_array("int8_t", wname, w.data, 16, lambda v: str(int(v))),
              c_array("int32_t", f"{pname}_mult", mults, 6, str),
              c_array("int8_t", f"{pname}_shift", shifts, 16, str)]
    bname, bias_bytes = bias_array(bias, bias_ctype, bias_fmt, 6, consts)
    params = (f"static const qe_conv_s8_params_t {pname} = {{\n" + window_c(g)
              + f"    .input_offset = {input_offset},\n    .output_offset = {output_offset},\n"
              f"    .activation_min = {act_min},\n    .activation_max = {act_max},\n"
              f"    .multipliers = {pname}_mult,\n    .shifts = {pname}_shift,\n}};\n")
    return consts, bname, bias_bytes, params


def _lower_conv_s16(op, model, pname, x, w, bias, out, act, g, oc, comment, wname) -> Kernel:
    """int16x8 CONV_2D: qe_conv_s16, the int8 kernel's parameters with zero offsets."""
    if w.dtype != "int8":
        raise unsupported(op, model, f"int16 input with {w.dtype} filter")
    for t, what in ((x, "input"), (out, "output")):
        per_tensor(t, op, model, what)
        if t.zero_point != 0:
            raise unsupported(op, model, f"int16 {what} '{t.name}' has zero point {t.zero_point}; "
                                         "TFLM's int16 kernels need 0")
    wq = weight_quantization(op, model, w, "filter", oc, 0)
    n_ch = len(wq.scale)
    if np.any(wq.zero_point != 0):
        raise unsupported(op, model, f"filter '{w.name}' is not symmetric")
    if bias is not None and bias.dtype != "int64":
        raise unsupported(op, model, f"int16x8 CONV_2D with {bias.dtype} bias '{bias.name}'; "
                                     "supported: int64 (the converter's int16x8 bias)")
    taps = g["k_h"] * g["k_w"] * g["in_c"]
    worst = taps * 128 * 32768 + (int(np.abs(bias.data.astype(np.int64)).max())
                                  if bias is not None else 0)
    if worst > (1 << 47) - 1:
        raise unsupported(op, model, f"the int64 accumulator could leave 48 bits ({taps} taps)")
    mults, shifts = channel_multipliers(op, model, x, wq, out, oc, max_shift=7)
    act_min, act_max = qmath.activation_range_quantized(act, out.scale, 0, -32768, 32767)
    consts, bname, bias_bytes, params = per_channel_conv(
        pname, w, wname, n_ch, mults, shifts, bias, "int64_t", c_int64, g, 0, 0, act_min, act_max)
    call = (f"qe_conv_s16(&{pname}, (const int16_t *)@T{x.index}@, {wname}, {bname}, "
            f"(int16_t *)@T{out.index}@);")
    return Kernel(op, call, params, consts, w.size + 5 * oc + bias_bytes,
                  comment.replace("CONV_2D int16:", "CONV_2D int16x8:"))
