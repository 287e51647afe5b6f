"""FULLY_CONNECTED on the cortex-m0 variant (firmware/core/kernels/optimized/cortex-m0/
fully_connected.c; rv32 takes the same lowering): an int8 per-tensor FULLY_CONNECTED with
accum_depth <= PACKED_MAX_DEPTH gets its weights as chunked row pairs, one MULS for two rows'
products (pairs_fc_stream, qe_fully_connected_s8_pairs); a deeper one whose w + filter_offset are
int8 the byte lanes, four rows' offset-binary bytes a word (bytes_fc_words,
qe_fully_connected_s8_bytes: the int8 weights' flash, where row pairs would take twice that);
every other one the reference lowering (quarl_edge/converters/ops/fully_connected.py)."""
from __future__ import annotations

import numpy as np

from .... import qmath
from ....emit import c_array, c_comment, c_ident
from ...common import Kernel, weighted_operands
from ...fully_connected import lower_fully_connected, per_tensor_stage
from ....tflite_model import Operator, TFLiteModel
from .fully_connected_s4 import (
    lower_fully_connected_s4_pairs)
from ..common import (PACKED_MAX_DEPTH, c_int32, greedy_chunks,
                                                        output_saturation)


PAIRS_ROWS = 4                   # fully_connected.h: QE_FC_PAIRS_ROWS


