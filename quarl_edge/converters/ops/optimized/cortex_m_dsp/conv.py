"""CONV_2D and DEPTHWISE_CONV_2D on the cortex-m-dsp variant (firmware/core/kernels/optimized/
cortex-m-dsp/conv.c and depthwise_conv.c): int8 convolutions get a filter layout of the
variant's own, computed here; every other op, and an int8 one no layout applies to, the
reference lowering (quarl_edge/converters/ops/conv.py), whose steps these start from (conv_operands,
int8_stage): the same checks, the same per-channel multipliers.

- lower_conv_packed (the packed weights, the board's default): an int8 CONV_2D on a widened
  image (conv.h, qe_conv_s8_wide) where its scratch fits WIDE_SCRATCH_MAX and a window row
  WIDE_MAX_ROW_WORDS, except a 1x1 / stride 1 / unpadded one whose depth is a multiple of 4 (it
  needs no image: the pixel is its column); those, and the others whose padded depth is at most
  PACKED_MAX_DEPTH, the packed filter (conv.h, qe_conv_s8_packed); an int8 DEPTHWISE_CONV_2D
  with depth multiplier 1 whose widened image fits DW_SCRATCH_MAX the pre-widened filter
  (depthwise_conv.h, qe_depthwise_conv_s8_packed); every other op lower_conv_pointwise_as_fc;
- lower_conv_pointwise_as_fc (the reference weight layout, cgen.generate(pack_weights=False)):
  an int8 1x1 / stride 1 / unpadded CONV_2D as a per-channel FULLY_CONNECTED
  (qe_fully_connected_s8_pc, which the variant makes fast), every other op as the reference.
"""
from __future__ import annotations

import numpy as np

from ....emit import c_array, c_comment
from ...common import Kernel, bias_array, window_c
from ...conv import (ConvOperands, Int8Stage, conv_operands, conv_s8_kernel,
                                            int8_stage, lower_conv)
from .fully_connected import (dsp_mm_stage,
                                                                              pack_fc_weights)
from ....tflite_model import Operator, TFLiteModel


def lower_conv_packed(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """An int8 convolution on the variant's filter layouts (the module docstring)."""
    c = conv_operands(op, model)
    if c.x.dtype != "int8":
        return lower_conv(op, model, pname)
    s = int8_stage(op, model, c)
    args = (op, pname, c.x, c.w, c.bias, c.out, c.g, c.comment, c.wname, *s)
    if c.depthwise and c.dm == 1:
        kernel = _packed_depthwise(*args)
        if kernel is not None:
            return kernel
    if not c.depthwise and not _direct_pointwise(c.g, c.taps):
        kernel = _wide_conv(*args)
        if kernel is not None:
            return kernel
    if not c.depthwise and -(-c.taps // 4) * 4 <= PACKED_MAX_DEPTH:
        return _packed_conv(*args)
    return _pointwise_or_reference(op, pname, c, s)


def lower_conv_pointwise_as_fc(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """The reference lowering, with an int8 1x1 / stride 1 / unpadded CONV_2D as a per-channel
    FULLY_CONNECTED (the module docstring)."""
    c = conv_operands(op, model)
    if c.x.dtype != "int8":
        return lower_conv(op, model, pname)
    return _pointwise_or_reference(op, pname, c, int8_stage(op, model, c))


def _pointwise_or_reference(op: Operator, pname: str, c: ConvOperands, s: Int8Stage) -> Kernel:
    g = c.g
    rows = g["batches"] * g["out_h"] * g["out_w"]
    if (not c.depthwise and g["k_h"] == g["k_w"] == 1 and g["stride_h"] == g["stride_w"] == 1
            and g["pad_top"] == g["pad_left"] == 0 and rows <= 0xFFFF):
        return _pointwise_fc(op, pname, c.x, c.w, c.bias, c.out, g, c.comment, c.wname, *s, rows)
    return conv_s8_kernel(op, pname, c, s)


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
