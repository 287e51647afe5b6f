"""FULLY_CONNECTED: firmware/core/kernels/fully_connected.c, TFLM's fully_connected.cc.

output[b][o] = act(bias[o] + sum_d input[b][d] * weights[o][d]), weights [out][in], constant:

- int8 with per-tensor weights: reference_integer_ops::FullyConnected (qe_fully_connected_s8);
  the bias scale must be input scale x weight scale (within 2 % of an output step, as TFLM);
- int8 with per-channel symmetric weights: FullyConnectedPerChannel (qe_fully_connected_s8_pc),
  output [batches, depth] only;
- int16x8: int16 activations (zero point 0), int8 weights per tensor or per channel (symmetric),
  int64 bias: reference_integer_ops::FullyConnected<int64_t> (qe_fully_connected_s16);
- float32: reference_ops::FullyConnected (qe_fully_connected_f32);
- the int8-acc accumulator head (converters/head.py): int8 input, symmetric weights, the int32
  accumulators scaled to the float32 graph output (qe_fully_connected_s8_acc_f32);
- on boards with an optimized kernel variant (ops/__init__.py, VARIANT_LOWERINGS), int8 with
  per-tensor weights and accum_depth <= 128: the same op with the weights laid out for the
  variant's kernel and both zero points folded in (pack_fc_weights, qe_fully_connected_s8_packed);
- fused NONE/RELU/RELU6/RELU_N1_TO_1, optional bias, batches/accum_depth/output_depth <= 65535,
  no shuffled weights; shapes whose accumulator could overflow (int32; int16x8: 48 bits) and
  float32 input with int8 weights (a hybrid, dynamic-range model) are refused.
"""
from __future__ import annotations

import numpy as np

from quarl_edge.errors import ModelError

from .. import qmath
from ..emit import c_array, c_comment, c_float, c_float_limit, c_ident, c_int64
from ..head import HEAD_READOUT_OPTION
from ..tflite_model import Operator, TFLiteModel
from .common import (Kernel, activation_tensor, bias_array, per_tensor, u16,
                     unsupported, weight_quantization, weighted_operands)

SUPPORTED = ("FULLY_CONNECTED int8 (per-tensor or per-channel weights), int16x8, float32",)
KERNEL_HEADERS = ("fully_connected.h",)



def _per_tensor_stage(x, w, out, act) -> tuple[float, int, int, int, int]:
    """The per-tensor int8 output stage of a FULLY_CONNECTED: the real multiplier input scale x
    weight scale / output scale as TFLM computes it, its QuantizeMultiplier, and the fused
    activation's int8 range: (real, multiplier, shift, act_min, act_max)."""
    real = qmath.effective_scale(x.scale, w.scale, out.scale)
    multiplier, shift = qmath.quantize_multiplier(real)
    act_min, act_max = qmath.activation_range_quantized(act, out.scale, out.zero_point)
    return real, multiplier, shift, act_min, act_max

