"""What more than one optimized variant's lowerings use: the depth limit of the layouts that widen
the input into a stack buffer, the cutting of a row group's weights into chunks whose sums fit
int16 (the avr stream and the cortex-m0 row pairs), the saturation points of the int8 output
stage (the bounds both kernels compare accumulators with), and an int32 as a C literal."""
from __future__ import annotations

import numpy as np

from ... import qmath

PACKED_MAX_DEPTH = 128   # fully_connected.h: QE_FC_PACKED_MAX_DEPTH


def chunk_fits(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Whether sum_d w'[d] * x[d] over a chunk lies in int16 for every int8 x, per row, given the
    chunk's sum of positive weights `pos` and of |negative weights| `neg`: its largest value is
    127 pos + 128 neg, its smallest -128 pos - 127 neg."""
    return (127 * pos + 128 * neg <= 32767) & (128 * pos + 127 * neg <= 32768)


def greedy_chunks(gw: np.ndarray, max_len: int) -> list[int]:
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
            if not chunk_fits(p2, n2).all():
                break
            pos, neg, n = p2, n2, n + 1
        assert n >= 1                   # one product (|w'| <= 255, x in int8) always fits
        out.append(n)
        d += n
    return out


def c_int32(v: int) -> str:
    """An int32 as a C literal (INT32_MIN has none of its own)."""
    return "(-2147483647 - 1)" if v == -(1 << 31) else str(v)


def output_saturation(multiplier: int, shift: int, offset: int, act_min: int,
                      act_max: int) -> tuple[int, int]:
    """(sat_low, sat_high) of the output stage f(x) = qmath.requantize_output(x, ...): the largest
    int32 x with f(x) == act_min (INT32_MIN if none) and the smallest with f(x) == act_max
    (INT32_MAX if none), found by bisection on the twin: f is non-decreasing in x for right
    shifts (shift <= -1: two roundings to nearest of x * m / 2^31 and / 2^e). For shifts >= 0
    (requantization wraps, not monotone) or a negative multiplier: (INT32_MIN, INT32_MAX)."""
    f = lambda x: qmath.requantize_output(x, multiplier, shift, offset, act_min, act_max)  # noqa: E731
    lo_i, hi_i = -(1 << 31), (1 << 31) - 1
    sat_low, sat_high = lo_i, hi_i
    if shift > -1 or multiplier < 0:
        return sat_low, sat_high
    if f(lo_i) == act_min:                   # the largest x with f(x) == act_min
        a, b = lo_i, hi_i
        if f(b) == act_min:
            a = b
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (mid, b) if f(mid) == act_min else (a, mid)
        sat_low = a
    if f(hi_i) == act_max:                   # the smallest x with f(x) == act_max
        a, b = lo_i, hi_i
        if f(a) == act_max:
            b = a
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (a, mid) if f(mid) == act_max else (mid, b)
        sat_high = b
    return sat_low, sat_high
