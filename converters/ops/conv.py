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
- NHWC, any stride and dilation, SAME/VALID padding (converters/ops/common.py: window),
  fused NONE/RELU/RELU6/RELU_N1_TO_1, optional bias; constant filter and bias;
- CONV_2D without groups (the filter depth is the input depth); DEPTHWISE_CONV_2D with any depth
  multiplier (the option, when set, must agree with the shapes).
"""
from __future__ import annotations

import numpy as np

from quarl_edge.errors import ModelError

from .. import qmath
from ..emit import c_array, c_comment, c_float, c_float_limit, c_ident, c_int64
from ..tflite_model import Operator, TFLiteModel
from .fully_connected import dsp_mm_stage, pack_fc_weights
from .common import (Kernel, bias_array, opt, per_tensor, unsupported,
                     weight_quantization, weighted_operands, window, window_c)

SUPPORTED = ("CONV_2D/DEPTHWISE_CONV_2D int8 (per-channel or per-tensor symmetric weights) and float32",
             "CONV_2D int16x8")
KERNEL_HEADERS = ("conv.h", "depthwise_conv.h")


def lower_conv_pointwise_as_fc(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """lower_conv, with an int8 1x1 / stride 1 / unpadded CONV_2D as a per-channel
    FULLY_CONNECTED (the module docstring); for the boards with an optimized kernel variant."""
    return lower_conv(op, model, pname, pointwise_as_fc=True)


def lower_conv_packed(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """For the cortex-m-dsp variant: an int8 CONV_2D on a widened image (conv.h,
    qe_conv_s8_wide_params_t) where its scratch fits WIDE_SCRATCH_MAX and a window row
    WIDE_MAX_ROW_WORDS, except a 1x1 / stride 1 / unpadded one whose depth is a multiple of 4
    (it needs no image: the pixel is its column); those, and the others whose padded depth is at
    most PACKED_MAX_DEPTH, the packed filter (conv.h, qe_conv_s8_packed_params_t; faster than the
    per-channel FULLY_CONNECTED the 1x1 one was routed to); an int8
    DEPTHWISE_CONV_2D with depth multiplier 1 whose widened image fits DW_SCRATCH_MAX the
    pre-widened filter (depthwise_conv.h, qe_dw_s8_packed_params_t); every other op
    lower_conv_pointwise_as_fc."""
    return lower_conv(op, model, pname, pointwise_as_fc=True, packed=True)


def lower_conv(op: Operator, model: TFLiteModel, pname: str, pointwise_as_fc: bool = False,
               packed: bool = False) -> Kernel:
    """CONV_2D and DEPTHWISE_CONV_2D: int8 (per-channel or per-tensor symmetric weights, int32
    bias) as TFLM's ConvPerChannel / DepthwiseConvPerChannel, and float32."""
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
    fn = "qe_depthwise_conv" if depthwise else "qe_conv"
    wname = c_ident(w.name, f"w{w.index}_")
    comment = (f"{kind} {x.dtype}: {x.describe()} * {w.describe()}"
               + (f" + {bias.describe()}" if bias is not None else "")
               + f" -> {out.describe()}; {desc}" + (f", depth multiplier {dm}" if depthwise else "")
               + f", {act}")

    if x.dtype == "float32":
        if w.dtype != "float32" or (bias is not None and bias.dtype != "float32"):
            raise unsupported(op, model, f"float32 input with {w.dtype} filter")
        lo, hi = qmath.activation_range_float(act)
        consts = [f"/* {c_comment(w.describe())} */\n" + c_array("float", wname, w.data, 6, c_float)]
        bname, bias_bytes = bias_array(bias, "float", c_float, 6, consts)
        params = (f"static const qe_conv_f32_params_t {pname} = {{\n" + window_c(g)
                  + f"    .activation_min = {c_float_limit(lo)},\n"
                  f"    .activation_max = {c_float_limit(hi)},\n}};\n")
        call = (f"{fn}_f32(&{pname}, (const float *)@T{x.index}@, {wname}, {bname}, "
                f"(float *)@T{out.index}@);")
        return Kernel(op, call, params, consts, 4 * w.size + bias_bytes, comment)

    if x.dtype == "int16" and not depthwise:
        return _lower_conv_s16(op, model, pname, x, w, bias, out, act, g, oc, comment, wname)
    if x.dtype != "int8":
        raise unsupported(op, model, f"{x.dtype} {kind}; supported: int8 and float32"
                                     + ("" if depthwise else ", int16x8"))
    if w.dtype != "int8":
        raise unsupported(op, model, f"int8 input with {w.dtype} filter")
    for t, what in ((x, "input"), (out, "output")):
        per_tensor(t, op, model, what)
    wq = weight_quantization(op, model, w, "filter", oc, qdim)
    n_ch = len(wq.scale)
    if np.any(wq.zero_point != 0):
        raise unsupported(op, model, f"filter '{w.name}' is not symmetric (zero point "
                                     f"{int(wq.zero_point[0])}); TFLM's int8 kernels need 0")
    if bias is not None and bias.dtype != "int32":
        raise unsupported(op, model, f"bias '{bias.name}' is {bias.dtype}, expected int32")
    taps = k_h * k_w * (1 if depthwise else g["in_c"])
    worst = taps * 128 * (128 + abs(x.zero_point)) + (
        int(np.abs(bias.data.astype(np.int64)).max()) if bias is not None else 0)
    if worst > qmath.INT32_MAX:
        raise unsupported(op, model, f"the int32 accumulator could overflow ({taps} taps)")
    mults, shifts = _channel_multipliers(op, model, x, wq, out, oc, max_shift=30)
    act_min, act_max = qmath.activation_range_quantized(act, out.scale, out.zero_point)
    if packed and depthwise and dm == 1:
        kernel = _packed_depthwise(op, pname, x, w, bias, out, g, comment, wname, n_ch, mults,
                                   shifts, act_min, act_max)
        if kernel is not None:
            return kernel
    if packed and not depthwise and not _direct_pointwise(g, taps):
        kernel = _wide_conv(op, pname, x, w, bias, out, g, comment, wname, n_ch, mults, shifts,
                            act_min, act_max)
        if kernel is not None:
            return kernel
    if packed and not depthwise and -(-taps // 4) * 4 <= PACKED_MAX_DEPTH:
        return _packed_conv(op, pname, x, w, bias, out, g, comment, wname, n_ch, mults, shifts,
                            act_min, act_max)
    rows = g["batches"] * g["out_h"] * g["out_w"]
    if (pointwise_as_fc and not depthwise and k_h == k_w == 1 and g["stride_h"] == g["stride_w"] == 1
            and g["pad_top"] == g["pad_left"] == 0 and rows <= 0xFFFF):
        return _pointwise_fc(op, pname, x, w, bias, out, g, comment, wname, n_ch, mults, shifts,
                             act_min, act_max, rows)
    consts, bname, bias_bytes, params = _per_channel_conv(
        pname, w, wname, n_ch, mults, shifts, bias, "int32_t", str, g, -x.zero_point,
        out.zero_point, act_min, act_max)
    call = (f"{fn}_s8(&{pname}, (const int8_t *)@T{x.index}@, {wname}, {bname}, "
            f"(int8_t *)@T{out.index}@);")
    return Kernel(op, call, params, consts, w.size + 5 * oc + bias_bytes, comment)


def _channel_multipliers(op, model, x, wq, out, oc: int, max_shift: int):
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


def _per_channel_conv(pname, w, wname, n_ch, mults, shifts, bias, bias_ctype, bias_fmt, g,
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
    mults, shifts = _channel_multipliers(op, model, x, wq, out, oc, max_shift=7)
    act_min, act_max = qmath.activation_range_quantized(act, out.scale, 0, -32768, 32767)
    consts, bname, bias_bytes, params = _per_channel_conv(
        pname, w, wname, n_ch, mults, shifts, bias, "int64_t", c_int64, g, 0, 0, act_min, act_max)
    call = (f"qe_conv_s16(&{pname}, (const int16_t *)@T{x.index}@, {wname}, {bname}, "
            f"(int16_t *)@T{out.index}@);")
    return Kernel(op, call, params, consts, w.size + 5 * oc + bias_bytes,
                  comment.replace("CONV_2D int16:", "CONV_2D int16x8:"))


def _pointwise_fc(op, pname, x, w, bias, out, g, comment, wname, n_ch, mults, shifts, act_min,
                  act_max, rows) -> Kernel:
    """A 1x1 / stride 1 / unpadded int8 CONV_2D as qe_fully_connected_s8_pc: `rows` (batches x
    out_h x out_w) pixels of in_c values against the [out_c][in_c] filter, one multiplier and
    shift per output channel (the same ones the convolution would take)."""
    oc = g["out_c"]
    consts = [f"/* {c_comment(w.describe())}, {n_ch} scale(s) */\n"
              + c_array("int8_t", wname, w.data, 16, lambda v: str(int(v))),
              c_array("int32_t", f"{pname}_mult", mults, 6, str),
              c_array("int8_t", f"{pname}_shift", shifts, 16, str)]
    bname, bias_bytes = bias_array(bias, "int32_t", str, 6, consts)
    params = (f"static const qe_fc_pc_params_t {pname} = {{\n"
              f"    .input_offset = {-x.zero_point},\n    .output_offset = {out.zero_point},\n"
              f"    .activation_min = {act_min},\n    .activation_max = {act_max},\n"
              f"    .multipliers = {pname}_mult,\n    .shifts = {pname}_shift,\n"
              f"    .channel_stride = 1u,\n"
              f"    .batches = {rows}u,\n    .accum_depth = {g['in_c']}u,\n"
              f"    .output_depth = {oc}u,\n}};\n")
    call = (f"qe_fully_connected_s8_pc(&{pname}, (const int8_t *)@T{x.index}@, {wname}, {bname}, "
            f"(int8_t *)@T{out.index}@);")
    return Kernel(op, call, params, consts, w.size + 5 * oc + bias_bytes,
                  comment + "; as a per-channel FULLY_CONNECTED (1x1, stride 1, no padding)")


PACKED_ROWS = 4          # conv.h: QE_CONV_PACKED_ROWS
PACKED_MAX_DEPTH = 128   # conv.h: QE_CONV_PACKED_MAX_DEPTH


def mm_table(mults, shifts, output_offset: int, act_min: int, act_max: int,
             padded: int) -> np.ndarray | None:
    """conv.h's mm: per padded channel {multiplier, round, shift} of cortex-m-dsp's requant_mm_t
    (dsp.h, requant_mm_init: round = 2^(e-1) + offset * 2^e, shift e = -shift), or None when a
    channel misses its preconditions (dsp_mm_stage); padding channels repeat channel 0."""
    if not all(dsp_mm_stage(int(m), int(s), act_min, act_max) for m, s in zip(mults, shifts)):
        return None
    rows = []
    for c in range(padded):
        m, s = (mults[c], shifts[c]) if c < len(mults) else (mults[0], shifts[0])
        e = -int(s)
        rows.append((int(m), (1 << (e - 1)) + output_offset * (1 << e), e))
    return np.array(rows, np.int64).reshape(-1)


def pack_conv_filter(w: np.ndarray, bias: np.ndarray | None, input_offset: int):
    """conv.h's packed filter for an int8 [out_c][k_h][k_w][in_c] filter: (int32 words, bias'
    per padded channel, padded depth): fully_connected.h's packed layout of the [out_c][depth]
    matrix (w' = w: symmetric filters) and bias' = bias + input_offset * sum_d w (exact)."""
    oc = w.shape[0]
    return pack_fc_weights(w.reshape(oc, -1), bias, input_offset, 0)


def _packed_conv(op, pname, x, w, bias, out, g, comment, wname, n_ch, mults, shifts, act_min,
                 act_max) -> Kernel:
    """An int8 CONV_2D as qe_conv_s8_packed (conv.h)."""
    words, bias_p, d_pad = pack_conv_filter(w.data, None if bias is None else bias.data,
                                            -x.zero_point)
    return _layout_kernel(
        op, pname, x, w, bias, out, g, mults, shifts, act_min, act_max, words, bias_p,
        mm_table(mults, shifts, out.zero_point, act_min, act_max, bias_p.size), 0,
        fn="qe_conv_s8_packed", struct="qe_conv_s8_packed_params_t", wname=wname + "_packed",
        layout=(f"packed for the kernel variant (conv.h), {g['out_c']} channels in groups of "
                f"{PACKED_ROWS}, depth {g['k_h'] * g['k_w'] * g['in_c']} padded to {d_pad}, "
                f"two int16 per word"), n_ch=n_ch,
        fields=f"    .padded_depth = {d_pad}u,\n",
        comment=comment.replace("CONV_2D int8:", "CONV_2D int8 (packed):"),
        bias_comment="bias + input_offset * sum(filter), per padded channel")


DW_CH = 4                 # depthwise_conv.h: QE_DW_PACKED_CH
DW_SCRATCH_MAX = 16384    # arena bytes for the widened, padded input image


def dw_wide_shape(g: dict) -> tuple[int, int, int]:
    """depthwise_conv.h's scratch image: (wide_h, wide_w, padded_c): the input padded by pad_top /
    pad_left and far enough below / right for every window tap."""
    wide_h = max(g["pad_top"] + g["in_h"],
                 (g["out_h"] - 1) * g["stride_h"] + (g["k_h"] - 1) * g["dil_h"] + 1)
    wide_w = max(g["pad_left"] + g["in_w"],
                 (g["out_w"] - 1) * g["stride_w"] + (g["k_w"] - 1) * g["dil_w"] + 1)
    return wide_h, wide_w, -(-g["in_c"] // DW_CH) * DW_CH


def pack_dw_filter(w: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """depthwise_conv.h's pre-widened filter for an int8 [1][k_h][k_w][c] filter (depth
    multiplier 1): (int32 words, bias per padded channel). Per group of four channels, per tap:
    w[c0] | w[c2] << 16, w[c1] | w[c3] << 16 (two's complement halves), padding channels 0."""
    _, k_h, k_w, c = w.shape
    cp = -(-c // DW_CH) * DW_CH
    f = np.zeros((k_h * k_w, cp), np.int64)
    f[:, :c] = w.reshape(k_h * k_w, c)
    f = f.reshape(k_h * k_w, cp // DW_CH, DW_CH).transpose(1, 0, 2)     # [group][tap][4]
    lo, hi = f[..., [0, 1]], f[..., [2, 3]]
    words = (hi * 65536 + (lo & 0xFFFF)).reshape(-1)
    b = np.zeros(cp, np.int64)
    if bias is not None:
        b[:c] = bias
    return words.astype(np.int32), b.astype(np.int32)


def _packed_depthwise(op, pname, x, w, bias, out, g, comment, wname, n_ch, mults, shifts,
                      act_min, act_max) -> Kernel | None:
    """An int8 DEPTHWISE_CONV_2D (depth multiplier 1) as qe_depthwise_conv_s8_packed
    (depthwise_conv.h), or None when its scratch image would exceed DW_SCRATCH_MAX."""
    wide_h, wide_w, cp = dw_wide_shape(g)
    scratch = wide_h * wide_w * cp * 2
    if scratch > DW_SCRATCH_MAX:
        return None
    words, bias_p = pack_dw_filter(w.data, None if bias is None else bias.data)
    return _layout_kernel(
        op, pname, x, w, bias, out, g, mults, shifts, act_min, act_max, words, bias_p,
        mm_table(mults, shifts, out.zero_point, act_min, act_max, cp), scratch,
        fn="qe_depthwise_conv_s8_packed", struct="qe_dw_s8_packed_params_t",
        wname=wname + "_packed",
        layout=(f"pre-widened for the kernel variant (depthwise_conv.h), {g['out_c']} channels in "
                f"groups of {DW_CH}, per tap two words"), n_ch=n_ch,
        fields=f"    .padded_c = {cp}u,\n    .wide_h = {wide_h}u,\n    .wide_w = {wide_w}u,\n",
        comment=comment.replace("DEPTHWISE_CONV_2D int8:", "DEPTHWISE_CONV_2D int8 (packed):"))


def _layout_kernel(op, pname, x, w, bias, out, g, mults, shifts, act_min, act_max, words, bias_p,
                   mm, scratch, *, fn, struct, wname, layout, n_ch, fields, comment,
                   bias_comment="bias per padded channel") -> Kernel:
    """The Kernel of a convolution on a layout of the cortex-m-dsp variant's own (the widened
    image's qe_conv_s8_wide, the packed depthwise): its filter words, bias per padded channel,
    the reference's per-channel multipliers and shifts, the output stage's table when it
    applies (`mm`), the params (the window, offsets, bounds, then `fields`) and the call, with
    what the layout costs in flash beyond the reference's."""
    oc = g["out_c"]
    consts = [f"/* {c_comment(w.describe())}, {n_ch} scale(s): {layout} */\n"
              + c_array("int32_t", wname, words, 8, lambda v: str(int(v))),
              f"/* {bias_comment} */\n"
              + c_array("int32_t", f"{pname}_bias", bias_p, 8, lambda v: str(int(v))),
              c_array("int32_t", f"{pname}_mult", mults, 6, str),
              c_array("int8_t", f"{pname}_shift", shifts, 16, str)]
    const_bytes = 4 * words.size + 4 * bias_p.size + 5 * oc
    if mm is not None:
        consts.append("/* the variant's output stage per padded channel: multiplier, round, "
                      "shift (dsp.h, requant_mm_t) */\n"
                      + c_array("int32_t", f"{pname}_mm", mm, 6, lambda v: str(int(v))))
        const_bytes += 4 * mm.size
    params = (f"static const {struct} {pname} = {{\n"
              f"    .c = {{\n" + "".join("    " + ln + "\n" for ln in window_c(g).splitlines())
              + f"        .input_offset = {-x.zero_point},\n"
              f"        .output_offset = {out.zero_point},\n"
              f"        .activation_min = {act_min},\n        .activation_max = {act_max},\n"
              f"        .multipliers = {pname}_mult,\n        .shifts = {pname}_shift,\n    }},\n"
              f"    .mm = {f'{pname}_mm' if mm is not None else 'QE_FLASH_NULL'},\n"
              + fields + "};\n")
    call = (f"{fn}(&{pname}, (const int8_t *)@T{x.index}@, {wname}, {pname}_bias, "
            f"(int8_t *)@T{out.index}@" + (f", (int16_t *)@S{op.index}@" if scratch else "")
            + ");")
    ref_bytes = w.size + 5 * oc + (4 * bias.size if bias is not None else 0)
    return Kernel(op, call, params, consts, const_bytes,
                  comment + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B)"
                  + (f", {scratch} B of scratch" if scratch else ""), scratch_bytes=scratch,
                  layout_extra_bytes=const_bytes - ref_bytes)


WIDE_ROWS = 4                 # conv.h: QE_CONV_WIDE_ROWS
WIDE_MAX_ROW_WORDS = 64       # conv.h: QE_CONV_WIDE_MAX_ROW_WORDS
WIDE_SCRATCH_MAX = 16384      # arena bytes for the widened, padded input image


def _direct_pointwise(g: dict, taps: int) -> bool:
    """A 1x1 / stride 1 / unpadded convolution whose depth is whole quads: qe_conv_s8_packed
    widens each pixel in place (no gather, no image)."""
    return (g["k_h"] == g["k_w"] == 1 and g["pad_top"] == g["pad_left"] == 0
            and taps % 4 == 0 and taps <= PACKED_MAX_DEPTH)


def wide_shape(g: dict) -> tuple[int, int, int]:
    """conv.h's qe_conv_s8_wide scratch image: (wide_h, wide_w, in_cp)."""
    wide_h, wide_w, _ = dw_wide_shape(g)
    return wide_h, wide_w, g["in_c"] + g["in_c"] % 2


def pack_wide_filter(w: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """conv.h's filter for qe_conv_s8_wide, from an int8 [out_c][k_h][k_w][in_c] filter: (int32
    words, bias per padded channel): per group of four channels, per tap, per channel pair, per
    channel of the group, w[2k] | w[2k + 1] << 16 (two's complement halves; zero padding)."""
    oc, k_h, k_w, ic = w.shape
    ocp, icp = -(-oc // WIDE_ROWS) * WIDE_ROWS, ic + ic % 2
    f = np.zeros((ocp, k_h * k_w, icp), np.int64)
    f[:oc, :, :ic] = w.reshape(oc, k_h * k_w, ic)
    f = f.reshape(ocp // WIDE_ROWS, WIDE_ROWS, k_h * k_w, icp // 2, 2).transpose(0, 2, 3, 1, 4)
    words = (f[..., 1] * 65536 + (f[..., 0] & 0xFFFF)).reshape(-1)
    b = np.zeros(ocp, np.int64)
    if bias is not None:
        b[:oc] = bias
    return words.astype(np.int32), b.astype(np.int32)


def _wide_conv(op, pname, x, w, bias, out, g, comment, wname, n_ch, mults, shifts, act_min,
               act_max) -> Kernel | None:
    """An int8 CONV_2D as qe_conv_s8_wide (conv.h), or None when it does not apply (dilation
    along x, a window row of more than WIDE_MAX_ROW_WORDS words, scratch > WIDE_SCRATCH_MAX)."""
    wide_h, wide_w, icp = wide_shape(g)
    scratch = wide_h * wide_w * icp * 2
    if g["dil_w"] != 1 or g["k_w"] * icp // 2 > WIDE_MAX_ROW_WORDS or scratch > WIDE_SCRATCH_MAX:
        return None
    words, bias_p = pack_wide_filter(w.data, None if bias is None else bias.data)
    return _layout_kernel(
        op, pname, x, w, bias, out, g, mults, shifts, act_min, act_max, words, bias_p,
        mm_table(mults, shifts, out.zero_point, act_min, act_max, bias_p.size), scratch,
        fn="qe_conv_s8_wide", struct="qe_conv_s8_wide_params_t", wname=wname + "_wide",
        layout=(f"laid out for the kernel variant (conv.h, qe_conv_s8_wide), {g['out_c']} "
                f"channels in groups of {WIDE_ROWS}, two input channels per word"), n_ch=n_ch,
        fields=f"    .in_cp = {icp}u,\n    .wide_h = {wide_h}u,\n    .wide_w = {wide_w}u,\n",
        comment=comment.replace("CONV_2D int8:", "CONV_2D int8 (widened image):"))