def lower_fully_connected(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    x, w, bias, out, act = weighted_operands(op, model, "weights")
    if op.options.get("weightsFormat", 0) != 0:
        raise unsupported(op, model, "shuffled weights format")
    if not w.is_constant:
        raise unsupported(op, model, f"weights '{w.name}' are not constant")
    if bias is not None and not bias.is_constant:
        raise unsupported(op, model, f"bias '{bias.name}' is not constant")
    if x.dtype == "float32" and w.dtype in ("int8", "uint8", "int4"):
        raise unsupported(op, model, "float32 input with int8 weights is a hybrid (dynamic-range "
                                     "quantized) model; convert with full int8 quantization "
                                     "(representative dataset) or keep it float32")
    if len(w.shape) != 2:
        raise unsupported(op, model, f"weights of shape {list(w.shape)}, expected [out, in]")
    output_depth, accum_depth = w.shape
    if not out.shape or out.shape[-1] != output_depth:
        raise ModelError(f"op {op.index} FULLY_CONNECTED: output {list(out.shape)} does not end in "
                         f"{output_depth} (weights {list(w.shape)})")
    batches = out.size // output_depth if output_depth else 0
    if accum_depth == 0 or x.size != batches * accum_depth:
        raise ModelError(f"op {op.index} FULLY_CONNECTED: input {list(x.shape)} is not "
                         f"{batches} batches of {accum_depth}")
    for what, v in (("batches", batches), ("accum_depth", accum_depth), ("output_depth", output_depth)):
        u16(op, model, what, v)
    wname = c_ident(w.name, f"w{w.index}_")
    comment_shapes = (f"{x.describe()} x {w.describe()}"
                      + (f" + {bias.describe()}" if bias is not None else "")
                      + f" -> {out.describe()}, {act}")

    if op.options.get(HEAD_READOUT_OPTION):
        return _lower_fc_acc(op, model, pname, x, w, bias, out, act, batches, accum_depth,
                             output_depth, wname, comment_shapes)
    if (x.dtype == "int16" or (x.dtype == "int8" and w.quantization is not None
                               and w.quantization.per_channel)):
        return _lower_fc_pc(op, model, pname, x, w, bias, out, act, batches, accum_depth,
                            output_depth, wname, comment_shapes)
    if x.dtype == "int8":
        return _lower_fc_s8(op, model, pname, x, w, bias, out, act, batches, accum_depth,
                            output_depth, wname, comment_shapes)
    if x.dtype == "float32":
        return _lower_fc_f32(op, model, pname, x, w, bias, out, act, batches, accum_depth,
                             output_depth, wname, comment_shapes)
    raise unsupported(op, model, f"input type {x.dtype}")


PACKED_ROWS = 4          # fully_connected.h: QE_FC_PACKED_ROWS
PACKED_MAX_DEPTH = 128   # fully_connected.h: QE_FC_PACKED_MAX_DEPTH


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


def dsp_mm_stage(multiplier: int, shift: int, act_min: int, act_max: int) -> bool:
    """Whether the cortex-m-dsp packed kernel takes its 5-instruction output stage
    (cortex-m-dsp/dsp.h, requant_mm_init: right shift 1..21, a normalized multiplier, the full
    int8 range). Only a speed choice here (which lowering), never a correctness one."""
    return -21 <= shift <= -1 and multiplier >= 1 << 30 and (act_min, act_max) == (-128, 127)


def lower_fully_connected_packed(op: Operator, model: TFLiteModel, pname: str,
                                 min_rows: int = 1, min_rows_mm: int | None = None) -> Kernel:
    """For boards with an optimized variant: an int8 per-tensor FULLY_CONNECTED with accum_depth
    <= PACKED_MAX_DEPTH (and at least min_rows outputs; min_rows_mm instead, if given, when the
    cortex-m-dsp output stage dsp_mm_stage applies) gets the packed layout
    (qe_fully_connected_s8_packed); every other one the lowering of the reference boards."""
    kernel = lower_fully_connected(op, model, pname)     # validates the op completely
    if not kernel.call.startswith("qe_fully_connected_s8("):
        return kernel
    x, w, bias, out, act = weighted_operands(op, model, "weights")
    output_depth, accum_depth = w.shape
    real, multiplier, shift, act_min, act_max = _per_tensor_stage(x, w, out, act)
    if min_rows_mm is not None and dsp_mm_stage(multiplier, shift, act_min, act_max):
        min_rows = min_rows_mm
    if accum_depth > PACKED_MAX_DEPTH or output_depth < min_rows:
        return kernel
    batches = out.size // output_depth
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


AVR_ROWS = 4              # fully_connected.h: QE_FC_AVR_ROWS
AVR_MAX_CHUNK = 255       # a chunk's length is one byte (0 ends a group's stream)
AVR_DOT_LIMIT = (1 << 23) - 1   # the kernel's per-row running sum is 24 bits


def _chunk_fits(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Whether sum_d w'[d] * x[d] over a chunk lies in int16 for every int8 x, per row, given the
    chunk's sum of positive weights `pos` and of |negative weights| `neg`: its largest value is
    127 pos + 128 neg, its smallest -128 pos - 127 neg."""
    return (127 * pos + 128 * neg <= 32767) & (128 * pos + 127 * neg <= 32768)


def _greedy_chunks(gw: np.ndarray, max_len: int) -> list[int]:
    """The lengths of the chunks a row group's weights gw [rows][depth] are cut into: from the
    start, each as long as it can be (at most max_len) with every row's sum over it in int16
    for every int8 input (_chunk_fits)."""
    depth, d, out = gw.shape[1], 0, []
    while d < depth:
        pos = np.zeros(gw.shape[0], np.int64)
        neg = np.zeros(gw.shape[0], np.int64)
        n = 0
        while d + n < depth and n < max_len:
            col = gw[:, d + n]
            p2, n2 = pos + np.maximum(col, 0), neg + np.maximum(-col, 0)
            if not _chunk_fits(p2, n2).all():
                break
            pos, neg, n = p2, n2, n + 1
        assert n >= 1                   # one product (|w'| <= 255, x in int8) always fits
        out.append(n)
        d += n
    return out


PAIRS_ROWS = 4                   # fully_connected.h: QE_FC_PAIRS_ROWS


def pairs_fc_stream(w: np.ndarray, bias: np.ndarray | None, input_offset: int,
                    filter_offset: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The layout of qe_fully_connected_s8_pairs (fully_connected.h; the cortex-m0 variant) for
    int8 weights [rows][depth]: (int32 word stream, int32 bias' per padded row, chunk lengths).
    w' = w + filter_offset (in [-255, 255]), bias' = bias + input_offset * sum_d w'; rows in
    groups of 4 (the last padded with zero rows); per group chunks cut as for the avr stream
    (_greedy_chunks: every row's chunk sum in int16 for every int8 input), each one word L, then
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
        for n in _greedy_chunks(gw, 65535):
            stream.append(n)
            for k in range(d, d + n):
                stream += [65536 * gw[1, k] + gw[0, k], 65536 * gw[3, k] + gw[2, k]]
            chunks.append(n)
            d += n
        stream.append(0)
    assert np.abs(bias_p).max(initial=0) <= qmath.INT32_MAX
    return np.array(stream, np.int64).astype(np.int32), bias_p.astype(np.int32), chunks


def saturation_bounds(multiplier: int, shift: int, offset: int, act_min: int,
                      act_max: int) -> tuple[int, int]:
    """(sat_low, sat_above) of qe_fc_s8_pairs_params_t: accumulators <= sat_low give act_min,
    > sat_above act_max (avr_output_stage's bisection; INT32_MIN, INT32_MAX: none, as for
    shifts >= 0, where requantization wraps and is not monotone)."""
    st = avr_output_stage(multiplier, shift, offset, act_min, act_max)
    f = lambda x: qmath.requantize_output(x, multiplier, shift, offset, act_min, act_max)  # noqa: E731
    low, high = st["sat_low"], st["sat_high"]
    lo_i, hi_i = -(1 << 31), (1 << 31) - 1
    if low == lo_i or f(low) != act_min:          # none (or INT32_MIN itself: never reached)
        low = lo_i
    above = hi_i if (high == hi_i or f(high) != act_max) else max(high - 1, lo_i)
    return low, above


def lower_fully_connected_pairs(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """For the cortex-m0 variant: an int8 per-tensor FULLY_CONNECTED with accum_depth <=
    PACKED_MAX_DEPTH gets the chunked pair layout (pairs_fc_stream, qe_fully_connected_s8_pairs);
    every other one the lowering of the reference boards."""
    kernel = lower_fully_connected(op, model, pname)     # validates the op completely
    if not kernel.call.startswith("qe_fully_connected_s8("):
        return kernel
    x, w, bias, out, act = weighted_operands(op, model, "weights")
    output_depth, accum_depth = w.shape
    if accum_depth > PACKED_MAX_DEPTH:
        return kernel
    stream, bias_p, chunks = pairs_fc_stream(w.data, None if bias is None else bias.data,
                                             -x.zero_point, -w.zero_point)
    batches = out.size // output_depth
    real, multiplier, shift, act_min, act_max = _per_tensor_stage(x, w, out, act)
    wname = c_ident(w.name, f"w{w.index}_") + "_pairs"
    bname = f"{pname}_bias"
    consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g}, zero point {w.zero_point}: "
              f"chunked row pairs for the kernel variant (fully_connected.h), {output_depth} rows "
              f"in groups of {PAIRS_ROWS}, depth {accum_depth} in {len(chunks)} chunks of int16 "
              f"sums (mean length {np.mean(chunks):.1f}) */\n"
              + c_array("int32_t", wname, stream, 8, lambda v: str(int(v))),
              "/* bias + input_offset * sum(weights + filter_offset), per padded row */\n"
              + c_array("int32_t", bname, bias_p, 8, lambda v: str(int(v)))]
    const_bytes = 4 * stream.size + 4 * bias_p.size
    sat_low, sat_above = saturation_bounds(multiplier, shift, out.zero_point, act_min, act_max)
    params = (f"static const qe_fc_s8_pairs_params_t {pname} = {{\n"
              f"    .output_offset = {out.zero_point},\n"
              f"    .output_multiplier = {multiplier},  /* {real:.17g} = m * 2^(shift - 31) */\n"
              f"    .output_shift = {shift},\n"
              f"    .activation_min = {act_min},\n"
              f"    .activation_max = {act_max},\n"
              f"    .sat_low = {_c_int32(sat_low)},  /* <= this: activation_min */\n"
              f"    .sat_above = {_c_int32(sat_above)},  /* > this: activation_max */\n"
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .output_depth = {output_depth}u,\n}};\n")
    call = (f"qe_fully_connected_s8_pairs(&{pname}, (const int8_t *)@T{x.index}@, {wname}, "
            f"{bname}, (int8_t *)@T{out.index}@);")
    ref_bytes = w.size + (4 * bias.size if bias is not None else 0)
    return Kernel(op, call, params, consts, const_bytes,
                  kernel.comment.replace("FULLY_CONNECTED int8:", "FULLY_CONNECTED int8 (pairs):")
                  + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B)",
                  layout_extra_bytes=const_bytes - ref_bytes)


def avr_fc_stream(w: np.ndarray, bias: np.ndarray | None, input_offset: int,
                  filter_offset: int) -> tuple[np.ndarray, np.ndarray, list[int]] | None:
    """The AVR variant's layout of fully_connected.h (qe_fully_connected_s8_avr) for int8 weights
    [rows][depth]: (int8 weight stream, int32 bias' per padded row, chunk lengths), or None when
    the weights do not allow it (w' = w + filter_offset outside int8, or a row's sum |w'| too large
    for the 24-bit running sum). bias' = bias + input_offset * sum_d w' (exact integers). Rows in
    groups of AVR_ROWS (the last padded with zero rows); per group the depth is cut into chunks,
    greedily as long as possible, such that no row's sum over a chunk can leave int16 for any
    int8 input (so the kernel sums each chunk in 16 bits, exactly); per chunk one byte, its length
    L (1..255), then L x AVR_ROWS weights, input by input (the group's rows for d, then for d+1...);
    a 0 byte ends the group."""
    rows, depth = w.shape
    wp = w.astype(np.int64) + filter_offset
    if wp.size and (wp.min() < -128 or wp.max() > 127):
        return None
    if np.abs(wp).sum(axis=1).max(initial=0) * 128 > AVR_DOT_LIMIT:
        return None
    b = (np.zeros(rows, np.int64) if bias is None else bias.astype(np.int64)) \
        + input_offset * wp.sum(axis=1)
    r_pad = -(-rows // AVR_ROWS) * AVR_ROWS
    full = np.zeros((r_pad, depth), np.int64)
    full[:rows] = wp
    bias_p = np.zeros(r_pad, np.int64)
    bias_p[:rows] = b
    stream, chunks = [], []
    for g in range(r_pad // AVR_ROWS):
        gw = full[g * AVR_ROWS:(g + 1) * AVR_ROWS]          # [AVR_ROWS][depth]
        d = 0
        for n in _greedy_chunks(gw, AVR_MAX_CHUNK):
            stream.append(n)
            stream.extend(gw[:, d:d + n].T.reshape(-1))
            chunks.append(n)
            d += n
        stream.append(0)
    assert np.abs(bias_p).max(initial=0) <= qmath.INT32_MAX
    return (np.array(stream, np.int64).astype(np.uint8).view(np.int8), bias_p.astype(np.int32),
            chunks)


def avr_output_stage(multiplier: int, shift: int, offset: int, act_min: int,
                     act_max: int) -> dict:
    """The avr kernel's output stage constants (qe_fc_s8_avr_params_t), computed here so that the
    board only compares, multiplies and picks a byte. f(x) = qmath.requantize_output(x, ...) is
    non-decreasing in x for right shifts (shift <= -1: two roundings to nearest of x * m / 2^31
    and / 2^e), so
      - sat_low: the largest int32 x with f(x) == act_min (INT32_MIN if none), sat_high: the
        smallest with f(x) == act_max (INT32_MAX if none), found by bisection on the twin;
      - for sat_low < x < sat_high the output lies strictly inside (act_min, act_max), so it is
        f(x) = requant(x) + offset, and requant(x) = floor((x * m + R) / 2^(31+e)) with
        R = 2^30 + 2^(30+e) - (x < 0) * 2^31 (the cortex-m variants' exact formula); scaled by
        2^j (j = -(31+e) mod 8) numerator and denominator that is byte k = (31+e+j) / 8 of
        x * m' + R' (m' = m * 2^j, R' = R * 2^j), of which only its low byte matters.
    `fast` is 1 when the board may use this: shift <= -1, the byte within the 64-bit sum
    (k <= 7), and every x strictly between the bounds a 24-bit integer (the kernel multiplies
    3 bytes of x by 5 of m'). Else the kernel calls requant.h's output stage."""
    f = lambda x: qmath.requantize_output(x, multiplier, shift, offset, act_min, act_max)  # noqa: E731
    lo_i, hi_i = -(1 << 31), (1 << 31) - 1
    out = dict(sat_low=lo_i, sat_high=hi_i, fast=0, m_prime=[0] * 5, round_pos=[0] * 5,
               round_neg=[0] * 5, byte_moves=0)
    if shift > -1 or multiplier < 0:
        return out
    if f(lo_i) == act_min:                   # the largest x with f(x) == act_min
        a, b = lo_i, hi_i
        if f(b) == act_min:
            a = b
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (mid, b) if f(mid) == act_min else (a, mid)
        out["sat_low"] = a
    if f(hi_i) == act_max:                   # the smallest x with f(x) == act_max
        a, b = lo_i, hi_i
        if f(a) == act_max:
            b = a
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (a, mid) if f(mid) == act_max else (mid, b)
        out["sat_high"] = b
    e = -shift
    j = (-(31 + e)) % 8
    k = (31 + e + j) // 8
    m_p = multiplier << j
    r_pos = ((1 << 30) + (1 << (30 + e))) << j
    r_neg = ((1 << 30) + (1 << (30 + e)) - (1 << 31)) << j
    byte = lambda v, i: (v >> (8 * i)) & 0xFF  # noqa: E731
    if k <= 7 and out["sat_low"] >= -(1 << 23) - 1 and out["sat_high"] <= (1 << 23):
        assert m_p < 1 << 40 and r_pos % (1 << 24) == 0 and r_neg % (1 << 24) == 0
        assert r_pos < 1 << 64 and r_neg >= 0
        out.update(fast=1, m_prime=[byte(m_p, i) for i in range(5)],
                   round_pos=[byte(r_pos, i) for i in range(3, 8)],
                   round_neg=[byte(r_neg, i) for i in range(3, 8)], byte_moves=k - 4)
    return out


def _c_int32(v: int) -> str:
    return "(-2147483647 - 1)" if v == -(1 << 31) else str(v)


def avr_output_stage_c(st: dict) -> str:
    """avr_output_stage's constants as designated initializers of qe_fc_s8_avr_params_t."""
    b = lambda v: "{" + ", ".join(f"0x{x:02x}u" for x in v) + "}"  # noqa: E731
    return (f"    .sat_low = {_c_int32(st['sat_low'])},  /* <= this: activation_min */\n"
            f"    .sat_high = {_c_int32(st['sat_high'])},  /* >= this: activation_max */\n"
            f"    .fast = {st['fast']}u,\n"
            f"    .m_prime = {b(st['m_prime'])},\n"
            f"    .round = {{{b(st['round_pos'])}, {b(st['round_neg'])}}},\n"
            f"    .byte_moves = {st['byte_moves']}u,\n")


def avr_output_stage_value(st: dict, x: int, offset: int, act_min: int, act_max: int) -> int:
    """What the avr kernel's fast output stage computes from avr_output_stage's constants (the
    Python model of its asm, for the tests)."""
    if x <= st["sat_low"]:
        return act_min
    if x >= st["sat_high"]:
        return act_max
    m_p = int.from_bytes(bytes(st["m_prime"]), "little")
    r = int.from_bytes(bytes(st["round_neg" if x < 0 else "round_pos"]), "little") << 24
    q = ((x * m_p + r) >> (8 * (4 + st["byte_moves"]))) & 0xFF
    return ((q + offset + 128) & 0xFF) - 128


def lower_fully_connected_avr(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """For the avr variant: an int8 per-tensor FULLY_CONNECTED whose weights allow it
    (avr_fc_stream) gets the chunked stream layout (qe_fully_connected_s8_avr); every other one
    the lowering of the reference boards."""
    kernel = lower_fully_connected(op, model, pname)     # validates the op completely
    if not kernel.call.startswith("qe_fully_connected_s8("):
        return kernel
    x, w, bias, out, act = weighted_operands(op, model, "weights")
    output_depth, accum_depth = w.shape
    packed = avr_fc_stream(w.data, None if bias is None else bias.data, -x.zero_point,
                           -w.zero_point)
    if packed is None:
        return kernel
    stream, bias_p, chunks = packed
    batches = out.size // output_depth
    real, multiplier, shift, act_min, act_max = _per_tensor_stage(x, w, out, act)
    wname = c_ident(w.name, f"w{w.index}_") + "_avr"
    bname = f"{pname}_bias"
    consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g}, zero point {w.zero_point}: "
              f"the avr kernel's stream (fully_connected.h), {output_depth} rows in groups of "
              f"{AVR_ROWS}, depth {accum_depth} in {len(chunks)} chunks of 16-bit sums "
              f"(mean length {np.mean(chunks):.1f}) */\n"
              + c_array("int8_t", wname, stream, 16, lambda v: str(int(v))),
              "/* bias + input_offset * sum(weights + filter_offset), per padded row */\n"
              + c_array("int32_t", bname, bias_p, 8, lambda v: str(int(v)))]
    const_bytes = stream.size + 4 * bias_p.size
    st = avr_output_stage(multiplier, shift, out.zero_point, act_min, act_max)
    params = (f"static const qe_fc_s8_avr_params_t {pname} = {{\n"
              f"    .output_offset = {out.zero_point},\n"
              f"    .output_multiplier = {multiplier},  /* {real:.17g} = m * 2^(shift - 31) */\n"
              f"    .output_shift = {shift},\n"
              f"    .activation_min = {act_min},\n"
              f"    .activation_max = {act_max},\n"
              + avr_output_stage_c(st) +
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .output_depth = {output_depth}u,\n}};\n")
    call = (f"qe_fully_connected_s8_avr(&{pname}, (const int8_t *)@T{x.index}@, {wname}, "
            f"{bname}, (int8_t *)@T{out.index}@);")
    ref_bytes = w.size + (4 * bias.size if bias is not None else 0)
    return Kernel(op, call, params, consts, const_bytes,
                  kernel.comment.replace("FULLY_CONNECTED int8:", "FULLY_CONNECTED int8 (avr stream):")
                  + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B)",
                  layout_extra_bytes=const_bytes - ref_bytes)


def _lower_fc_s8(op, model, pname, x, w, bias, out, act, batches, accum_depth, output_depth,
                 wname, comment_shapes) -> Kernel:
    """int8 with per-tensor weights: TFLM's reference_integer_ops::FullyConnected."""
    activation_tensor(op, model, x.index, "int8", "input")
    activation_tensor(op, model, out.index, "int8", "output")
    if w.dtype != "int8":
        raise unsupported(op, model, f"int8 input with {w.dtype} weights")
    for t, what in ((x, "input"), (w, "weights"), (out, "output")):
        per_tensor(t, op, model, what)
    if bias is not None and bias.dtype != "int32":
        raise unsupported(op, model, f"bias '{bias.name}' is {bias.dtype}, expected int32")
    if bias is not None and bias.size != output_depth:
        raise ModelError(f"op {op.index} FULLY_CONNECTED: bias has {bias.size} values, "
                         f"expected {output_depth}")
    if bias is not None:
        # TFLM refuses a bias whose scale is not input_scale * weight_scale (within 2 %
        # of an output step): the kernel adds it to the accumulator as is.
        product = float(np.float32(x.scale)) * float(np.float32(w.scale))
        if abs(product - bias.scale) / out.scale > 0.02:
            raise ModelError(f"op {op.index} FULLY_CONNECTED: bias scale {bias.scale:g} is "
                             f"not input scale x weight scale ({product:g})")
    # int32 accumulator: reject shapes/values that could overflow it (UB in C).
    worst = (accum_depth * (128 + abs(w.zero_point)) * (128 + abs(x.zero_point))
             + (int(np.abs(bias.data.astype(np.int64)).max()) if bias is not None else 0))
    if worst > qmath.INT32_MAX:
        raise unsupported(op, model, f"the int32 accumulator could overflow "
                                     f"(accum_depth {accum_depth})")
    real = qmath.effective_scale(x.scale, w.scale, out.scale)
    multiplier, shift = qmath.quantize_multiplier(real)
    if not -31 <= shift <= 30:
        raise unsupported(op, model, f"requantization scale {real:g} is out of range")
    act_min, act_max = qmath.activation_range_quantized(act, out.scale, out.zero_point)
    consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g} */\n"
              + c_array("int8_t", wname, w.data, 16, lambda v: str(int(v)))]
    bname, bias_bytes = bias_array(bias, "int32_t", lambda v: str(int(v)), 8, consts)
    const_bytes = w.size + bias_bytes
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
    call = (f"qe_fully_connected_s8(&{pname}, (const int8_t *)@T{x.index}@, {wname}, "
            f"{bname}, (int8_t *)@T{out.index}@);")
    return Kernel(op, call, params, consts, const_bytes, "FULLY_CONNECTED int8: " + comment_shapes)


def _lower_fc_f32(op, model, pname, x, w, bias, out, act, batches, accum_depth, output_depth,
                  wname, comment_shapes) -> Kernel:
    """float32: TFLM's reference_ops::FullyConnected."""
    activation_tensor(op, model, x.index, "float32", "input")
    activation_tensor(op, model, out.index, "float32", "output")
    if w.dtype != "float32":
        raise unsupported(op, model, f"float32 input with {w.dtype} weights")
    if bias is not None and (bias.dtype != "float32" or bias.size != output_depth):
        raise unsupported(op, model, f"bias '{bias.name}' {bias.dtype} {list(bias.shape)}")
    for arr, t in ((w.data, w), (bias.data if bias is not None else None, bias)):
        if arr is not None and not np.all(np.isfinite(arr)):
            raise ModelError(f"op {op.index} FULLY_CONNECTED: '{t.name}' holds inf or NaN")
    lo, hi = qmath.activation_range_float(act)
    consts = [f"/* {c_comment(w.describe())} */\n" + c_array("float", wname, w.data, 6, c_float)]
    bname, bias_bytes = bias_array(bias, "float", c_float, 6, consts)
    const_bytes = 4 * w.size + bias_bytes
    params = (f"static const qe_fc_f32_params_t {pname} = {{\n"
              f"    .activation_min = {c_float_limit(lo)},\n    .activation_max = {c_float_limit(hi)},\n"
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .output_depth = {output_depth}u,\n}};\n")
    call = (f"qe_fully_connected_f32(&{pname}, (const float *)@T{x.index}@, {wname}, "
            f"{bname}, (float *)@T{out.index}@);")
    return Kernel(op, call, params, consts, const_bytes, "FULLY_CONNECTED float32: " + comment_shapes)


