"""FULLY_CONNECTED with int4 weights on the cortex-m-dsp variant (firmware/core/kernels/optimized/
cortex-m-dsp/fully_connected_s4.c): an int8 x int4 per-tensor FULLY_CONNECTED whose weights +
filter_offset are int4 gets the generator's int4 layout (fully_connected_s4.h, pack_fc_s4_weights:
four rows' nibbles per 16-bit lane, half a byte per weight as TFLite's packing), run by
qe_fully_connected_s4_packed (or the s4 mm stream where it applies); deeper than PACKED_MAX_DEPTH
with the depth padded to a multiple of 8 (pack_fc_s4_deep), run by qe_fully_connected_s4_deep in
blocks of 128 inputs; every other one the lowering of the reference boards (quarl_edge/converters/ops/
fully_connected_s4.py, TFLite's packing)."""
from __future__ import annotations

import numpy as np

from ....emit import c_array, c_comment, c_ident
from ...common import Kernel, weighted_operands
from ...fully_connected import per_tensor_stage
from ...fully_connected_s4 import (int4_reference_bytes, offset_int4_rows, packed_int4,
                                   unpack_int4)
from ..common import PACKED_MAX_DEPTH
from ....tflite_model import Operator, TFLiteModel

PACKED_ROWS = 4          # fully_connected.h: QE_FC_PACKED_ROWS


