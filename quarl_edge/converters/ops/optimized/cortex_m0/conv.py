"""CONV_2D on the cortex-m0 and rv32 variants (firmware/core/kernels/optimized/cortex-m0/conv.c,
which rv32/conv.c includes): an int8 CONV_2D whose depth (k_h * k_w * in_c, rounded up to even)
is at most ROWS_MAX_DEPTH and whose scratch (the widened image and the column) fits SCRATCH_MAX
gets the rows filter (conv.h, qe_conv_s8_rows: int32 weights, four
output channels interleaved, the input offset folded into bias') and, when every channel's
shift is a right shift, the cortex-m0 output stage precomputed per channel (rq_table); every
other op the reference lowering (quarl_edge/converters/ops/conv.py), whose steps this starts
from (conv_operands, int8_stage: the same checks, the same per-channel multipliers)."""
from __future__ import annotations

import numpy as np

from ....emit import c_array, c_comment
from ...common import Kernel, window_c
from ...conv import conv_operands, conv_s8_kernel, int8_stage, lower_conv
from ....tflite_model import Operator, TFLiteModel
from .fully_connected import saturation_bounds, step_table

ROWS = 4                 # conv.h: QE_CONV_ROWS
ROWS_MAX_DEPTH = 128     # conv.h: QE_CONV_ROWS_MAX_DEPTH
RQ_WORDS = 12            # conv.h: QE_CONV_RQ_WORDS
SCRATCH_MAX = 8192       # arena bytes for the widened image and the column


def rows_wide_shape(g: dict) -> tuple[int, int]:
    """conv.h's qe_conv_s8_rows scratch image (wide_h, wide_w): the input padded by pad_top /
    pad_left and far enough below / right for every window tap."""
    wide_h = max(g["pad_top"] + g["in_h"],
                 (g["out_h"] - 1) * g["stride_h"] + (g["k_h"] - 1) * g["dil_h"] + 1)
    wide_w = max(g["pad_left"] + g["in_w"],
                 (g["out_w"] - 1) * g["stride_w"] + (g["k_w"] - 1) * g["dil_w"] + 1)
    return wide_h, wide_w