def _lower_fc_acc(op, model, pname, x, w, bias, out, act, batches, accum_depth, output_depth,
                  wname, comment_shapes) -> Kernel:
    """The int8-acc accumulator head (converters/head.py): int8 input, symmetric int8 weights
    (per tensor or per channel), float32 output = (float)acc * (input_scale * weight_scale[o])."""
    activation_tensor(op, model, x.index, "int8", "input")
    activation_tensor(op, model, out.index, "float32", "output")
    if w.dtype != "int8":
        raise unsupported(op, model, f"accumulator head with {w.dtype} weights")
    per_tensor(x, op, model, "input")
    wq = weight_quantization(op, model, w, "weights", output_depth, 0)
    if np.any(wq.zero_point != 0):
        raise unsupported(op, model, f"accumulator head weights '{w.name}' are not symmetric")
    if bias is not None and (bias.dtype != "int32" or bias.size != output_depth):
        raise unsupported(op, model, f"bias '{bias.name}' {bias.dtype} {list(bias.shape)}")
    worst = accum_depth * 128 * (128 + abs(x.zero_point)) + (
        int(np.abs(bias.data.astype(np.int64)).max()) if bias is not None else 0)
    if worst > qmath.INT32_MAX:
        raise unsupported(op, model, f"the int32 accumulator could overflow (accum_depth {accum_depth})")
    n_ch = len(wq.scale)
    # float32 of the double product of the two float32 scales (remedies.HeadAccumulators too).
    scales = [float(np.float32(float(np.float32(x.scale)) * float(np.float32(sc)))) for sc in wq.scale]
    consts = [f"/* {c_comment(w.describe())}, {n_ch} scale(s) */\n"
              + c_array("int8_t", wname, w.data, 16, lambda v: str(int(v))),
              c_array("float", f"{pname}_scales", scales, 6, c_float)]
    bname, bias_bytes = bias_array(bias, "int32_t", lambda v: str(int(v)), 8, consts)
    const_bytes = w.size + 4 * n_ch + bias_bytes
    params = (f"static const qe_fc_s8_acc_params_t {pname} = {{\n"
              f"    .input_offset = {-x.zero_point},\n    .scales = {pname}_scales,\n"
              f"    .channel_stride = {1 if n_ch > 1 else 0}u,\n"
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .output_depth = {output_depth}u,\n}};\n")
    call = (f"qe_fully_connected_s8_acc_f32(&{pname}, (const int8_t *)@T{x.index}@, {wname}, "
            f"{bname}, (float *)@T{out.index}@);")
    return Kernel(op, call, params, consts, const_bytes,
                  "FULLY_CONNECTED int8 -> float32 accumulator head (int8-acc): " + comment_shapes)