def pack_fc_s4_weights(w: np.ndarray, bias: np.ndarray | None, input_offset: int,
                       filter_offset: int) -> tuple[np.ndarray, int]:
    """The int4 layout of fully_connected_s4.h for int4 weights [rows][depth] (as integers):
    (the uint32 stream, padded depth): per group its words, then its four bias'. w' = w + filter_offset must lie in
    [-8, 7]; bias' = bias + input_offset * sum_d w'; rows padded to a multiple of 4, the depth to
    a multiple of 4, with zero weights; per group, per quad q, per half h, one word: lane j (d =
    4q + h + 2j) holds row 0's w' in bits 12..15 (two's complement) and rows 1..3's w' + 8 in bits
    8..11, 4..7, 0..3."""
    depth = w.shape[1]
    full, bias_p = offset_int4_rows(w, bias, input_offset, filter_offset, PACKED_ROWS)
    r_pad = len(full)
    d_pad = -(-depth // 4) * 4
    full = np.pad(full, ((0, 0), (0, d_pad - depth)))
    # [group][row][quad][j][h] -> [group][quad][h][j][row]
    g = full.reshape(r_pad // PACKED_ROWS, PACKED_ROWS, d_pad // 4, 2, 2).transpose(0, 2, 4, 3, 1)
    lanes = (((g[..., 0] & 15) << 12) | ((g[..., 1] + 8) << 8) | ((g[..., 2] + 8) << 4)
             | (g[..., 3] + 8))
    words = (lanes[..., 0] | (lanes[..., 1] << 16)).reshape(r_pad // PACKED_ROWS, -1)
    groups_bias = (bias_p & 0xFFFFFFFF).reshape(-1, PACKED_ROWS)
    return np.concatenate([words, groups_bias], axis=1).reshape(-1).astype(np.uint32), d_pad


def pack_fc_s4_deep(w: np.ndarray, bias: np.ndarray | None, input_offset: int,
                    filter_offset: int) -> tuple[np.ndarray, int]:
    """The int4 layout for depths over PACKED_MAX_DEPTH (fully_connected_s4.h): pack_fc_s4_weights
    with the depth padded to a multiple of 8 (w' = 0: bias' unchanged), so that the DSP
    kernel's blocks of <= 128 inputs are whole pairs of quads (s4_packed_deep). Exact for every
    int8 input and int4 w' (the kernel's per-block sums cannot leave int32; its accumulators add
    mod 2^32): no bound to check here beyond the reference lowering's."""
    depth = w.shape[1]
    stream, d_pad = pack_fc_s4_weights(
        np.pad(w, ((0, 0), (0, -depth % 8)), constant_values=-filter_offset), bias, input_offset,
        filter_offset)
    return stream, d_pad


# cortex-m-dsp/fully_connected_s4.c's code layout, which its .if checks pin: the even MAC loop ends
# ODD_END bytes before the odd loop's end (.Ls4mm_oend), the output blocks start after it
ODD_END = 1880
BLOCKS = {"leftl": (16, 76), "left": (320, 0), "nofix": (412, 76), "fix": (2008, 92)}


def s4_mm_entry(depth: int) -> int:
    """qe_fc_s4_mm_params_t's entry: the bytes back from the end of the DSP kernel's odd MAC loop
    to the quad to enter (cortex-m-dsp/fully_connected_s4.c: 120 a pair of quads; even quad
    counts enter the first loop, which ends ODD_END bytes before; odd ones the odd loop, whose
    last quad is 64 bytes)."""
    q = depth // 4
    return 60 * q + 4 if q % 2 else ODD_END + 60 * q


def s4_mm_block(mode: int, shift: int) -> tuple[int, int]:
    """qe_fc_s4_mm_params_t's block (its output block, bytes after the end of the DSP kernel's odd
    MAC loop) and xshift (16 X's shift: 2^L folded in for the blocks of L <= 3) for s4_mm_mode's
    mode and shift (e, or L)."""
    if mode == 2:
        if shift <= 3:
            return BLOCKS["leftl"][0] + BLOCKS["leftl"][1] * shift, 4 + shift
        return BLOCKS["left"][0], 4
    base, size = BLOCKS["fix" if mode == 1 else "nofix"]
    return base + size * (shift - 1), 4


def pack_fc_s4_mm(w: np.ndarray, bias: np.ndarray | None, input_offset: int, filter_offset: int,
                  left_shift: int | None) -> np.ndarray | None:
    """The s4 mm stream of fully_connected_s4.h (qe_fc_s4_mm_params_t) for int4 weights
    [rows][depth] (integers, depth a multiple of 4): per group of four rows its head h0..h3
    (4096 b0, 4096 b0 + 256 b1, 4096 b0 + 256 b1 + 16 b2, 4096 b0 + 256 b1 + 16 b2 + b3 mod 2^32:
    the nested masks' accumulators start there), then its words of the int4
    layout (pack_fc_s4_weights). None when a bound of the header's fails for some row (B = |b| +
    128 sum_d |w'|, any int8 input): B < 2^30; row 0 B < 2^19, rows 1 and 2 B + 1024 depth < 2^23
    and 2^27 (the scaled accumulators stay in int32); with left_shift L, B 2^(L+1) < 2^31.
    Raises ValueError as pack_fc_s4_weights."""
    rows, depth = w.shape
    assert depth % 4 == 0
    words, _ = pack_fc_s4_weights(w, bias, input_offset, filter_offset)
    full, b = offset_int4_rows(w, bias, input_offset, filter_offset, PACKED_ROWS)
    bound = np.abs(b) + 128 * np.abs(full).sum(axis=1)
    lim = np.array([1 << 19, (1 << 23) - 1024 * depth, (1 << 27) - 1024 * depth, 1 << 30])
    if (bound >= 1 << 30).any() or (bound.reshape(-1, PACKED_ROWS) >= lim).any():
        return None
    if left_shift is not None and (bound << (left_shift + 1) >= 1 << 31).any():
        return None
    g = b.reshape(-1, PACKED_ROWS)
    head = np.cumsum(np.stack([4096 * g[:, 0], 256 * g[:, 1], 16 * g[:, 2], g[:, 3]], axis=1),
                     axis=1) & 0xFFFFFFFF
    groups = len(g)
    body = words.reshape(groups, -1)[:, :-PACKED_ROWS].astype(np.int64)
    return np.concatenate([head, body], axis=1).reshape(-1).astype(np.uint32)


def s4_mm_mode(multiplier: int, shift: int, output_offset: int, act_min: int,
               act_max: int) -> dict | None:
    """qe_fc_s4_mm_params_t's output stage fields, or None where the kernel's asm has none."""
    if (act_min, act_max) != (-128, 127) or multiplier < 1 << 30:
        return None
    if -21 <= shift <= -1:
        e = -shift
        return dict(round=(1 << (e - 1)) + output_offset * (1 << e), shift=e,
                    mode=int(output_offset != -128))
    if 0 <= shift <= 30:
        return dict(round=output_offset, shift=shift, mode=2)
    return None


def lower_fully_connected_s4_mm(op: Operator, model: TFLiteModel, pname: str, kernel: Kernel,
                                wi: np.ndarray) -> Kernel | None:
    """The s4 mm stream (qe_fully_connected_s4_mm) where it applies: one batch, depth a multiple
    of 4, an output stage s4_mm_mode covers and pack_fc_s4_mm's bounds; else None."""
    x, w, bias, out, act = weighted_operands(op, model, "weights")
    output_depth, accum_depth = w.shape
    real, multiplier, shift, act_min, act_max = per_tensor_stage(x, w, out, act)
    mode = s4_mm_mode(multiplier, shift, out.zero_point, act_min, act_max)
    if out.size // output_depth != 1 or accum_depth % 4 or mode is None:
        return None
    stream = pack_fc_s4_mm(wi, None if bias is None else bias.data, -x.zero_point,
                           -w.zero_point, shift if mode["mode"] == 2 else None)
    if stream is None:
        return None
    sname = c_ident(w.name, f"w{w.index}_") + "_s4_mm"
    block, xshift = s4_mm_block(mode["mode"], mode["shift"])
    consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g}, zero point {w.zero_point}: "
              f"the s4 mm stream of the kernel variant (fully_connected_s4.h), {output_depth} "
              f"rows in groups of {PACKED_ROWS}, each group's head (4096 b0, + 256 b1, + 16 b2, "
              f"+ b3: running sums) then its words, depth {accum_depth}, four rows' "
              f"nibbles per 16-bit lane */\n"
              + c_array("uint32_t", sname, stream, 6, lambda v: f"0x{int(v):08x}u")]
    const_bytes = 4 * stream.size
    params = (f"static const qe_fc_s4_mm_params_t {pname} = {{\n"
              f"    .multiplier = {multiplier},  /* {real:.17g} = m * 2^(shift - 31) */\n"
              f"    .round = {mode['round']},\n"
              f"    .shift = {mode['shift']}u,\n"
              f"    .mode = {mode['mode']}u,\n"
              f"    .entry = {s4_mm_entry(accum_depth)}u,\n"
              f"    .output_depth = {output_depth}u,\n"
              f"    .accum_depth = {accum_depth}u,\n"
              f"    .output_offset = {out.zero_point},\n"
              f"    .output_shift = {shift},\n"
              f"    .block = {block}u,\n"
              f"    .xshift = {xshift}u,\n}};\n")
    call = (f"qe_fully_connected_s4_mm(&{pname}, (const int8_t *)@T{x.index}@, {sname}, "
            f"(int8_t *)@T{out.index}@);")
    ref_bytes = int4_reference_bytes(w, bias)
    return Kernel(op, call, params, consts, const_bytes,
                  kernel.comment.replace("int4 weights:", "int4 weights (s4 mm stream):")
                  + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B)",
                  headers=kernel.headers, layout_extra_bytes=const_bytes - ref_bytes)


