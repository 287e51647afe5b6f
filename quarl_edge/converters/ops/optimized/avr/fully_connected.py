"""FULLY_CONNECTED on the avr variant (firmware/core/kernels/optimized/avr/fully_connected.c): an
int8 per-tensor FULLY_CONNECTED whose weights allow it gets the chunked stream of 16-bit-summable
runs (avr_fc_stream, qe_fully_connected_s8_avr) and an output stage computed here
(avr_output_stage); every other one the reference lowering (quarl_edge/converters/ops/fully_connected.py)."""
from __future__ import annotations

import numpy as np

from .... import qmath
from ....emit import c_array, c_comment, c_ident
from ...common import Kernel, weighted_operands
from ...fully_connected import lower_fully_connected, per_tensor_stage
from ....tflite_model import Operator, TFLiteModel
from ..common import c_int32, greedy_chunks, output_saturation

AVR_ROWS = 4              # fully_connected.h: QE_FC_AVR_ROWS
AVR_MAX_CHUNK = 255       # a chunk's length is one byte (0 ends a group's stream)
AVR_DOT_LIMIT = (1 << 23) - 1   # the kernel's per-row running sum is 24 bits


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
        for n in greedy_chunks(gw, AVR_MAX_CHUNK):
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
        smallest with f(x) == act_max (INT32_MAX if none), found by bisection on the twin
        (optimized/common.py: output_saturation);
      - for sat_low < x < sat_high the output lies strictly inside (act_min, act_max), so it is
        f(x) = requant(x) + offset, and requant(x) = floor((x * m + R) / 2^(31+e)) with
        R = 2^30 + 2^(30+e) - (x < 0) * 2^31 (the cortex-m variants' exact formula); scaled by
        2^j (j = -(31+e) mod 8) numerator and denominator that is byte k = (31+e+j) / 8 of
        x * m' + R' (m' = m * 2^j, R' = R * 2^j), of which only its low byte matters.
    `fast` is 1 when the board may use this: shift <= -1, the byte within the 64-bit sum
    (k <= 7), and every x strictly between the bounds a 24-bit integer (the kernel multiplies
    3 bytes of x by 5 of m'). Else the kernel calls requant.h's output stage."""
    sat_low, sat_high = output_saturation(multiplier, shift, offset, act_min, act_max)
    out = dict(sat_low=sat_low, sat_high=sat_high, fast=0, m_prime=[0] * 5, round_pos=[0] * 5,
               round_neg=[0] * 5, byte_moves=0)
    if shift > -1 or multiplier < 0:
        return out
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


def avr_output_stage_c(st: dict) -> str:
    """avr_output_stage's constants as designated initializers of qe_fc_s8_avr_params_t."""
    b = lambda v: "{" + ", ".join(f"0x{x:02x}u" for x in v) + "}"  # noqa: E731
    return (f"    .sat_low = {c_int32(st['sat_low'])},  /* <= this: activation_min */\n"
            f"    .sat_high = {c_int32(st['sat_high'])},  /* >= this: activation_max */\n"
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
    real, multiplier, shift, act_min, act_max = per_tensor_stage(x, w, out, act)
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