def _lower_fc_pc(op, model, pname, x, w, bias, out, act, batches, accum_depth, output_depth,
                 wname, comment_shapes) -> Kernel:
    """int8 FULLY_CONNECTED with per-channel weights, and the int16x8 one (per tensor or per
    channel): TFLM's FullyConnectedPerChannel and FullyConnected<int64_t> for int16."""
    dt = x.dtype
    activation_tensor(op, model, x.index, dt, "input")
    activation_tensor(op, model, out.index, dt, "output")
    if w.dtype != "int8":
        raise unsupported(op, model, f"{dt} input with {w.dtype} weights")
    for t, what in ((x, "input"), (out, "output")):
        per_tensor(t, op, model, what)
    wq = weight_quantization(op, model, w, "weights", output_depth, 0)
    n_ch = len(wq.scale)
    if n_ch > 1 and np.any(wq.zero_point != 0):
        raise unsupported(op, model, f"per-channel weights '{w.name}' are not symmetric")
    if dt == "int8" and len(out.shape) != 2:
        raise unsupported(op, model, f"per-channel int8 output of rank {len(out.shape)} "
                                     f"(TFLM's per-channel kernel reads [batches, depth] only)")
    if dt == "int16":
        for t, what in ((x, "input"), (out, "output")):
            if t.zero_point != 0:
                raise unsupported(op, model, f"int16 {what} '{t.name}' has zero point {t.zero_point}")
        if n_ch == 1 and int(wq.zero_point[0]) != 0:
            raise unsupported(op, model, f"int16x8 weights '{w.name}' are not symmetric")
    bias_ctype = "int64_t" if dt == "int16" else "int32_t"
    if bias is not None:
        if bias.dtype != bias_ctype[:-2]:
            raise unsupported(op, model, f"{dt} FULLY_CONNECTED with {bias.dtype} bias "
                                         f"'{bias.name}', expected {bias_ctype[:-2]}")
        if bias.size != output_depth:
            raise ModelError(f"op {op.index} FULLY_CONNECTED: bias has {bias.size} values, "
                             f"expected {output_depth}")
    qmin, qmax = (-128, 127) if dt == "int8" else (-32768, 32767)
    worst = accum_depth * 128 * (abs(qmin) + abs(x.zero_point)) + (
        int(np.abs(bias.data.astype(np.int64)).max()) if bias is not None else 0)
    limit = qmath.INT32_MAX if dt == "int8" else (1 << 47) - 1
    if worst > limit:
        raise unsupported(op, model, f"the accumulator could overflow (accum_depth {accum_depth})")
    mults, shifts = [], []
    for c in range(n_ch):
        real = qmath.effective_scale(x.scale, float(wq.scale[c]), out.scale)
        m, sh = qmath.quantize_multiplier(real)
        if not -31 <= sh <= (30 if dt == "int8" else 7):
            raise unsupported(op, model, f"requantization scale {real:g} is out of range")
        mults.append(m)
        shifts.append(sh)
    act_min, act_max = qmath.activation_range_quantized(act, out.scale, out.zero_point, qmin, qmax)
    ctype = "int8_t" if dt == "int8" else "int16_t"
    consts = [f"/* {c_comment(w.describe())}, {n_ch} scale(s) */\n"
              + c_array("int8_t", wname, w.data, 16, lambda v: str(int(v))),
              c_array("int32_t", f"{pname}_mult", mults, 6, str),
              c_array("int8_t", f"{pname}_shift", shifts, 16, str)]
    bname, bias_bytes = bias_array(bias, bias_ctype, c_int64 if dt == "int16" else str, 6, consts)
    const_bytes = w.size + 5 * n_ch + bias_bytes
    params = (f"static const qe_fc_pc_params_t {pname} = {{\n"
              f"    .input_offset = {-x.zero_point},\n    .output_offset = {out.zero_point},\n"
              f"    .activation_min = {act_min},\n    .activation_max = {act_max},\n"
              f"    .multipliers = {pname}_mult,\n    .shifts = {pname}_shift,\n"
              f"    .channel_stride = {1 if n_ch > 1 else 0}u,\n"
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .output_depth = {output_depth}u,\n}};\n")
    fn = "qe_fully_connected_s8_pc" if dt == "int8" else "qe_fully_connected_s16"
    call = (f"{fn}(&{pname}, (const {ctype} *)@T{x.index}@, {wname}, {bname}, "
            f"({ctype} *)@T{out.index}@);")
    kind = "per-channel int8" if dt == "int8" else f"int16x8 ({'per channel' if n_ch > 1 else 'per tensor'})"
    return Kernel(op, call, params, consts, const_bytes, f"FULLY_CONNECTED {kind}: " + comment_shapes)
