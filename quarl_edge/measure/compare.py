"""How a board's output compares with TF Lite Micro's on the host (issue 12: honest mismatch
reports). Each row whose bits differ gets one class:

    reference-undefined  the input is outside the range where TFLM's QUANTIZE is defined C++
                         (x / scale rounded to int32 and the zero point added: a float too
                         large, an infinity or NaN makes that conversion undefined; x86 gives
                         INT_MIN). The board saturates, as an ARM core's VCVT does; the row is
                         this class when the board equals TFLM run on the saturated input.
    nan-payload          the differing values are all NaN on both sides, with other payload or
                         sign bits (an invalid operation gives 0x7fc00000 on ARM, 0xffc00000 on
                         x86).
    libm-ulp             a float output of a model with a float transcendental op (TANH,
                         SOFTMAX, ...), each differing value within one ulp of the reference:
                         the board's C library (newlib, avr-libc) and the host's (glibc) round
                         expf/tanhf differently.
    mismatch             anything else: a difference that is ours. Only this class fails.

A row takes the first class of MISMATCH, REFERENCE_UNDEFINED, LIBM_ULP, NAN_PAYLOAD that
applies (a row with a NaN-payload and an ulp difference is libm-ulp). `output_metrics` adds
the figures ST Edge AI's validate reports: max abs error, RMSE, cosine similarity and top-1
agreement, on the dequantized outputs."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import ModelError
from ..converters.tflite_model import load

MISMATCH = "mismatch"
REFERENCE_UNDEFINED = "reference-undefined"
LIBM_ULP = "libm-ulp"
NAN_PAYLOAD = "nan-payload"
CLASSES = (MISMATCH, REFERENCE_UNDEFINED, LIBM_ULP, NAN_PAYLOAD)   # precedence order
FAILING = {MISMATCH}

# Float ops whose kernels call libm's transcendental functions (expf, tanhf, logf, ...), which
# C libraries are allowed to round differently; sqrtf and arithmetic are correctly rounded.
LIBM_OPS = frozenset({"TANH", "LOGISTIC", "SOFTMAX", "LOG_SOFTMAX", "EXP", "LOG", "ELU", "GELU",
                      "SIN", "COS", "POW", "RSQRT", "ATAN2"})

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


# ------------------------------------------------------------------------ the model's parts
@dataclass(frozen=True)
class InputQuantize:
    """The QUANTIZE op that takes a float model input to integers."""
    scale: float
    zero_point: int
    dtype: np.dtype          # int8 or int16 (what the firmware's QUANTIZE gives)

    @property
    def range(self) -> tuple[float, float]:
        """The float range it represents; beyond it, values saturate."""
        info = np.iinfo(self.dtype)
        return self.scale * (info.min - self.zero_point), self.scale * (info.max - self.zero_point)


def input_quantize(model_path: Path, index: int = 0) -> InputQuantize | None:
    """The QUANTIZE op of the model's input `index`, None when that input is not quantized by
    one (an integer or a float model). Read from the flatbuffer: tflite-runtime refuses models
    that TF Lite Micro runs (a FULLY_CONNECTED whose scales it finds too far apart)."""
    model = load(model_path)
    first = model.inputs[index]
    for op in model.operators:
        if op.opcode == "QUANTIZE" and first in op.inputs:
            out = model.tensors[op.outputs[0]]
            if out.dtype not in ("int8", "uint8", "int16", "int32") or out.quantization is None:
                raise ModelError(f"{model_path}: the QUANTIZE of its input gives {out.dtype}"
                                 f"{'' if out.quantization else ' without a scale'}, not "
                                 "quantized integers")
            return InputQuantize(out.scale, out.zero_point, np.dtype(out.dtype))
    return None


def libm_ops(model_path: Path) -> list[str]:
    """The model's float ops (float32 first input) that call libm's transcendental functions,
    once each in execution order: where a libm-ulp difference can come from."""
    model = load(model_path)
    found = []
    for op in model.operators:
        ins = [i for i in op.inputs if i >= 0]
        if (op.opcode in LIBM_OPS and op.opcode not in found and ins
                and model.tensors[ins[0]].dtype == "float32"):
            found.append(op.opcode)
    return found


# --------------------------------------------------------------------------- the inputs
def undefined_inputs(x: np.ndarray, q: InputQuantize) -> np.ndarray:
    """Per element of a float input: True where TF Lite Micro's AffineQuantize is undefined C++,
    `static_cast<int32_t>(round(x / scale)) + zero_point` (the division in float): NaN, an
    infinity or a quotient outside int32, or a zero point that overflows the sum."""
    with np.errstate(all="ignore"):
        v = (np.asarray(x, np.float32) / np.float32(q.scale)).astype(np.float64)
        r = np.sign(v) * np.floor(np.abs(v) + 0.5)           # round(): half away from zero
        defined = (np.isfinite(v) & (r >= INT32_MIN) & (r <= INT32_MAX)
                   & (r + q.zero_point >= INT32_MIN) & (r + q.zero_point <= INT32_MAX))
    return ~defined


def saturated_inputs(x: np.ndarray, q: InputQuantize, undefined: np.ndarray) -> np.ndarray:
    """x with its undefined elements replaced by what the firmware's QUANTIZE makes of them
    (firmware/core/kernels/quantize.c): the end of the range on their side, NaN the low end."""
    lo, hi = (np.float32(v) for v in q.range)
    with np.errstate(invalid="ignore"):
        high = np.asarray(x) > 0
    return np.where(undefined, np.where(high, hi, lo), x).astype(np.float32)


# -------------------------------------------------------------------------- the outputs
def worst_class(classes) -> str | None:
    """The class of a row of several outputs: the first of CLASSES that any output has (None:
    every output's bits are equal)."""
    found = set(classes)
    return next((c for c in CLASSES if c in found), None)


def row_class(y: np.ndarray, r: np.ndarray, libm: bool) -> str | None:
    """The class of a board output y against its reference r (same shape): None when the bits
    are equal. `libm`: the model has float transcendental ops (libm_ops)."""
    y, r = np.ascontiguousarray(y), np.ascontiguousarray(r)
    if y.shape != r.shape or y.dtype != r.dtype:
        return MISMATCH
    if y.tobytes() == r.tobytes():
        return None
    if y.dtype != np.float32:
        return MISMATCH                                     # integers are never allowed to differ
    yb, rb = y.view(np.int32).astype(np.int64), r.view(np.int32).astype(np.int64)
    differ = yb != rb
    both_nan = np.isnan(y) & np.isnan(r)
    one_ulp = (libm & ~np.isnan(y) & ~np.isnan(r) & (np.signbit(y) == np.signbit(r))
               & (np.abs(yb - rb) <= 1))
    if np.any(differ & ~both_nan & ~one_ulp):
        return MISMATCH
    return LIBM_ULP if np.any(differ & one_ulp) else NAN_PAYLOAD


def dequantized(y: np.ndarray, details: dict) -> np.ndarray:
    """An output in real units (float64): integer outputs through their scale and zero point."""
    y = np.asarray(y)
    if y.dtype.kind not in "iu":
        return y.astype(np.float64)
    qp = details.get("quantization_parameters") or {}
    scales, zps = qp.get("scales", []), qp.get("zero_points", [])
    if len(scales):
        scale, zp = float(scales[0]), int(zps[0]) if len(zps) else 0
    else:
        scale, zp = details.get("quantization", (0.0, 0))
    if not scale:                                           # an integer output of its own
        return y.astype(np.float64)
    return (y.astype(np.float64) - zp) * scale


def output_metrics(board: np.ndarray, ref: np.ndarray, details: dict, name: str) -> dict:
    """ST Edge AI's validate figures for one output tensor, board against reference, both
    (n, *shape) and dequantized: max abs error, RMSE and cosine similarity over the elements
    that are finite on both sides (`nonfinite` counts the others; both NaN, or bit-equal, is no
    error), and for a vector output of more than one value per row the share of rows whose
    argmax agrees (`top1_agreement`, None for other shapes)."""
    y, r = dequantized(board, details), dequantized(ref, details)
    same = (y == r) | (np.isnan(y) & np.isnan(r))
    finite = np.isfinite(y) & np.isfinite(r)
    yf, rf = y[finite & ~same], r[finite & ~same]
    err = np.abs(yf - rf)
    yc, rc = y[finite], r[finite]
    ny, nr = float(np.linalg.norm(yc)), float(np.linalg.norm(rc))
    if not yc.size:
        cosine = None
    elif not yf.size or (ny == 0.0 and nr == 0.0):
        cosine = 1.0                                        # equal: exactly, not 1 - 1e-16
    elif ny == 0.0 or nr == 0.0:
        cosine = 0.0
    else:
        cosine = float(np.clip(np.dot(yc, rc) / (ny * nr), -1.0, 1.0))   # 1 + rounding: 1
    per_row = board.shape[1:]
    top1 = None
    if len(per_row) == 1 and per_row[0] > 1:
        top1 = float(np.mean(np.argmax(board, axis=1) == np.argmax(ref, axis=1)))
    return {
        "name": name,
        "max_abs_error": float(err.max()) if err.size else 0.0,
        "rmse": float(np.sqrt(np.sum(err ** 2) / max(int(finite.sum()), 1))),
        "cosine": cosine,
        "top1_agreement": top1,
        "nonfinite": int(np.sum(~finite & ~same)),
    }
