"""FULLY_CONNECTED with int4 weights on the avr variant (firmware/core/kernels/optimized/avr/
fully_connected_s4.c): an int8 x int4 per-tensor FULLY_CONNECTED whose weights + filter_offset
are int4 gets the avr int4 stream (fully_connected_s4.h, avr_s4_stream: u = w' + 8 in nibbles,
two rows per byte, chunks of 16-bit sums as the int8 stream), run by qe_fully_connected_s4_avr
with the int8 avr kernel's output stage (avr_output_stage, and for left shifts
avr_output_stage_left); every other one the reference lowering (ops/fully_connected_s4.py,
TFLite's packing)."""
from __future__ import annotations

import numpy as np

from .... import qmath
from ....emit import c_array, c_comment, c_ident
from ...common import Kernel, weighted_operands
from ...fully_connected import per_tensor_stage
from ...fully_connected_s4 import (int4_reference_bytes, offset_int4_rows, packed_int4,
                                   unpack_int4)
from ....tflite_model import Operator, TFLiteModel
from ..common import greedy_chunks
from .fully_connected import (AVR_DOT_LIMIT, AVR_MAX_CHUNK, AVR_ROWS, avr_output_stage,
                              avr_output_stage_c, lower_fully_connected_avr)

AVR_LEFT_MAX_SHIFT = 7      # m' = m * 2^(shift + 1) must fit the kernel's 5 bytes


