"""FULLY_CONNECTED: firmware/core/kernels/fully_connected.c, TFLM's fully_connected.cc.

output[b][o] = act(bias[o] + sum_d input[b][d] * weights[o][d]), weights [out][in], constant:

- int8 with per-tensor weights: reference_integer_ops::FullyConnected (qe_fully_connected_s8);
  the bias scale must be input scale x weight scale (within 2 % of an output step, as TFLM);
- int8 with per-channel symmetric weights: FullyConnectedPerChannel (qe_fully_connected_s8_pc),
  output [batches, depth] only;
- int8 with packed int4 weights per tensor (the int8x4 scheme): fully_connected_s4.py;
- int16x8: int16 activations (zero point 0), int8 weights per tensor or per channel (symmetric),
  int64 bias: reference_integer_ops::FullyConnected<int64_t> (qe_fully_connected_s16);
- float32: reference_ops::FullyConnected (qe_fully_connected_f32);
- the int8-acc accumulator readout (quarl_edge/converters/head.py): int8 input, symmetric weights, the int32
  accumulators scaled to the float32 graph output (qe_fully_connected_s8_acc_f32);
- on boards with an optimized kernel variant, int8 with per-tensor weights gets the weights
  laid out for the variant's kernel: those lowerings are in quarl_edge/converters/ops/optimized/<variant>/
  fully_connected.py, and start from this one (lower_fully_connected, per_tensor_stage);
- fused NONE/RELU/RELU6/RELU_N1_TO_1, optional bias, batches/accum_depth/output_depth <= 65535,
  no shuffled weights; shapes whose accumulator could overflow (int32; int16x8: 48 bits) and
  float32 input with int8 weights (a hybrid, dynamic-range model) are refused.
"""
from __future__ import annotations

import numpy as np

from ...core.errors import ModelError

from .. import qmath
from ..emit import c_array, c_comment, c_float, c_float_limit, c_ident, c_int64
from ..head import ACCUMULATOR_READOUT_OPTION
from ..tflite_model import Operator, TFLiteModel
from .common import (Kernel, activation_tensor, bias_array, per_tensor, u16,
                     unsupported, weight_quantization, weighted_operands)
from .fully_connected_s4 import lower_fc_s4

SUPPORTED = ("FULLY_CONNECTED int8 (per-tensor or per-channel weights), int8 x int4 weights "
             "(per-tensor, packed), int16x8, float32",)
KERNEL_HEADERS = ("fully_connected.h",)


def per_tensor_stage(x, w, out, act) -> tuple[float, int, int, int, int]:
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

    if w.dtype == "int4" and not op.options.get(ACCUMULATOR_READOUT_OPTION):
        return lower_fc_s4(op, model, pname, x, w, bias, out, act, batches, accum_depth,
                           output_depth, wname, comment_shapes)
    if op.options.get(ACCUMULATOR_READOUT_OPTION):
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
    """The int8-acc accumulator readout (quarl_edge/converters/head.py): int8 input, symmetric int8 weights
    (per tensor or per channel), float32 output = (float)acc * (input_scale * weight_scale[o])."""
    activation_tensor(op, model, x.index, "int8", "input")
    activation_tensor(op, model, out.index, "float32", "output")
    if w.dtype != "int8":
        raise unsupported(op, model, f"accumulator readout with {w.dtype} weights")
    per_tensor(x, op, model, "input")
    wq = weight_quantization(op, model, w, "weights", output_depth, 0)
    if np.any(wq.zero_point != 0):
        raise unsupported(op, model, f"accumulator readout weights '{w.name}' are not symmetric")
    if bias is not None and (bias.dtype != "int32" or bias.size != output_depth):
        raise unsupported(op, model, f"bias '{bias.name}' {bias.dtype} {list(bias.shape)}")
    worst = accum_depth * 128 * (128 + abs(x.zero_point)) + (
        int(np.abs(bias.data.astype(np.int64)).max()) if bias is not None else 0)
    if worst > qmath.INT32_MAX:
        raise unsupported(op, model, f"the int32 accumulator could overflow (accum_depth {accum_depth})")
    n_ch = len(wq.scale)
    # float32 of the double product of the two float32 scales (remedies.AccumulatorReadout too).
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
