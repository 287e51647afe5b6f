"""FULLY_CONNECTED with int4 weights on the cortex-m0 and rv32 variants (firmware/core/kernels/
optimized/cortex-m0/fully_connected_s4.c, which rv32 includes): an int8 x int4 per-tensor
FULLY_CONNECTED whose weights + filter_offset are int4 gets the row-pair layout
(fully_connected_s4.h, s4_pairs_stream: two rows' nibbles per byte, half a byte per weight as
TFLite's packing), run by qe_fully_connected_s4_pairs; every other one the reference lowering
(quarl_edge/converters/ops/fully_connected_s4.py, TFLite's packing)."""
from __future__ import annotations

import numpy as np

from ....emit import c_array, c_comment, c_ident
from ...common import Kernel, weighted_operands
from ...fully_connected import per_tensor_stage
from ...fully_connected_s4 import (int4_reference_bytes, offset_int4_rows, packed_int4,
                                   unpack_int4)
from ....tflite_model import Operator, TFLiteModel

S4_PAIRS_ROWS = 4


def s4_pairs_stream(w: np.ndarray, bias: np.ndarray | None, input_offset: int,
                    filter_offset: int) -> np.ndarray:
    """The row-pair layout of fully_connected_s4.h for int4 weights [rows][depth] (integers), as
    uint32 words: per group of four rows, per input, the bytes (w'1 << 4 | w'0) and (w'3 << 4 |
    w'2) (nibbles two's complement), padded to a word, then the group's four bias' = bias +
    input_offset * sum_d w'. Raises ValueError when some w' = w + filter_offset is no int4."""
    depth = w.shape[1]
    full, bias_p = offset_int4_rows(w, bias, input_offset, filter_offset, S4_PAIRS_ROWS)
    g = (full & 15).reshape(-1, 2, 2, depth)                  # [group][pair][row in pair][d]
    by = (g[:, :, 0] | (g[:, :, 1] << 4)).transpose(0, 2, 1).reshape(len(g), -1)  # [group][d, pair]
    words_per = (2 * depth + 3) // 4
    by = np.pad(by, ((0, 0), (0, 4 * words_per - by.shape[1]))).astype(np.uint32)
    words = by[:, 0::4] | (by[:, 1::4] << 8) | (by[:, 2::4] << 16) | (by[:, 3::4] << 24)
    groups_bias = (bias_p & 0xFFFFFFFF).reshape(-1, S4_PAIRS_ROWS).astype(np.uint32)
    return np.concatenate([words, groups_bias], axis=1).reshape(-1).astype(np.uint32)


def lower_fully_connected_s4_pairs(op: Operator, model: TFLiteModel, pname: str,
                                   kernel: Kernel) -> Kernel:
    """`kernel`, the reference lowering's qe_fully_connected_s4 (it validated the op), or the
    row-pair layout's qe_fully_connected_s4_pairs where it applies."""
    x, w, bias, out, act = weighted_operands(op, model, "weights")
    output_depth, accum_depth = w.shape
    wi = unpack_int4(packed_int4(op, w, "weights"), w.size).reshape(w.shape)
    try:
        stream = s4_pairs_stream(wi, None if bias is None else bias.data, -x.zero_point,
                                 -w.zero_point)
    except ValueError:
        return kernel
    real, multiplier, shift, act_min, act_max = per_tensor_stage(x, w, out, act)
    batches = out.size // output_depth
    wname = c_ident(w.name, f"w{w.index}_") + "_s4_pairs"
    consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g}, zero point {w.zero_point}: "
              f"the int4 row-pair layout of the kernel variant (fully_connected_s4.h), "
              f"{output_depth} rows in groups of {S4_PAIRS_ROWS}, two rows' nibbles per byte; "
              f"after each group's bytes its four bias' = bias + input_offset * sum(weights + "
              f"filter_offset) */\n"
              + c_array("uint32_t", wname, stream, 6, lambda v: f"0x{int(v):08x}u")]
    const_bytes = 4 * stream.size
    params = (f"static const qe_fc_s8_params_t {pname} = {{\n"
              f"    .input_offset = 0,  /* both offsets folded into the stream */\n"
              f"    .filter_offset = 0,\n"
              f"    .output_offset = {out.zero_point},\n"
              f"    .output_multiplier = {multiplier},  /* {real:.17g} = m * 2^(shift - 31) */\n"
              f"    .output_shift = {shift},\n"
              f"    .activation_min = {act_min},\n"
              f"    .activation_max = {act_max},\n"
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .output_depth = {output_depth}u,\n}};\n")
    call = (f"qe_fully_connected_s4_pairs(&{pname}, (const int8_t *)@T{x.index}@, {wname}, "
            f"(int8_t *)@T{out.index}@);")
    ref_bytes = int4_reference_bytes(w, bias)
    return Kernel(op, call, params, consts, const_bytes,
                  kernel.comment.replace("int4 weights:", "int4 weights (row pairs):")
                  + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B)",
                  headers=kernel.headers, layout_extra_bytes=const_bytes - ref_bytes)
