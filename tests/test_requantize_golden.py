"""QUANTIZE of an integer tensor to another scale and type (int8/int16 -> int8/int16, issue 12:
the int16 -> int8 QUANTIZE a real model had; int8/int16 -> int32 and int32 -> int8/int16,
issue 26: TF Lite Micro's seanet quantize models): generated C against the tflite-micro
interpreter, bit for bit, with hypothesis over scales (both directions of the ratio, shifts
left and right), zero points and every input value."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers_models import compare_generated, op_model

SOME = settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
RANGE = {"int8": (-128, 127), "int16": (-32768, 32767), "int32": (-2 ** 31, 2 ** 31 - 1)}


def requantize_model(src: str, dst: str, in_scale: float, in_zp: int, out_scale: float,
                     out_zp: int, n: int = 256) -> bytes:
    return op_model("QUANTIZE", [dict(shape=[1, n], dtype=src, q=(in_scale, in_zp))],
                    [dict(shape=[1, n], dtype=dst, q=(out_scale, out_zp))])


def every_value(dtype: str, n: int = 256) -> np.ndarray:
    lo, hi = RANGE[dtype]
    if dtype == "int8":
        return np.arange(lo, hi + 1, dtype=np.int8).reshape(1, n)
    rng = np.random.default_rng(0)   # int16, int32: the ends, zero and random values
    rand = rng.integers(lo, hi + 1, n - 7, dtype=np.int64)
    if dtype == "int32":             # and values of every magnitude (accumulator-like)
        rand[: n // 2] = rand[: n // 2] >> rng.integers(0, 31, n // 2)
    x = np.concatenate([[lo, lo + 1, -1, 0, 1, hi - 1, hi], rand])
    return x.astype(dtype).reshape(1, n)


@pytest.mark.parametrize("src,dst", [("int8", "int8"), ("int16", "int8"), ("int8", "int16"),
                                     ("int16", "int16"), ("int8", "int32"), ("int16", "int32"),
                                     ("int32", "int8"), ("int32", "int16")])
@SOME
@given(log_ratio=st.floats(-12, 10), out_scale=st.floats(1e-4, 1.0),
       in_zp=st.integers(-128, 127), out_zp=st.integers(-128, 127))
def test_requantize_is_bit_exact_with_tflm(tmp_path, src, dst, log_ratio, out_scale, in_zp,
                                           out_zp):
    # int16 and int32 tensors have zero point 0 (the converter's symmetric int16, int32)
    in_zp = in_zp if src == "int8" else 0
    out_zp = out_zp if dst == "int8" else 0
    if src == "int32":       # a narrowing: an int32 shifted left overflows (in TFLM too: UB)
        log_ratio = -abs(log_ratio) - 1
    in_scale = out_scale * 2.0 ** log_ratio
    model = requantize_model(src, dst, in_scale, in_zp, out_scale, out_zp)
    got = compare_generated(model, [every_value(src)], tmp_path, f"{src}->{dst}")["got"][0]
    lo, hi = RANGE[dst]
    assert got.min() >= lo and got.max() <= hi


def test_same_scale_int8_is_the_identity_and_a_saturating_one_clamps(tmp_path):
    """Checks that the comparison sees values: the same scale and zero point give the input
    back, and a ratio of 4 with an offset zero point saturates both ends."""
    x = every_value("int8")
    same = compare_generated(requantize_model("int8", "int8", 0.05, 3, 0.05, 3), [x],
                             tmp_path / "same", "same")["got"][0]
    assert np.array_equal(same.reshape(x.shape), x)
    big = compare_generated(requantize_model("int8", "int8", 0.2, 0, 0.05, 10), [x],
                            tmp_path / "big", "big")["got"][0]
    assert big.min() == -128 and big.max() == 127 and (big == 10).sum() == 1


def test_int32_pairs_are_named_and_int32_to_int32_refused(tmp_path):
    """TFLM's QUANTIZE has no int32 -> int32: refused by name, as before."""
    from quarl_edge.converters import cgen
    from quarl_edge.core.errors import UnsupportedOpError
    path = tmp_path / "q.tflite"
    path.write_bytes(requantize_model("int32", "int32", 0.5, 0, 0.25, 0))
    with pytest.raises(UnsupportedOpError, match=r"QUANTIZE \(int32 -> int32\) is not supported"):
        cgen.check(path)
    assert any("int32->int8/int16" in s for s in cgen.SUPPORTED)