def lower_fully_connected_s4_packed(op: Operator, model: TFLiteModel, pname: str,
                                    kernel: Kernel) -> Kernel:
    """`kernel`, the reference lowering's qe_fully_connected_s4 (it validated the op), or the
    int4 layout's qe_fully_connected_s4_packed where it applies."""
    x, w, bias, out, act = weighted_operands(op, model, "weights")
    output_depth, accum_depth = w.shape
    wi = unpack_int4(packed_int4(op, w, "weights"), w.size).reshape(w.shape)
    deep = accum_depth > PACKED_MAX_DEPTH
    try:
        stream, d_pad = (pack_fc_s4_deep if deep else pack_fc_s4_weights)(
            wi, None if bias is None else bias.data, -x.zero_point, -w.zero_point)
    except ValueError:
        return kernel
    mm = None if deep else lower_fully_connected_s4_mm(op, model, pname, kernel, wi)
    if mm is not None:
        return mm
    real, multiplier, shift, act_min, act_max = per_tensor_stage(x, w, out, act)
    batches = out.size // output_depth
    wname = c_ident(w.name, f"w{w.index}_") + "_s4_packed"
    consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g}, zero point {w.zero_point}: "
              f"the int4 layout of the kernel variant (fully_connected_s4.h), {output_depth} rows "
              f"in groups of {PACKED_ROWS}, depth {accum_depth} padded to {d_pad}, four rows' "
              f"nibbles per 16-bit lane; after each group's words its four bias' = bias + "
              f"input_offset * sum(weights + filter_offset) */\n"
              + c_array("uint32_t", wname, stream, 6, lambda v: f"0x{int(v):08x}u")]
    const_bytes = 4 * stream.size
    params = (f"static const qe_fc_s8_packed_params_t {pname} = {{\n"
              f"    .output_offset = {out.zero_point},\n"
              f"    .output_multiplier = {multiplier},  /* {real:.17g} = m * 2^(shift - 31) */\n"
              f"    .output_shift = {shift},\n"
              f"    .activation_min = {act_min},\n"
              f"    .activation_max = {act_max},\n"
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .padded_depth = {d_pad}u,\n    .output_depth = {output_depth}u,\n}};\n")
    fn = "qe_fully_connected_s4_deep" if deep else "qe_fully_connected_s4_packed"
    call = f"{fn}(&{pname}, (const int8_t *)@T{x.index}@, {wname}, (int8_t *)@T{out.index}@);"
    ref_bytes = int4_reference_bytes(w, bias)
    return Kernel(op, call, params, consts, const_bytes,
                  kernel.comment.replace("int4 weights:", "int4 weights (int4 layout):")
                  + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B)",
                  headers=kernel.headers, layout_extra_bytes=const_bytes - ref_bytes)
