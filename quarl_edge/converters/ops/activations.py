"""RELU, RELU6, TANH, LOGISTIC: firmware/core/kernels/lut.c (int8), activations_s16.c (int16
TANH / LOGISTIC) and activations_f32.c (float32); TFLM's activations.cc (ReluQuantized, Relu6),
tanh.cc and logistic.cc.

- int16 TANH / LOGISTIC (the int16x8 scheme): TFLM's table arithmetic (the int8 LSTM's), its
  input multiplier and shift computed here as TFLM's Prepare does (qmath.tanh_logistic_s16_params);
- int8 -> int8 as a 256-entry table computed here with TFLM's arithmetic (quarl_edge/converters/qmath.py:
  gemmlowp fixed point for TANH/LOGISTIC, ReluQuantized's requantization, Relu6's clamp);
  TANH's output must be quantized (1/128, 0) and LOGISTIC's (1/256, -128), as TFLM produces;
  int8 RELU6 needs equal input and output quantization (TFLM's kernel does not rescale);
- float32 directly; TANH and LOGISTIC call tanhf/expf, passed in by the generated code (such a
  model links with -lm);
- element-wise: the output may be written over the input (Kernel.inplace).
"""
from __future__ import annotations

from .. import qmath
from ..emit import c_array
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, per_tensor, same_shape_io, unsupported

SUPPORTED = ("RELU/RELU6/TANH/LOGISTIC int8 and float32", "TANH/LOGISTIC int16")
KERNEL_HEADERS = ("activations_f32.h", "lut.h")


def lower_activation(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """RELU, RELU6, TANH, LOGISTIC: int8 as a precomputed 256-entry table, float32 directly."""
    x, y = same_shape_io(op, model)
    what = f"{op.opcode} {x.dtype}: {x.describe()} -> {y.describe()}"
    if x.dtype == "float32":
        fn = {"RELU": "qe_relu_f32({n}u, {i}, {o});", "RELU6": "qe_relu6_f32({n}u, {i}, {o});",
              "TANH": "qe_tanh_f32({n}u, qe_libm_tanhf, {i}, {o});",
              "LOGISTIC": "qe_logistic_f32({n}u, qe_libm_expf, {i}, {o});"}[op.opcode]
        call = fn.format(n=x.size, i=f"(const float *)@T{x.index}@", o=f"(float *)@T{y.index}@")
        return Kernel(op, call, "", [], 0, what, inplace=True)
    if x.dtype == "int16" and op.opcode in ("TANH", "LOGISTIC"):
        return _lower_s16(op, model, pname, x, y, what)
    if x.dtype != "int8":
        raise unsupported(op, model, f"{x.dtype} {op.opcode}; supported: int8 and float32"
                                     + (", int16 TANH and LOGISTIC" if x.dtype == "int16" else ""))
    per_tensor(x, op, model, "input")
    per_tensor(y, op, model, "output")
    if op.opcode in ("TANH", "LOGISTIC"):
        want = (1.0 / 128, 0) if op.opcode == "TANH" else (1.0 / 256, -128)
        if (float(y.scale), y.zero_point) != want:
            raise unsupported(op, model, f"int8 {op.opcode} output '{y.name}' has scale {y.scale:g} "
                                         f"and zero point {y.zero_point}; TFLM's kernel produces "
                                         f"scale {want[0]:g}, zero point {want[1]}")
        try:
            table = qmath.tanh_logistic_lut_s8(op.opcode, x.scale, x.zero_point)
        except ValueError as exc:
            raise unsupported(op, model, f"input scale {x.scale:g}: {exc}") from None
    elif op.opcode == "RELU":
        table = qmath.relu_lut_s8(x.scale, x.zero_point, y.scale, y.zero_point)
    else:
        if (float(x.scale), x.zero_point) != (float(y.scale), y.zero_point):
            raise unsupported(op, model, "int8 RELU6 with different input and output quantization "
                                         "(TFLM's kernel does not rescale)")
        table = qmath.relu6_lut_s8(x.scale, x.zero_point)
    tname = f"{pname}_table"
    consts = [f"/* {op.opcode} int8 for input scale {x.scale:.9g}, zero point {x.zero_point}: "
              f"output[q] = table[q + 128] */\n" + c_array("int8_t", tname, table, 16, str)]
    call = (f"qe_lut_s8({tname}, {x.size}u, (const int8_t *)@T{x.index}@, "
            f"(int8_t *)@T{y.index}@);")
    return Kernel(op, call, "", consts, 256, what + " (lookup table)", inplace=True)


def _lower_s16(op: Operator, model: TFLiteModel, pname: str, x, y, what: str) -> Kernel:
    """int16 TANH / LOGISTIC (int16x8 models): TFLM's table kernels, whose Prepare wants zero
    points 0 and an output scale of 2^-15; the input scale becomes a multiplier and shift."""
    per_tensor(x, op, model, "input")
    per_tensor(y, op, model, "output")
    if y.dtype != "int16" or x.zero_point != 0 or y.zero_point != 0:
        raise unsupported(op, model, f"int16 {op.opcode} needs int16 output and zero points 0 "
                                     f"(TFLM's kernel); got {y.dtype}, {x.zero_point}, "
                                     f"{y.zero_point}")
    log2, pot = qmath.checked_log2(float(y.scale))
    if not pot or log2 != -15:
        raise unsupported(op, model, f"int16 {op.opcode} output '{y.name}' has scale {y.scale:g}; "
                                     "TFLM's kernel produces 2^-15")
    multiplier, shift = qmath.tanh_logistic_s16_params(op.opcode, float(x.scale))
    table = qmath.sigmoid_table_u16()
    tname = f"{pname}_sigmoid_table"
    consts = ["/* TFLM's int16 sigmoid/tanh table, sigmoid(i/24) in 0.16 (measured from TFLM: "
              "scripts/measure_sigmoid_table.py) */\n"
              + c_array("uint16_t", tname, table, 12, lambda v: f"{v}u")]
    fn = "qe_tanh_s16" if op.opcode == "TANH" else "qe_logistic_s16"
    call = (f"{fn}({tname}, {multiplier}, {shift}, {x.size}u, (const int16_t *)@T{x.index}@, "
            f"(int16_t *)@T{y.index}@);")
    return Kernel(op, call, "", consts, 2 * len(table),
                  what + f" (TFLM's table; input multiplier {multiplier}, shift {shift})",
                  inplace=True, headers=("activations_s16.h",))