def rows_conv_filter(w: np.ndarray, bias: np.ndarray | None,
                     input_offset: int) -> tuple[np.ndarray, np.ndarray, int]:
    """conv.h's rows filter for an int8 [out_c][k_h][k_w][in_c] filter: (int32 words, bias' per
    padded channel, padded depth). Channels in groups of ROWS (padded with zero channels), per
    group per d < padded depth (even) the four channels' w[oc][d]; bias' = bias + input_offset *
    sum_d w (exact integers; int8_stage's bound keeps them in int32)."""
    oc = w.shape[0]
    m = w.reshape(oc, -1).astype(np.int64)
    depth = m.shape[1]
    d_pad = depth + (depth & 1)
    oc_pad = -(-oc // ROWS) * ROWS
    full = np.zeros((oc_pad, d_pad), np.int64)
    full[:oc, :depth] = m
    bias_p = np.zeros(oc_pad, np.int64)
    bias_p[:oc] = (0 if bias is None else bias.astype(np.int64)) + input_offset * m.sum(axis=1)
    assert np.abs(bias_p).max(initial=0) < (1 << 31)
    words = full.reshape(oc_pad // ROWS, ROWS, d_pad).transpose(0, 2, 1).reshape(-1)
    return words.astype(np.int32), bias_p.astype(np.int32), d_pad


def rq_table(mults, shifts, offset: int, act_min: int, act_max: int,
             padded: int) -> np.ndarray | None:
    """conv.h's rq: per padded channel requant_right_t's ten words as requant_right_init
    (cortex-m0/requant_right.h) sets them, then sat_low and sat_above (saturation_bounds); None
    when a channel's shift is not a right shift or its multiplier is negative (requant.h's
    stage). Padding channels repeat channel 0 (their outputs are never stored)."""
    if not all(int(s) <= -1 and int(m) >= 0 for m, s in zip(mults, shifts)):
        return None
    out = []
    for c in range(padded):
        m, s = (int(mults[c]), int(shifts[c])) if c < len(mults) else (int(mults[0]), int(shifts[0]))
        e = -s
        rnd = (1 << 30) + (1 << (30 + e))
        rnd_neg = rnd - (1 << 31)
        sat_low, sat_above = saturation_bounds(m, s, offset, act_min, act_max)
        out += [m & 0xFFFF, m >> 16, rnd & 0xFFFFFFFF, rnd_neg & 0xFFFFFFFF, rnd >> 32,
                rnd_neg >> 32, e - 1, act_min - offset, act_max - offset, offset,
                sat_low, sat_above]
    a = np.array(out, np.int64)
    return np.where(a >= (1 << 31), a - (1 << 32), a)


STEPS_MAX_BYTES = 32768  # the step tables' flash, at most (MinAtar's 16 channels: 16.6 KB)


def steps_table(mults, shifts, offset: int, act_min: int, act_max: int,
                padded: int) -> np.ndarray | None:
    """conv.h's steps: per padded channel a block {lo, span, mul, add} of step_table (its index
    from 0: add without act_min's 2^24 multiple) then the channel's n + 1 steps t[k] (the least
    u whose output index is k + 1); None when step_table does not apply to a channel or
    the tables would pass STEPS_MAX_BYTES. Padding channels repeat channel 0."""
    n = act_max - act_min
    if 4 * padded * (n + 5) > STEPS_MAX_BYTES:
        return None
    blocks = []
    for c in range(padded):
        m, s = (int(mults[c]), int(shifts[c])) if c < len(mults) else (int(mults[0]), int(shifts[0]))
        sat_low, sat_above = saturation_bounds(m, s, offset, act_min, act_max)
        t = step_table(m, s, offset, act_min, act_max, sat_low, sat_above)
        if t is None:
            return None
        lo, mul, add, steps = t
        blocks += [lo, sat_above - lo, mul, (add - (act_min << 24)) & 0xFFFFFFFF]
        blocks += [int(steps[(act_min + k) & 0xFF]) for k in range(n + 1)]
    a = np.array(blocks, np.int64) & 0xFFFFFFFF
    return np.where(a >= (1 << 31), a - (1 << 32), a)


def _c_int32(v) -> str:
    v = int(v)
    return "(-2147483647 - 1)" if v == -(1 << 31) else str(v)


def lower_conv_rows(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """An int8 CONV_2D of depth <= ROWS_MAX_DEPTH on the rows filter (the module docstring);
    everything else the reference lowering."""
    c = conv_operands(op, model)
    if c.x.dtype != "int8" or c.depthwise:
        return lower_conv(op, model, pname)
    s = int8_stage(op, model, c)
    g, x, w, bias, out = c.g, c.x, c.w, c.bias, c.out
    wide_h, wide_w = rows_wide_shape(g)
    scratch = 4 * (wide_h * wide_w * g["in_c"] + c.taps + (c.taps & 1) + -(-g["out_c"] // ROWS) * ROWS)
    if c.taps + (c.taps & 1) > ROWS_MAX_DEPTH or scratch > SCRATCH_MAX:
        return conv_s8_kernel(op, pname, c, s)
    words, bias_p, d_pad = rows_conv_filter(w.data, None if bias is None else bias.data,
                                            -x.zero_point)
    oc = g["out_c"]
    rq = rq_table(s.mults, s.shifts, out.zero_point, s.act_min, s.act_max, bias_p.size)
    steps = None if rq is None else steps_table(s.mults, s.shifts, out.zero_point, s.act_min,
                                                s.act_max, bias_p.size)
    wname = c.wname + "_rows"
    consts = [f"/* {c_comment(w.describe())}, {s.n_ch} scale(s): rows for the kernel variant "
              f"(conv.h, qe_conv_s8_rows), {oc} channels in groups of {ROWS}, depth {c.taps} "
              f"padded to {d_pad}, one int32 per weight */\n"
              + c_array("int32_t", wname, words, 8, lambda v: str(int(v))),
              "/* bias + input_offset * sum(filter), per padded channel */\n"
              + c_array("int32_t", f"{pname}_bias", bias_p, 8, lambda v: str(int(v))),
              c_array("int32_t", f"{pname}_mult", s.mults, 6, str),
              c_array("int8_t", f"{pname}_shift", s.shifts, 16, str)]
    const_bytes = 4 * words.size + 4 * bias_p.size + 5 * oc
    if rq is not None:
        consts.append("/* the variant's output stage per padded channel: requant_right_t "
                      "(cortex-m0/requant_right.h), sat_low, sat_above */\n"
                      + c_array("int32_t", f"{pname}_rq", rq, 6, _c_int32))
        const_bytes += 4 * rq.size
    if steps is not None:
        consts.append("/* the output stage as step tables (conv.h): per padded channel lo, span, "
                      "mul, add, then its table */\n"
                      + c_array("int32_t", f"{pname}_steps", steps, 8, _c_int32))
        const_bytes += 4 * steps.size
    params = (f"static const qe_conv_s8_rows_params_t {pname} = {{\n"
              f"    .c = {{\n" + "".join("    " + ln + "\n" for ln in window_c(g).splitlines())
              + f"        .input_offset = {-x.zero_point},\n"
              f"        .output_offset = {out.zero_point},\n"
              f"        .activation_min = {s.act_min},\n        .activation_max = {s.act_max},\n"
              f"        .multipliers = {pname}_mult,\n        .shifts = {pname}_shift,\n    }},\n"
              f"    .rq = {f'{pname}_rq' if rq is not None else 'QE_FLASH_NULL'},\n"
              f"    .steps = {f'{pname}_steps' if steps is not None else 'QE_FLASH_NULL'},\n"
              f"    .padded_depth = {d_pad}u,\n"
              f"    .wide_h = {wide_h}u,\n    .wide_w = {wide_w}u,\n}};\n")
    call = (f"qe_conv_s8_rows(&{pname}, (const int8_t *)@T{x.index}@, {wname}, {pname}_bias, "
            f"(int8_t *)@T{out.index}@, (int32_t *)@S{op.index}@);")
    ref_bytes = w.size + 5 * oc + (4 * bias.size if bias is not None else 0)
    return Kernel(op, call, params, consts, const_bytes,
                  c.comment.replace("CONV_2D int8:", "CONV_2D int8 (rows):")
                  + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B), "
                  f"{scratch} B of scratch", scratch_bytes=scratch,
                  layout_extra_bytes=const_bytes - ref_bytes)
