"""FULLY_CONNECTED on the cortex-m-dsp variant (firmware/core/kernels/optimized/cortex-m-dsp/
fully_connected.c): an int8 per-tensor FULLY_CONNECTED with accum_depth <= PACKED_MAX_DEPTH gets
its weights packed four rows per pass, two int16 per word for SMLAD, both zero points folded into
the weights and the bias (pack_fc_weights, qe_fully_connected_s8_packed); every other one the
reference lowering (quarl_edge/converters/ops/fully_connected.py)."""
from __future__ import annotations

import numpy as np

from .... import qmath
from ....emit import c_array, c_comment, c_ident
from ...common import Kernel, weighted_operands
from ...fully_connected import lower_fully_connected, per_tensor_stage
from ....tflite_model import Operator, TFLiteModel
from ..common import PACKED_MAX_DEPTH
from .fully_connected_s4 import (
    lower_fully_connected_s4_packed)

PACKED_ROWS = 4          # fully_connected.h: QE_FC_PACKED_ROWS


def pack_fc_weights(w: np.ndarray, bias: np.ndarray | None, input_offset: int,
                    filter_offset: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The packed layout of fully_connected.h (qe_fc_s8_packed_params_t) for int8 weights
    [rows][depth]: (int32 weight words, int32 bias' per padded row, padded depth).
    w' = w + filter_offset, bias' = bias + input_offset * sum_d w' (exact integers); rows padded
    to a multiple of 4 and the depth to a multiple of 4 with zero weights; per row group, per quad
    q, per half h, per row r: the word whose low 16 bits are w'[r][4q+h] and high 16 bits
    w'[r][4q+h+2], both two's complement (as int32: 65536 * hi + (lo mod 65536))."""
    rows, depth = w.shape
    wp = w.astype(np.int64) + filter_offset
    b = (np.zeros(rows, np.int64) if bias is None else bias.astype(np.int64)) \
        + input_offset * wp.sum(axis=1)
    r_pad = -(-rows // PACKED_ROWS) * PACKED_ROWS
    d_pad = -(-depth // 4) * 4
    full = np.zeros((r_pad, d_pad), np.int64)
    full[:rows, :depth] = wp
    bias_p = np.zeros(r_pad, np.int64)
    bias_p[:rows] = b
    # [group][row][quad][j][h] -> [group][quad][h][row][j]
    g = full.reshape(r_pad // PACKED_ROWS, PACKED_ROWS, d_pad // 4, 2, 2)
    g = g.transpose(0, 2, 4, 1, 3)
    words = 65536 * g[..., 1] + (g[..., 0] & 0xFFFF)     # the bit pattern hi:lo
    assert np.abs(bias_p).max(initial=0) <= qmath.INT32_MAX
    return words.reshape(-1).astype(np.int32), bias_p.astype(np.int32), d_pad


MM_QUAD_BYTES = 44        # cortex-m-dsp/fully_connected.c: one unrolled quad of the MAC loop


def pack_fc_mm(w: np.ndarray, bias: np.ndarray | None, input_offset: int,
               filter_offset: int) -> np.ndarray | None:
    """The mm stream of fully_connected.h (qe_fc_s8_mm_params_t) for int8 weights [rows][depth]
    (depth a multiple of 4): per group of four rows its four bias'' words, then its words of the
    packed layout (pack_fc_weights), every weight and bias' doubled; None when a row's accumulator
    bound |bias'| + sum |w'| * 128 (any int8 input, any order of the partial sums) is not below
    2^30, so that the doubled sums could leave int32."""
    rows, depth = w.shape
    assert depth % 4 == 0
    wp = w.astype(np.int64) + filter_offset
    b = (np.zeros(rows, np.int64) if bias is None else bias.astype(np.int64)) \
        + input_offset * wp.sum(axis=1)
    if (np.abs(b) + 128 * np.abs(wp).sum(axis=1)).max(initial=0) >= 1 << 30:
        return None
    words, bias_p, _ = pack_fc_weights(2 * wp, 2 * b, 0, 0)
    groups = bias_p.size // PACKED_ROWS
    stream = np.concatenate([bias_p.reshape(groups, PACKED_ROWS).astype(np.int64),
                             words.reshape(groups, -1).astype(np.int64)], axis=1)
    return stream.reshape(-1).astype(np.int32)


def mm_params(multiplier: int, shift: int, output_offset: int, depth: int, rows: int) -> dict:
    """qe_fc_s8_mm_params_t's fields (requant_mm_init's constants: dsp_mm_stage must hold)."""
    e = -shift
    return dict(multiplier=multiplier, round=(1 << (e - 1)) + output_offset * (1 << e), shift=e,
                output_offset=output_offset, fix=int(output_offset != -128), accum_depth=depth,
                output_depth=rows, entry=MM_QUAD_BYTES * depth // 4)


def dsp_mm_stage(multiplier: int, shift: int, act_min: int, act_max: int) -> bool:
    """Whether the cortex-m-dsp packed kernel takes its 5-instruction output stage
    (cortex-m-dsp/dsp.h, requant_mm_init: right shift 1..21, a normalized multiplier, the full
    int8 range). Only a speed choice here (which lowering), never a correctness one."""
    return -21 <= shift <= -1 and multiplier >= 1 << 30 and (act_min, act_max) == (-128, 127)


def lower_fully_connected_packed(op: Operator, model: TFLiteModel, pname: str,
                                 min_rows: int = 1, min_rows_mm: int | None = None,
                                 int4_layout: bool = False) -> Kernel:
    """For boards with an optimized variant: an int8 per-tensor FULLY_CONNECTED with accum_depth
    <= PACKED_MAX_DEPTH (and at least min_rows outputs; min_rows_mm instead, if given, when the
    cortex-m-dsp output stage dsp_mm_stage applies) gets the packed layout
    (qe_fully_connected_s8_packed); with int4_layout, an int8 x int4 one the int4 layout
    (fully_connected_s4.py); every other one the lowering of the reference boards."""
    kernel = lower_fully_connected(op, model, pname)     # validates the op completely
    if kernel.call.startswith("qe_fully_connected_s4(") and int4_layout:
        return lower_fully_connected_s4_packed(op, model, pname, kernel)
    if not kernel.call.startswith("qe_fully_connected_s8("):
        return kernel
    x, w, bias, out, act = weighted_operands(op, model, "weights")
    output_depth, accum_depth = w.shape
    real, multiplier, shift, act_min, act_max = per_tensor_stage(x, w, out, act)
    if min_rows_mm is not None and dsp_mm_stage(multiplier, shift, act_min, act_max):
        min_rows = min_rows_mm
    if accum_depth > PACKED_MAX_DEPTH or output_depth < min_rows:
        return kernel
    batches = out.size // output_depth
    if (batches == 1 and accum_depth % 4 == 0
            and dsp_mm_stage(multiplier, shift, act_min, act_max)):
        mm = lower_fully_connected_mm(op, model, pname, kernel, multiplier, shift)
        if mm is not None:
            return mm
    words, bias_p, d_pad = pack_fc_weights(w.data, None if bias is None else bias.data,
                                           -x.zero_point, -w.zero_point)
    wname = c_ident(w.name, f"w{w.index}_") + "_packed"
    bname = f"{pname}_bias"
    consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g}, zero point {w.zero_point}: "
              f"packed for the kernel variant (fully_connected.h), {output_depth} rows in groups "
              f"of {PACKED_ROWS}, depth {accum_depth} padded to {d_pad}, two int16 per word */\n"
              + c_array("int32_t", wname, words, 8, lambda v: str(int(v))),
              "/* bias + input_offset * sum(weights + filter_offset), per padded row */\n"
              + c_array("int32_t", bname, bias_p, 8, lambda v: str(int(v)))]
    const_bytes = 4 * words.size + 4 * bias_p.size
    params = (f"static const qe_fc_s8_packed_params_t {pname} = {{\n"
              f"    .output_offset = {out.zero_point},\n"
              f"    .output_multiplier = {multiplier},  /* {real:.17g} = m * 2^(shift - 31) */\n"
              f"    .output_shift = {shift},\n"
              f"    .activation_min = {act_min},\n"
              f"    .activation_max = {act_max},\n"
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .padded_depth = {d_pad}u,\n    .output_depth = {output_depth}u,\n}};\n")
    call = (f"qe_fully_connected_s8_packed(&{pname}, (const int8_t *)@T{x.index}@, {wname}, "
            f"{bname}, (int8_t *)@T{out.index}@);")
    ref_bytes = w.size + (4 * bias.size if bias is not None else 0)
    return Kernel(op, call, params, consts, const_bytes,
                  kernel.comment.replace("FULLY_CONNECTED int8:", "FULLY_CONNECTED int8 (packed):")
                  + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B)",
                  layout_extra_bytes=const_bytes - ref_bytes)


def lower_fully_connected_mm(op: Operator, model: TFLiteModel, pname: str, kernel: Kernel,
                             multiplier: int, shift: int) -> Kernel | None:
    """The mm stream (pack_fc_mm, qe_fully_connected_s8_mm) for a packed-eligible FC of one batch,
    a depth that is a multiple of 4 and the DSP output stage (dsp_mm_stage); None when the
    doubled accumulators' bound fails (then the packed layout)."""
    x, w, bias, out, act = weighted_operands(op, model, "weights")
    output_depth, accum_depth = w.shape
    stream = pack_fc_mm(w.data, None if bias is None else bias.data, -x.zero_point,
                        -w.zero_point)
    if stream is None:
        return None
    sname = c_ident(w.name, f"w{w.index}_") + "_mm"
    consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g}, zero point {w.zero_point}: "
              f"the mm stream for the kernel variant (fully_connected.h), {output_depth} rows in "
              f"groups of {PACKED_ROWS}, each group's 4 bias'' words then its weights, depth "
              f"{accum_depth}, two int16 per word, weights and bias' doubled */\n"
              + c_array("int32_t", sname, stream, 8, lambda v: str(int(v)))]
    const_bytes = 4 * stream.size
    f = mm_params(multiplier, shift, out.zero_point, accum_depth, output_depth)
    params = (f"static const qe_fc_s8_mm_params_t {pname} = {{\n"
              f"    .multiplier = {f['multiplier']},\n"
              f"    .round = {f['round']},  /* 2^(e-1) + output_offset * 2^e */\n"
              f"    .shift = {f['shift']}u,\n"
              f"    .fix = {f['fix']}u,\n"
              f"    .entry = {f['entry']}u,\n"
              f"    .output_depth = {f['output_depth']}u,\n"
              f"    .accum_depth = {f['accum_depth']}u,\n"
              f"    .output_offset = {f['output_offset']},\n}};\n")
    call = (f"qe_fully_connected_s8_mm(&{pname}, (const int8_t *)@T{x.index}@, {sname}, "
            f"(int8_t *)@T{out.index}@);")
    ref_bytes = w.size + (4 * bias.size if bias is not None else 0)
    return Kernel(op, call, params, consts, const_bytes,
                  kernel.comment.replace("FULLY_CONNECTED int8:", "FULLY_CONNECTED int8 (mm):")
                  + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B)",
                  layout_extra_bytes=const_bytes - ref_bytes)