def avr_s4_stream(w: np.ndarray, bias: np.ndarray | None, input_offset: int,
                  filter_offset: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The avr variant's int4 layout of fully_connected_s4.h for int4 weights [rows][depth]
    (integers): (uint8 stream, int32 bias' per padded row, chunk lengths). Per group of AVR_ROWS
    rows the depth is cut, greedily as long as possible, into chunks over which no row's sum of
    u x (u = w' + 8 in 0..15) can leave int16 for any int8 input; per chunk one byte, its length
    (1..255), then per input the bytes (u1 << 4 | u0), (u3 << 4 | u2); a 0 byte ends the group.
    Padding rows have nibbles 0. Raises ValueError when some w' = w + filter_offset is no int4
    or a row's dot product could leave the kernel's 24-bit running sum."""
    rows, depth = w.shape
    full, bias_p = offset_int4_rows(w, bias, input_offset, filter_offset, AVR_ROWS)
    if np.abs(full).sum(axis=1).max(initial=0) * 128 > AVR_DOT_LIMIT:
        raise ValueError("a row's dot product could leave 24 bits")
    u = full + 8
    u[rows:] = 0
    stream, chunks = [], []
    for g in range(len(u) // AVR_ROWS):
        gu = u[g * AVR_ROWS:(g + 1) * AVR_ROWS]               # [AVR_ROWS][depth], 0..15
        by = np.stack([gu[0] | (gu[1] << 4), gu[2] | (gu[3] << 4)], axis=1)   # [depth][2]
        d = 0
        for n in greedy_chunks(gu, AVR_MAX_CHUNK):
            stream.append(n)
            stream.extend(by[d:d + n].reshape(-1))
            chunks.append(n)
            d += n
        stream.append(0)
    return np.array(stream, np.uint8), bias_p.astype(np.int32), chunks


def saturation_within(f, bound: int, act_min: int, act_max: int) -> tuple[int, int]:
    """(sat_low, sat_high) of a non-decreasing f on the accumulators [-bound, bound]: the largest
    x there with f(x) == act_min (-bound - 1 if none), the smallest with f(x) == act_max
    (bound + 1 if none), by bisection."""
    lo, hi = -bound, bound
    sat_low, sat_high = lo - 1, hi + 1
    if f(lo) == act_min:
        a, b = lo, hi + 1                     # f(a) == act_min; b is past the last such x
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (mid, b) if f(mid) == act_min else (a, mid)
        sat_low = a
    if f(hi) == act_max:
        a, b = lo - 1, hi                     # f(b) == act_max; a is before the first such x
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (a, mid) if f(mid) == act_max else (mid, b)
        sat_high = b
    return sat_low, sat_high


def avr_output_stage_left(multiplier: int, shift: int, offset: int, act_min: int, act_max: int,
                          acc_bound: int) -> dict:
    """avr_output_stage's constants for a left shift (0 <= shift <= AVR_LEFT_MAX_SHIFT), which
    int4's weight scales (~16x int8's) make common: for the accumulators |x| <= acc_bound that
    the op can produce, with acc_bound * 2^shift in int32 (TFLM's x * 2^shift does not wrap),
    TFLM's requant(x) = SaturatingRoundingDoublingHighMul(x * 2^shift, m) is floor((x * m *
    2^shift + 2^30) / 2^31) for both signs (its nudge 1 - 2^30 for negative products, then the
    division's truncation towards zero, is that floor), so it is byte 4 of x * m' + r' with m' =
    m * 2^(shift+1) (< 2^39) and r' = 2^31: the int8 kernel's output stage with byte_moves 0 and
    one rounding constant for both signs. f is non-decreasing there (m >= 0): sat_low / sat_high
    by bisection over [-acc_bound, acc_bound]; fast = 1 when every x strictly between them is a
    24-bit integer. Other shifts: avr_output_stage (right shifts; else fast = 0)."""
    if shift <= -1 or shift > AVR_LEFT_MAX_SHIFT or multiplier < 0 \
            or acc_bound * (1 << shift) > qmath.INT32_MAX:
        return avr_output_stage(multiplier, shift, offset, act_min, act_max)
    f = lambda x: qmath.requantize_output(x, multiplier, shift, offset, act_min, act_max)  # noqa: E731
    sat_low, sat_high = saturation_within(f, acc_bound, act_min, act_max)
    out = dict(sat_low=sat_low, sat_high=sat_high, fast=0, m_prime=[0] * 5, round_pos=[0] * 5,
               round_neg=[0] * 5, byte_moves=0)
    if sat_low >= -(1 << 23) - 1 and sat_high <= 1 << 23:
        m_p = multiplier << (shift + 1)
        r = 1 << 31
        byte = lambda v, i: (v >> (8 * i)) & 0xFF  # noqa: E731
        assert m_p < 1 << 40
        out.update(fast=1, m_prime=[byte(m_p, i) for i in range(5)],
                   round_pos=[byte(r, i) for i in range(3, 8)],
                   round_neg=[byte(r, i) for i in range(3, 8)])
    return out


def acc_bound_of(w_prime: np.ndarray, bias_p: np.ndarray) -> int:
    """The largest |accumulator| the op can produce: max over rows of |bias'| + 128 sum |w'|."""
    return int((np.abs(bias_p[:len(w_prime)].astype(np.int64))
                + 128 * np.abs(w_prime).sum(axis=1)).max(initial=0))


def lower_fully_connected_s4_avr(op: Operator, model: TFLiteModel, pname: str,
                                 kernel: Kernel) -> Kernel:
    """`kernel`, the reference lowering's qe_fully_connected_s4 (it validated the op), or the
    avr int4 stream's qe_fully_connected_s4_avr where it applies."""
    x, w, bias, out, act = weighted_operands(op, model, "weights")
    output_depth, accum_depth = w.shape
    wi = unpack_int4(packed_int4(op, w, "weights"), w.size).reshape(w.shape)
    try:
        stream, bias_p, chunks = avr_s4_stream(wi, None if bias is None else bias.data,
                                               -x.zero_point, -w.zero_point)
    except ValueError:
        return kernel
    real, multiplier, shift, act_min, act_max = per_tensor_stage(x, w, out, act)
    batches = out.size // output_depth
    bound = acc_bound_of(wi.astype(np.int64) - w.zero_point, bias_p)
    st = avr_output_stage_left(multiplier, shift, out.zero_point, act_min, act_max, bound)
    wname = c_ident(w.name, f"w{w.index}_") + "_s4_avr"
    bname = f"{pname}_bias"
    consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g}, zero point {w.zero_point}: "
              f"the avr kernel's int4 stream (fully_connected_s4.h), {output_depth} rows in "
              f"groups of {AVR_ROWS}, two rows' nibbles (weight + 8) per byte, depth "
              f"{accum_depth} in {len(chunks)} chunks of 16-bit sums (mean length "
              f"{np.mean(chunks):.1f}) */\n"
              + c_array("uint8_t", wname, stream, 16, lambda v: f"0x{int(v):02x}"),
              "/* bias + input_offset * sum(weights + filter_offset), per padded row */\n"
              + c_array("int32_t", bname, bias_p, 8, lambda v: str(int(v)))]
    const_bytes = stream.size + 4 * bias_p.size
    params = (f"static const qe_fc_s8_avr_params_t {pname} = {{\n"
              f"    .output_offset = {out.zero_point},\n"
              f"    .output_multiplier = {multiplier},  /* {real:.17g} = m * 2^(shift - 31) */\n"
              f"    .output_shift = {shift},\n"
              f"    .activation_min = {act_min},\n"
              f"    .activation_max = {act_max},\n"
              + avr_output_stage_c(st) +
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .output_depth = {output_depth}u,\n}};\n")
    call = (f"qe_fully_connected_s4_avr(&{pname}, (const int8_t *)@T{x.index}@, {wname}, "
            f"{bname}, (int8_t *)@T{out.index}@);")
    ref_bytes = int4_reference_bytes(w, bias)
    return Kernel(op, call, params, consts, const_bytes,
                  kernel.comment.replace("int4 weights:", "int4 weights (avr stream):")
                  + f"; layout {const_bytes} B of flash (reference layout {ref_bytes} B)",
                  headers=kernel.headers, layout_extra_bytes=const_bytes - ref_bytes)


def lower_fully_connected_avr_any(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """The avr variant's FULLY_CONNECTED: int8 x int4 weights the int4 stream where it applies
    (lower_fully_connected_s4_avr), int8 the int8 stream (lower_fully_connected_avr), every
    other one the reference lowering."""
    kernel = lower_fully_connected_avr(op, model, pname)
    if kernel.call.startswith("qe_fully_connected_s4("):
        return lower_fully_connected_s4_avr(op, model, pname, kernel)
    return kernel