def pairs_fc_stream(w: np.ndarray, bias: np.ndarray | None, input_offset: int,
                    filter_offset: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The layout of qe_fully_connected_s8_pairs (fully_connected.h; the cortex-m0 variant) for
    int8 weights [rows][depth]: (int32 word stream, int32 bias' per padded row, chunk lengths).
    w' = w + filter_offset (in [-255, 255]), bias' = bias + input_offset * sum_d w'; rows in
    groups of 4 (the last padded with zero rows); per group chunks cut as for the avr stream
    (_greedy_chunks: every row's chunk sum in int16 for every int8 input), each one word 4 L
    (L inputs: the bytes of widened input it spans), then
    per input two words whose *values* are 65536 * w'[4g+1][d] + w'[4g][d] and
    65536 * w'[4g+3][d] + w'[4g+2][d], a 0 word ending the group. One 32-bit multiply of such a
    word by x is then two products, and a chunk's sum of them is 65536 H + L with H and L the two
    rows' exact int16 sums."""
    rows, depth = w.shape
    wp = w.astype(np.int64) + filter_offset
    b = (np.zeros(rows, np.int64) if bias is None else bias.astype(np.int64)) \
        + input_offset * wp.sum(axis=1)
    r_pad = -(-rows // PAIRS_ROWS) * PAIRS_ROWS
    full = np.zeros((r_pad, depth), np.int64)
    full[:rows] = wp
    bias_p = np.zeros(r_pad, np.int64)
    bias_p[:rows] = b
    stream, chunks = [], []
    for g in range(r_pad // PAIRS_ROWS):
        gw = full[g * PAIRS_ROWS:(g + 1) * PAIRS_ROWS]
        d = 0
        for n in greedy_chunks(gw, 65535):
            stream.append(4 * n)                 # the chunk's length in bytes of input
            for k in range(d, d + n):
                stream += [65536 * gw[1, k] + gw[0, k], 65536 * gw[3, k] + gw[2, k]]
            chunks.append(n)
            d += n
        stream.append(0)
    assert np.abs(bias_p).max(initial=0) <= qmath.INT32_MAX
    return np.array(stream, np.int64).astype(np.int32), bias_p.astype(np.int32), chunks


BYTES_ROWS = 4                   # fully_connected.h: QE_FC_BYTES_ROWS
BYTES_DEPTH_STEP = 8             # fully_connected.h: QE_FC_BYTES_DEPTH_STEP
# The widened input's arena scratch, at most (as the rows conv's SCRATCH_MAX): depths up to
# 2,048. A deeper layer keeps the reference kernel, which needs no scratch: the build falls back
# to the reference layout when the firmware overflows the board's flash, not its RAM.
BYTES_SCRATCH_MAX = 8192


def bytes_fc_words(w: np.ndarray, bias: np.ndarray | None, input_offset: int,
                   filter_offset: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The layout of qe_fully_connected_s8_bytes (fully_connected.h; the cortex-m0 and rv32
    variants) for int8 weights [rows][depth]: (uint32 words, int32 bias' per padded row, padded
    depth), or None when some w' = w + filter_offset is not an int8 (then no byte holds it).
    Rows in groups of 4 (the last padded with zero rows), the depth padded with zero weights to a
    multiple of BYTES_DEPTH_STEP; per group and input d one word, byte k = w'[4g+k][d] + 128.
    bias' = bias + input_offset * sum_d w'. No bound besides the reference lowering's (the
    accumulator in int32): the kernel's sums are exact modulo 2^32 (fully_connected.h)."""
    rows, depth = w.shape
    wp = w.astype(np.int64) + filter_offset
    if wp.size and (wp.min() < -128 or wp.max() > 127):
        return None
    b = (np.zeros(rows, np.int64) if bias is None else bias.astype(np.int64)) \
        + input_offset * wp.sum(axis=1)
    r_pad = -(-rows // BYTES_ROWS) * BYTES_ROWS
    d_pad = -(-depth // BYTES_DEPTH_STEP) * BYTES_DEPTH_STEP
    full = np.zeros((r_pad, d_pad), np.int64)
    full[:rows, :depth] = wp
    u = (full + 128).reshape(r_pad // BYTES_ROWS, BYTES_ROWS, d_pad)     # [group][k][d]
    words = u[:, 0] | (u[:, 1] << 8) | (u[:, 2] << 16) | (u[:, 3] << 24)  # [group][d]
    bias_p = np.zeros(r_pad, np.int64)
    bias_p[:rows] = b
    assert np.abs(bias_p).max(initial=0) <= qmath.INT32_MAX
    return words.reshape(-1).astype(np.uint32), bias_p.astype(np.int32), d_pad


def saturation_bounds(multiplier: int, shift: int, offset: int, act_min: int,
                      act_max: int) -> tuple[int, int]:
    """(sat_low, sat_above) of qe_fc_s8_pairs_params_t: accumulators <= sat_low give act_min,
    > sat_above act_max (output_saturation's bisection; INT32_MIN, INT32_MAX: none, as for
    shifts >= 0, where requantization wraps and is not monotone)."""
    f = lambda x: qmath.requantize_output(x, multiplier, shift, offset, act_min, act_max)  # noqa: E731
    low, high = output_saturation(multiplier, shift, offset, act_min, act_max)
    lo_i, hi_i = -(1 << 31), (1 << 31) - 1
    if low == lo_i or f(low) != act_min:          # none (or INT32_MIN itself: never reached)
        low = lo_i
    above = hi_i if (high == hi_i or f(high) != act_max) else max(high - 1, lo_i)
    return low, above


STEPS_MAX_SPAN = 1 << 21         # the widest unsaturated accumulator range given a step table
STEPS_SHIFT = 24                 # fully_connected.h: the output byte is the top byte


def step_table(multiplier: int, shift: int, offset: int, act_min: int, act_max: int,
               sat_low: int, sat_above: int) -> tuple[int, int, int, np.ndarray] | None:
    """The output stage as a step table (qe_fc_s8_pairs_params_t's steps): for an accumulator
    a in (sat_low, sat_above], u = a - lo (lo = sat_low + 1), b = (u * mul + add) >> 24 (uint32,
    wrapping) is the output byte or one less, and the output is b + (u >= steps[b]): a multiply,
    a shift, one table load and one compare instead of the 64-bit product built from 16-bit
    halves (~36 instructions on ARMv6-M). With k(u) = out - act_min the output's index, add =
    add0 + act_min * 2^24 (mod 2^32) where (u * mul + add0) >> 24 is k or k - 1 and u * mul +
    add0 < 2^32, so the top byte is act_min + that, modulo 256: what STRB stores; steps[b] is
    the least u whose index is >= (b - act_min) mod 256 + 1 (span + 1 where none is). Returns
    (lo, mul, add, steps[256]) or None when it does not apply: left shifts (requantization
    wraps: not monotone), no saturation bound, an unsaturated range wider than STEPS_MAX_SPAN, or
    no mul, add0 that is at most one low everywhere.

    Exact by enumeration, not by an argument: the index of every u in [0, span] is computed
    with TFLM's arithmetic (the formula of requant_right_output, checked against
    qmath.requantize_output at every step's edges), and the approximation is checked at every
    u (b + 1 never wraps: it happens only below act_max)."""
    lo_i, hi_i = -(1 << 31), (1 << 31) - 1
    if shift > -1 or multiplier < 0 or sat_low == lo_i or sat_above == hi_i:
        return None
    lo, span = sat_low + 1, sat_above - sat_low - 1
    if span < 0 or span > STEPS_MAX_SPAN:
        return None
    e, sh = -shift, STEPS_SHIFT
    a = np.arange(lo, sat_above + 1, dtype=np.int64)
    q = (a * multiplier + (1 << 30) + (1 << (30 + e)) - (a < 0) * (1 << 31)) >> (31 + e)
    k = np.clip(q + offset, act_min, act_max) - act_min
    n_steps = act_max - act_min
    if np.any(np.diff(k) < 0):
        return None
    edges = np.searchsorted(k, np.arange(n_steps + 2), side="left").astype(np.int64)
    f = lambda x: qmath.requantize_output(x, multiplier, shift, offset, act_min, act_max)  # noqa: E731
    for j in range(1, n_steps + 1):              # the twin agrees at every edge
        if edges[j] <= span and (f(lo + int(edges[j])) - act_min < j
                                 or (edges[j] > 0 and f(lo + int(edges[j]) - 1) - act_min >= j)):
            return None
    u = a - lo
    mul = (multiplier << sh) >> (31 + e)         # floor(slope * 2^24)
    if mul <= 0 or span * mul >= (1 << 32):
        return None
    add0 = int((((k + 1) << sh) - u * mul - 1).min())   # the largest with i <= k everywhere
    if add0 < 0 or span * mul + add0 >= (1 << 32):
        return None
    i = (u * mul + add0) >> sh
    if not np.all(i >= k - 1):
        return None
    steps = np.full(256, span + 1, np.int64)
    for idx in range(n_steps + 1):               # byte of index idx: its next edge
        steps[(act_min + idx) & 0xFF] = edges[idx + 1]
    return lo, int(mul), (add0 + (act_min << sh)) & 0xFFFFFFFF, steps


def lower_fully_connected_pairs(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """For the cortex-m0 variant: an int8 per-tensor FULLY_CONNECTED with accum_depth <=
    PACKED_MAX_DEPTH gets the chunked pair layout (pairs_fc_stream, qe_fully_connected_s8_pairs),
    a deeper one the byte lanes where every w' is an int8 and the widened input fits
    BYTES_SCRATCH_MAX (bytes_fc_words, qe_fully_connected_s8_bytes, with 4 x the padded depth
    bytes of arena scratch), an int8 x
    int4 one the int4 row-pair layout (fully_connected_s4.py); every other one the lowering of
    the reference boards."""
    kernel = lower_fully_connected(op, model, pname)     # validates the op completely
    if kernel.call.startswith("qe_fully_connected_s4("):
        return lower_fully_connected_s4_pairs(op, model, pname, kernel)
    if not kernel.call.startswith("qe_fully_connected_s8("):
        return kernel
    x, w, bias, out, act = weighted_operands(op, model, "weights")
    output_depth, accum_depth = w.shape
    scratch = 0
    if accum_depth > PACKED_MAX_DEPTH:
        laid = bytes_fc_words(w.data, None if bias is None else bias.data, -x.zero_point,
                              -w.zero_point)
        if laid is None or 4 * laid[2] > BYTES_SCRATCH_MAX:
            return kernel
        words, bias_p, d_pad = laid
        scratch = 4 * d_pad                       # the widened input of one batch
    else:
        stream, bias_p, chunks = pairs_fc_stream(w.data, None if bias is None else bias.data,
                                                 -x.zero_point, -w.zero_point)
    batches = out.size // output_depth
    real, multiplier, shift, act_min, act_max = per_tensor_stage(x, w, out, act)
    bname = f"{pname}_bias"
    if scratch:
        wname = c_ident(w.name, f"w{w.index}_") + "_bytes"
        consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g}, zero point {w.zero_point}: "
                  f"byte lanes for the kernel variant (fully_connected.h, qe_fully_connected_s8_bytes), "
                  f"{output_depth} rows in groups of {BYTES_ROWS}, per input one word of their "
                  f"w' + 128, depth {accum_depth} padded to {d_pad} */\n"
                  + c_array("uint32_t", wname, words, 8, lambda v: f"{int(v)}u")]
        const_bytes = 4 * words.size + 4 * bias_p.size
    else:
        wname = c_ident(w.name, f"w{w.index}_") + "_pairs"
        consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g}, zero point {w.zero_point}: "
                  f"chunked row pairs for the kernel variant (fully_connected.h), {output_depth} rows "
                  f"in groups of {PAIRS_ROWS}, depth {accum_depth} in {len(chunks)} chunks of int16 "
                  f"sums (mean length {np.mean(chunks):.1f}) */\n"
                  + c_array("int32_t", wname, stream, 8, lambda v: str(int(v)))]
        const_bytes = 4 * stream.size + 4 * bias_p.size
    consts.append("/* bias + input_offset * sum(weights + filter_offset), per padded row */\n"
                  + c_array("int32_t", bname, bias_p, 8, lambda v: str(int(v))))
    sat_low, sat_above = saturation_bounds(multiplier, shift, out.zero_point, act_min, act_max)
    table = step_table(multiplier, shift, out.zero_point, act_min, act_max, sat_low, sat_above)
    steps_c = ""
    if table is not None:
        lo, mul, add, steps = table
        sname = f"{pname}_steps"
        consts.append(f"/* the output stage as steps (step_table): per output byte, the least "
                      f"accumulator - ({lo}) giving the next one */\n"
                      + c_array("uint32_t", sname, steps, 8, lambda v: f"{int(v)}u"))
        const_bytes += 4 * steps.size
        steps_c = (f"    .steps = {sname},\n    .steps_lo = {c_int32(lo)},\n"
                   f"    .steps_mul = {mul}u,\n    .steps_add = {add}u,\n")
    params = (f"static const qe_fc_s8_pairs_params_t {pname} = {{\n"
              f"    .output_offset = {out.zero_point},\n"
              f"    .output_multiplier = {multiplier},  /* {real:.17g} = m * 2^(shift - 31) */\n"
              f"    .output_shift = {shift},\n"
              f"    .activation_min = {act_min},\n"
              f"    .activation_max = {act_max},\n"
              f"    .sat_low = {c_int32(sat_low)},  /* <= this: activation_min */\n"
              f"    .sat_above = {c_int32(sat_above)},  /* > this: activation_max */\n"
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .output_depth = {output_depth}u,\n{steps_c}}};\n")
    ref_bytes = w.size + (4 * bias.size if bias is not None else 0)
    if scratch:
        call = (f"qe_fully_connected_s8_bytes(&{pname}, (const int8_t *)@T{x.index}@, {wname}, "
                f"{bname}, (int8_t *)@T{out.index}@, (int32_t *)@S{op.index}@);")
        return Kernel(op, call, params, consts, const_bytes,
                      kernel.comment.replace("FULLY_CONNECTED int8:", "FULLY_CONNECTED int8 (bytes):")
                      + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B), "
                      f"{scratch} B of scratch", scratch_bytes=scratch,
                      layout_extra_bytes=const_bytes - ref_bytes)
    call = (f"qe_fully_connected_s8_pairs(&{pname}, (const int8_t *)@T{x.index}@, {wname}, "
            f"{bname}, (int8_t *)@T{out.index}@);")
    return Kernel(op, call, params, consts, const_bytes,
                  kernel.comment.replace("FULLY_CONNECTED int8:", "FULLY_CONNECTED int8 (pairs):")
                  + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B)",
                  layout_extra_bytes=const_bytes - ref_bytes)
