"""Generate readable C99 for a .tflite model: the contract in firmware/core/qe_model.h.

    generate("policy.tflite", "build/policy") -> GeneratedModel
    python -m quarl_edge.converters.cgen policy.tflite build/policy [--name NAME]

writes `model.c` (const weights and kernel parameters, the planned arena, `qe_model_invoke()` as a
straight-line schedule, `qe_model_info`) and `model.json` (the same facts for the host). All
validation happens here: an op, type or quantization the kernels cannot run raises
`UnsupportedOpError` naming it; the generated code trusts its parameters.

Supported (everything else is refused by name, with the op's index and types):

- QUANTIZE float32 -> int8 / int16, DEQUANTIZE int8 / int16 -> float32 (int16: zero point 0);
- FULLY_CONNECTED: int8 with per-tensor or per-channel (symmetric) weights, int16x8 (int16
  activations, int8 weights, int64 bias, per tensor or per channel), float32; fused
  NONE/RELU/RELU6/RELU_N1_TO_1, optional bias;
- RELU, RELU6, TANH, LOGISTIC: int8 as a 256-entry table computed here with TFLM's arithmetic
  (gemmlowp fixed point for TANH/LOGISTIC; see converters/qmath.py), float32 directly (TANH and
  LOGISTIC call tanhf/expf, passed in by the generated code: such a model links with -lm);
- RESHAPE, SQUEEZE, EXPAND_DIMS: no code, the output aliases the input's bytes;
- SOFTMAX over the last axis: int8 -> int8 with TFLM's output quantization (1/256, -128), its
  gemmlowp fixed-point arithmetic with the exp of every possible difference to the row max
  precomputed here as a 256-entry int32 table (depth <= 511); float32 with expf (links -lm);
- CONV_2D (no groups) and DEPTHWISE_CONV_2D (any depth multiplier): int8 with per-channel or
  per-tensor symmetric weights and int32 bias (TFLM's ConvPerChannel/DepthwiseConvPerChannel),
  float32; any stride and dilation, SAME/VALID padding, fused NONE/RELU/RELU6/RELU_N1_TO_1;
- MAX_POOL_2D, AVERAGE_POOL_2D: int8 (input and output quantization equal, as TFLM does not
  rescale; the average rounds half away from zero by integer division) and float32;
- ADD, MUL: int8 (TFLM's schemes: ADD rescales both inputs to twice the larger scale after a
  left shift of 20; MUL rescales the product) and float32; numpy broadcasting up to 6-D, either
  input may be a constant; fused activations;
- CONCATENATION along any axis: float32, int16, int32, and int8 when every input has the
  output's quantization (TFLM's kernel copies bytes without rescaling; the interpreter refuses
  other int8 cases, and so do we);
- MEAN over one contiguous run of axes (e.g. the spatial axes of NHWC, keep_dims or not): int8
  (TFLM's integer QuantizedMeanOrSum: 1/n folded into the Q31 multiplier), float32;
- ARG_MAX along one axis: int8 or float32 input, int32 output (first maximum wins).

Memory plan: one arena, tensors placed by liveness (converters/planner.py); reshapes alias, and
an element-wise op writes over its input when that input dies there and is not a graph
input/output. On every model compared so far the arena is at most TFLM's activation arena for
the same model (asserted in tests/test_arena_vs_tflm.py; printed by benchmarks/arena_vs_tflm.py).

Dynamic-range (hybrid: float activations, int8 weights) and float16-weight models are refused,
with a message saying to use the fp32 or a full-integer model. Expanding their weights to
float32 here would run, but the result would be an fp32 model in disguise: its flash cost is
the fp32 model's, and it could not be validated against TF Lite Micro, which cannot run either
kind (its host interpreter rejects them), so "bit-exact with TFLM" would have no reference.
Users who want float run the fp32 model; users who want small weights run full int8.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quarl_edge.errors import ModelError, QuarlError, UnsupportedOpError

from . import emit, planner, qmath
from .emit import c_array, c_comment, c_float, c_float_limit, c_ident, c_int64, c_ram_array
from .spec import IO_DTYPES, QE_MAX_DIMS, GeneratedModel, IOTensor
from .tflite_model import Operator, Tensor, TFLiteModel, load

SUPPORTED = ("QUANTIZE float32->int8/int16", "DEQUANTIZE int8/int16->float32",
             "FULLY_CONNECTED int8 (per-tensor or per-channel weights), int16x8, float32",
             "RELU/RELU6/TANH/LOGISTIC int8 and float32", "RESHAPE/SQUEEZE/EXPAND_DIMS (alias)",
             "SOFTMAX int8 (output 1/256, -128) and float32",
             "CONV_2D/DEPTHWISE_CONV_2D int8 (per-channel or per-tensor symmetric weights) and float32",
             "MAX_POOL_2D/AVERAGE_POOL_2D int8 and float32", "ADD/MUL int8 and float32 (broadcasting)",
             "CONCATENATION float32/int8 (equal quantization)/int16/int32",
             "MEAN over contiguous axes int8 and float32", "ARG_MAX int8/float32 -> int32")


def shape_str(t: Tensor) -> str:
    return "[" + ",".join(str(d) for d in t.shape) + "]"


# ----------------------------------------------------------------------- op lowering
@dataclass
class _Kernel:
    op: Operator
    call: str               # C statement, with @T<index>@ placeholders for arena pointers
    params: str             # C definition of the const params struct
    consts: list[str]       # C definitions of const arrays
    const_bytes: int
    comment: str
    alias: bool = False     # RESHAPE-like: no code, the output is the input's bytes
    inplace: bool = False   # element-wise: the output may take over the input's buffer


def _unsupported(op: Operator, model: TFLiteModel, why: str = "") -> UnsupportedOpError:
    types = []
    for i in op.inputs:
        if i >= 0:
            t = model.tensors[i]
            types.append(t.dtype + (" (const)" if t.is_constant else ""))
    outs = [model.tensors[i].dtype for i in op.outputs]
    shapes = (", ".join(shape_str(model.tensors[i]) for i in op.inputs if i >= 0) + " -> "
              + ", ".join(shape_str(model.tensors[i]) for i in op.outputs))
    msg = (f"op {op.index} {op.opcode} ({', '.join(types)} -> {', '.join(outs)}) is not supported"
           + (f": {why}" if why else "") + f". Shapes: {shapes}. Supported: {'; '.join(SUPPORTED)}")
    return UnsupportedOpError(msg)


def _per_tensor(t: Tensor, op: Operator, model: TFLiteModel, what: str) -> None:
    if t.quantization is None:
        raise _unsupported(op, model, f"{what} '{t.name}' has no quantization parameters")
    if t.quantization.per_channel:
        raise _unsupported(op, model, f"{what} '{t.name}' is quantized per channel "
                                      f"({len(t.quantization.scale)} scales); only per-tensor is supported")
    if not (np.isfinite(t.scale) and t.scale > 0):
        raise _unsupported(op, model, f"{what} '{t.name}' has scale {t.scale}")


def _activation_tensor(op: Operator, model: TFLiteModel, idx: int, dtype: str, what: str) -> Tensor:
    t = model.tensors[idx]
    if t.is_constant:
        raise _unsupported(op, model, f"{what} '{t.name}' is a constant")
    if t.dtype != dtype:
        raise _unsupported(op, model, f"{what} '{t.name}' is {t.dtype}, expected {dtype}")
    return t


_AFFINE = {
    ("QUANTIZE", "float32", "int8"): ("qe_quantize_f32_s8", "float", "int8_t"),
    ("QUANTIZE", "float32", "int16"): ("qe_quantize_f32_s16", "float", "int16_t"),
    ("DEQUANTIZE", "int8", "float32"): ("qe_dequantize_s8_f32", "int8_t", "float"),
    ("DEQUANTIZE", "int16", "float32"): ("qe_dequantize_s16_f32", "int16_t", "float"),
}


def _lower_affine(op: Operator, model: TFLiteModel, pname: str) -> _Kernel:
    if len(op.inputs) != 1 or len(op.outputs) != 1:
        raise _unsupported(op, model, "expected one input and one output")
    src, dst = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    if op.opcode == "DEQUANTIZE" and src.dtype == "float16":
        raise _unsupported(op, model, "float16 weights (an fp16-quantized model) are not supported; "
                                      "use the fp32 or a full-integer model")
    entry = _AFFINE.get((op.opcode, src.dtype, dst.dtype))
    if entry is None or src.is_constant:
        raise _unsupported(op, model)
    fn, ctypes = entry[0], entry[1:]
    q = dst if op.opcode == "QUANTIZE" else src
    _per_tensor(q, op, model, "tensor")
    if "int16" in (src.dtype, dst.dtype) and q.zero_point != 0:
        raise _unsupported(op, model, f"int16 tensor '{q.name}' has zero point {q.zero_point}; "
                                      "TFLM's int16 kernels need 0")
    if src.size != dst.size:
        raise ModelError(f"op {op.index} {op.opcode}: input has {src.size} elements, output {dst.size}")
    params = (f"static const qe_affine_params_t {pname} = {{\n"
              f"    .scale = {c_float(q.scale)},\n    .zero_point = {q.zero_point},\n"
              f"    .size = {src.size}u,\n}};\n")
    call = (f"{fn}(&{pname}, (const {ctypes[0]} *)@T{src.index}@, ({ctypes[1]} *)@T{dst.index}@);")
    comment = f"{op.opcode}: {src.describe()} -> {dst.describe()} (scale {q.scale:.9g}, zero point {q.zero_point})"
    return _Kernel(op, call, params, [], 0, comment)


def _lower_fully_connected(op: Operator, model: TFLiteModel, pname: str) -> _Kernel:
    ins = op.inputs + [-1] * (3 - len(op.inputs))
    if len(op.inputs) < 2 or len(op.outputs) != 1 or ins[0] < 0 or ins[1] < 0:
        raise _unsupported(op, model, "expected input, weights, optional bias and one output")
    x, w, out = model.tensors[ins[0]], model.tensors[ins[1]], model.tensors[op.outputs[0]]
    bias = model.tensors[ins[2]] if ins[2] >= 0 else None
    act = op.fused_activation or "NONE"
    if act not in qmath.ACTIVATIONS:
        raise _unsupported(op, model, f"fused activation {act}")
    if op.options.get("weightsFormat", 0) != 0:
        raise _unsupported(op, model, "shuffled weights format")
    if not w.is_constant:
        raise _unsupported(op, model, f"weights '{w.name}' are not constant")
    if bias is not None and not bias.is_constant:
        raise _unsupported(op, model, f"bias '{bias.name}' is not constant")
    if x.dtype == "float32" and w.dtype in ("int8", "uint8", "int4"):
        raise _unsupported(op, model, "float32 input with int8 weights is a hybrid (dynamic-range "
                                      "quantized) model; convert with full int8 quantization "
                                      "(representative dataset) or keep it float32")
    if len(w.shape) != 2:
        raise _unsupported(op, model, f"weights of shape {list(w.shape)}, expected [out, in]")
    output_depth, accum_depth = w.shape
    if not out.shape or out.shape[-1] != output_depth:
        raise ModelError(f"op {op.index} FULLY_CONNECTED: output {list(out.shape)} does not end in "
                         f"{output_depth} (weights {list(w.shape)})")
    batches = out.size // output_depth if output_depth else 0
    if accum_depth == 0 or x.size != batches * accum_depth:
        raise ModelError(f"op {op.index} FULLY_CONNECTED: input {list(x.shape)} is not "
                         f"{batches} batches of {accum_depth}")
    for what, v in (("batches", batches), ("accum_depth", accum_depth), ("output_depth", output_depth)):
        if not 0 < v <= 0xFFFF:
            raise _unsupported(op, model, f"{what} {v} does not fit the kernel's uint16 field")
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
        _activation_tensor(op, model, x.index, "int8", "input")
        _activation_tensor(op, model, out.index, "int8", "output")
        if w.dtype != "int8":
            raise _unsupported(op, model, f"int8 input with {w.dtype} weights")
        for t, what in ((x, "input"), (w, "weights"), (out, "output")):
            _per_tensor(t, op, model, what)
        if bias is not None and bias.dtype != "int32":
            raise _unsupported(op, model, f"bias '{bias.name}' is {bias.dtype}, expected int32")
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
            raise _unsupported(op, model, f"the int32 accumulator could overflow "
                                          f"(accum_depth {accum_depth})")
        real = qmath.effective_scale(x.scale, w.scale, out.scale)
        multiplier, shift = qmath.quantize_multiplier(real)
        if not -31 <= shift <= 30:
            raise _unsupported(op, model, f"requantization scale {real:g} is out of range")
        act_min, act_max = qmath.activation_range_quantized(act, out.scale, out.zero_point)
        consts = [f"/* {c_comment(w.describe())}, scale {w.scale:.9g} */\n"
                  + c_array("int8_t", wname, w.data, 16, lambda v: str(int(v)))]
        bname, bias_bytes = _bias_array(bias, "int32_t", lambda v: str(int(v)), 8, consts)
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
        return _Kernel(op, call, params, consts, const_bytes, "FULLY_CONNECTED int8: " + comment_shapes)

    if x.dtype == "float32":
        _activation_tensor(op, model, x.index, "float32", "input")
        _activation_tensor(op, model, out.index, "float32", "output")
        if w.dtype != "float32":
            raise _unsupported(op, model, f"float32 input with {w.dtype} weights")
        if bias is not None and (bias.dtype != "float32" or bias.size != output_depth):
            raise _unsupported(op, model, f"bias '{bias.name}' {bias.dtype} {list(bias.shape)}")
        for arr, t in ((w.data, w), (bias.data if bias is not None else None, bias)):
            if arr is not None and not np.all(np.isfinite(arr)):
                raise ModelError(f"op {op.index} FULLY_CONNECTED: '{t.name}' holds inf or NaN")
        lo, hi = qmath.activation_range_float(act)
        consts = [f"/* {c_comment(w.describe())} */\n" + c_array("float", wname, w.data, 6, c_float)]
        bname, bias_bytes = _bias_array(bias, "float", c_float, 6, consts)
        const_bytes = 4 * w.size + bias_bytes
        params = (f"static const qe_fc_f32_params_t {pname} = {{\n"
                  f"    .activation_min = {c_float_limit(lo)},\n    .activation_max = {c_float_limit(hi)},\n"
                  f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
                  f"    .output_depth = {output_depth}u,\n}};\n")
        call = (f"qe_fully_connected_f32(&{pname}, (const float *)@T{x.index}@, {wname}, "
                f"{bname}, (float *)@T{out.index}@);")
        return _Kernel(op, call, params, consts, const_bytes, "FULLY_CONNECTED float32: " + comment_shapes)

    raise _unsupported(op, model, f"input type {x.dtype}")


def _weight_quantization(op, model, w, what: str, n_out: int, qdim: int):
    """The quantization of int8 weights `w` (`what`: "weights" or "filter"), checked: present,
    one scale per tensor or one per output channel along `qdim`, every scale finite and > 0."""
    wq = w.quantization
    if wq is None:
        raise _unsupported(op, model, f"{what} '{w.name}': no quantization parameters")
    n_ch = len(wq.scale)
    if n_ch > 1 and (n_ch != n_out or wq.quantized_dimension != qdim):
        raise _unsupported(op, model, f"{what} '{w.name}': {n_ch} scales along dimension "
                                      f"{wq.quantized_dimension}; expected {n_out} along {qdim}")
    if not np.all(np.isfinite(wq.scale) & (wq.scale > 0)):
        raise _unsupported(op, model, f"{what} '{w.name}': a scale is not finite and positive")
    return wq


# ------------------------------------------------------------ int8-acc: the accumulator head
# quarl_edge/remedies.py: a model tagged with metadata "quarl_edge.head" = "accumulators" ends in
# FULLY_CONNECTED(int8) -> DEQUANTIZE; its greedy action is to be the argmax of that layer's
# int32 accumulators. The rewrite drops the DEQUANTIZE and lets the FULLY_CONNECTED write the
# graph's float32 output itself: (float)acc * (input_scale * weight_scale[o]).
HEAD_METADATA = "quarl_edge.head"
HEAD_READOUT_OPTION = "_quarl_edge_head_accumulators"   # marks the rewritten op (not a TFLite option)


def _apply_head_readout(model: TFLiteModel) -> TFLiteModel:
    value = model.metadata.get(HEAD_METADATA)
    if value is None:
        return model
    if value != b"accumulators":
        raise ModelError(f"{model.path}: metadata {HEAD_METADATA} = {value!r}; the generator knows "
                         "only b'accumulators'")
    why = "the accumulator head (int8-acc) needs a graph ending in FULLY_CONNECTED(int8) -> DEQUANTIZE"
    if len(model.outputs) != 1:
        raise UnsupportedOpError(f"{why}, with one output; this one has {len(model.outputs)}")
    producer = {o: op for op in model.operators for o in op.outputs}
    deq = producer.get(model.outputs[0])
    fc = producer.get(deq.inputs[0]) if deq is not None and deq.opcode == "DEQUANTIZE" else None
    if fc is None or fc.opcode != "FULLY_CONNECTED":
        raise UnsupportedOpError(f"{why}; its output comes from "
                                 f"{deq.opcode if deq is not None else 'no op'}")
    head = fc.outputs[0]
    readers = [op.index for op in model.operators if head in op.inputs]
    if readers != [deq.index] or head in model.outputs:
        raise UnsupportedOpError(f"{why}; the int8 head output is also read elsewhere")
    if (fc.fused_activation or "NONE") != "NONE":
        raise UnsupportedOpError(f"{why} without a fused activation; it has {fc.fused_activation}")
    rewritten = dataclasses.replace(fc, outputs=[deq.outputs[0]],
                                    options={**fc.options, HEAD_READOUT_OPTION: True})
    ops = [rewritten if op.index == fc.index else op for op in model.operators if op is not deq]
    return dataclasses.replace(model, operators=ops)


def _lower_fc_acc(op, model, pname, x, w, bias, out, act, batches, accum_depth, output_depth,
                  wname, comment_shapes) -> _Kernel:
    _activation_tensor(op, model, x.index, "int8", "input")
    _activation_tensor(op, model, out.index, "float32", "output")
    if w.dtype != "int8":
        raise _unsupported(op, model, f"accumulator head with {w.dtype} weights")
    _per_tensor(x, op, model, "input")
    wq = _weight_quantization(op, model, w, "weights", output_depth, 0)
    if np.any(wq.zero_point != 0):
        raise _unsupported(op, model, f"accumulator head weights '{w.name}' are not symmetric")
    if bias is not None and (bias.dtype != "int32" or bias.size != output_depth):
        raise _unsupported(op, model, f"bias '{bias.name}' {bias.dtype} {list(bias.shape)}")
    worst = accum_depth * 128 * (128 + abs(x.zero_point)) + (
        int(np.abs(bias.data.astype(np.int64)).max()) if bias is not None else 0)
    if worst > qmath.INT32_MAX:
        raise _unsupported(op, model, f"the int32 accumulator could overflow (accum_depth {accum_depth})")
    n_ch = len(wq.scale)
    # float32 of the double product of the two float32 scales (remedies.HeadAccumulators too).
    scales = [float(np.float32(float(np.float32(x.scale)) * float(np.float32(sc)))) for sc in wq.scale]
    consts = [f"/* {c_comment(w.describe())}, {n_ch} scale(s) */\n"
              + c_array("int8_t", wname, w.data, 16, lambda v: str(int(v))),
              c_array("float", f"{pname}_scales", scales, 6, c_float)]
    bname, bias_bytes = _bias_array(bias, "int32_t", lambda v: str(int(v)), 8, consts)
    const_bytes = w.size + 4 * n_ch + bias_bytes
    params = (f"static const qe_fc_s8_acc_params_t {pname} = {{\n"
              f"    .input_offset = {-x.zero_point},\n    .scales = {pname}_scales,\n"
              f"    .channel_stride = {1 if n_ch > 1 else 0}u,\n"
              f"    .batches = {batches}u,\n    .accum_depth = {accum_depth}u,\n"
              f"    .output_depth = {output_depth}u,\n}};\n")
    call = (f"qe_fully_connected_s8_acc_f32(&{pname}, (const int8_t *)@T{x.index}@, {wname}, "
            f"{bname}, (float *)@T{out.index}@);")
    return _Kernel(op, call, params, consts, const_bytes,
                   "FULLY_CONNECTED int8 -> float32 accumulator head (int8-acc): " + comment_shapes)


def _lower_fc_pc(op, model, pname, x, w, bias, out, act, batches, accum_depth, output_depth,
                 wname, comment_shapes) -> _Kernel:
    """int8 FULLY_CONNECTED with per-channel weights, and the int16x8 one (per tensor or per
    channel): TFLM's FullyConnectedPerChannel and FullyConnected<int64_t> for int16."""
    dt = x.dtype
    _activation_tensor(op, model, x.index, dt, "input")
    _activation_tensor(op, model, out.index, dt, "output")
    if w.dtype != "int8":
        raise _unsupported(op, model, f"{dt} input with {w.dtype} weights")
    for t, what in ((x, "input"), (out, "output")):
        _per_tensor(t, op, model, what)
    wq = _weight_quantization(op, model, w, "weights", output_depth, 0)
    n_ch = len(wq.scale)
    if n_ch > 1 and np.any(wq.zero_point != 0):
        raise _unsupported(op, model, f"per-channel weights '{w.name}' are not symmetric")
    if dt == "int8" and len(out.shape) != 2:
        raise _unsupported(op, model, f"per-channel int8 output of rank {len(out.shape)} "
                                      f"(TFLM's per-channel kernel reads [batches, depth] only)")
    if dt == "int16":
        for t, what in ((x, "input"), (out, "output")):
            if t.zero_point != 0:
                raise _unsupported(op, model, f"int16 {what} '{t.name}' has zero point {t.zero_point}")
        if n_ch == 1 and int(wq.zero_point[0]) != 0:
            raise _unsupported(op, model, f"int16x8 weights '{w.name}' are not symmetric")
    bias_ctype = "int64_t" if dt == "int16" else "int32_t"
    if bias is not None:
        if bias.dtype != bias_ctype[:-2]:
            raise _unsupported(op, model, f"{dt} FULLY_CONNECTED with {bias.dtype} bias "
                                          f"'{bias.name}', expected {bias_ctype[:-2]}")
        if bias.size != output_depth:
            raise ModelError(f"op {op.index} FULLY_CONNECTED: bias has {bias.size} values, "
                             f"expected {output_depth}")
    qmin, qmax = (-128, 127) if dt == "int8" else (-32768, 32767)
    worst = accum_depth * 128 * (abs(qmin) + abs(x.zero_point)) + (
        int(np.abs(bias.data.astype(np.int64)).max()) if bias is not None else 0)
    limit = qmath.INT32_MAX if dt == "int8" else (1 << 47) - 1
    if worst > limit:
        raise _unsupported(op, model, f"the accumulator could overflow (accum_depth {accum_depth})")
    mults, shifts = [], []
    for c in range(n_ch):
        real = qmath.effective_scale(x.scale, float(wq.scale[c]), out.scale)
        m, sh = qmath.quantize_multiplier(real)
        if not -31 <= sh <= (30 if dt == "int8" else 7):
            raise _unsupported(op, model, f"requantization scale {real:g} is out of range")
        mults.append(m)
        shifts.append(sh)
    act_min, act_max = qmath.activation_range_quantized(act, out.scale, out.zero_point, qmin, qmax)
    ctype = "int8_t" if dt == "int8" else "int16_t"
    consts = [f"/* {c_comment(w.describe())}, {n_ch} scale(s) */\n"
              + c_array("int8_t", wname, w.data, 16, lambda v: str(int(v))),
              c_array("int32_t", f"{pname}_mult", mults, 6, str),
              c_array("int8_t", f"{pname}_shift", shifts, 16, str)]
    bname, bias_bytes = _bias_array(bias, bias_ctype, c_int64 if dt == "int16" else str, 6, consts)
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
    return _Kernel(op, call, params, consts, const_bytes, f"FULLY_CONNECTED {kind}: " + comment_shapes)


def _same_shape_io(op: Operator, model: TFLiteModel) -> tuple[Tensor, Tensor]:
    if len([i for i in op.inputs if i >= 0]) < 1 or len(op.outputs) != 1:
        raise _unsupported(op, model, "expected one input and one output")
    x, y = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    if x.is_constant:
        raise _unsupported(op, model, f"input '{x.name}' is a constant")
    if x.dtype != y.dtype:
        raise _unsupported(op, model, f"input {x.dtype} and output {y.dtype} differ")
    if x.size != y.size:
        raise ModelError(f"op {op.index} {op.opcode}: input has {x.size} elements, output {y.size}")
    return x, y


def _lower_unary(op: Operator, model: TFLiteModel, pname: str) -> _Kernel:
    """RELU, RELU6, TANH, LOGISTIC: int8 as a precomputed 256-entry table, float32 directly."""
    x, y = _same_shape_io(op, model)
    what = f"{op.opcode} {x.dtype}: {x.describe()} -> {y.describe()}"
    if x.dtype == "float32":
        fn = {"RELU": "qe_relu_f32({n}u, {i}, {o});", "RELU6": "qe_relu6_f32({n}u, {i}, {o});",
              "TANH": "qe_tanh_f32({n}u, qe_libm_tanhf, {i}, {o});",
              "LOGISTIC": "qe_logistic_f32({n}u, qe_libm_expf, {i}, {o});"}[op.opcode]
        call = fn.format(n=x.size, i=f"(const float *)@T{x.index}@", o=f"(float *)@T{y.index}@")
        return _Kernel(op, call, "", [], 0, what, inplace=True)
    if x.dtype != "int8":
        raise _unsupported(op, model, f"{x.dtype} {op.opcode}; supported: int8 and float32")
    _per_tensor(x, op, model, "input")
    _per_tensor(y, op, model, "output")
    if op.opcode in ("TANH", "LOGISTIC"):
        want = (1.0 / 128, 0) if op.opcode == "TANH" else (1.0 / 256, -128)
        if (float(y.scale), y.zero_point) != want:
            raise _unsupported(op, model, f"int8 {op.opcode} output '{y.name}' has scale {y.scale:g} "
                                          f"and zero point {y.zero_point}; TFLM's kernel produces "
                                          f"scale {want[0]:g}, zero point {want[1]}")
        try:
            table = qmath.tanh_logistic_lut_s8(op.opcode, x.scale, x.zero_point)
        except ValueError as exc:
            raise _unsupported(op, model, f"input scale {x.scale:g}: {exc}") from None
    elif op.opcode == "RELU":
        table = qmath.relu_lut_s8(x.scale, x.zero_point, y.scale, y.zero_point)
    else:
        if (float(x.scale), x.zero_point) != (float(y.scale), y.zero_point):
            raise _unsupported(op, model, "int8 RELU6 with different input and output quantization "
                                          "(TFLM's kernel does not rescale)")
        table = qmath.relu6_lut_s8(x.scale, x.zero_point)
    tname = f"{pname}_table"
    consts = [f"/* {op.opcode} int8 for input scale {x.scale:.9g}, zero point {x.zero_point}: "
              f"output[q] = table[q + 128] */\n" + c_array("int8_t", tname, table, 16, str)]
    call = (f"qe_lut_s8({tname}, {x.size}u, (const int8_t *)@T{x.index}@, "
            f"(int8_t *)@T{y.index}@);")
    return _Kernel(op, call, "", consts, 256, what + " (lookup table)", inplace=True)


def _lower_reshape(op: Operator, model: TFLiteModel, pname: str) -> _Kernel:
    """RESHAPE, SQUEEZE, EXPAND_DIMS: the output is the input's bytes, no code (an alias)."""
    x, y = _same_shape_io(op, model)
    if y.quantization is not None or x.quantization is not None:
        if (x.scale, x.zero_point) != (y.scale, y.zero_point):
            raise _unsupported(op, model, "input and output quantization differ")
    return _Kernel(op, "", "", [], 0, f"{op.opcode}: {x.describe()} -> {y.describe()} (alias, no code)",
                   alias=True)


# ------------------------------------------------------------ shared helpers for new ops
def _opt(op: Operator, key: str, default=None):
    v = op.options.get(key, default)
    return default if v is None else v


def _bias_array(bias: Tensor | None, ctype: str, fmt, per_line: int, consts: list[str]) -> tuple[str, int]:
    """An op's optional bias as a const array appended to consts: (its C name, or QE_FLASH_NULL
    when there is none (firmware/core/qe_flash.h); the bytes it takes)."""
    if bias is None:
        return "QE_FLASH_NULL", 0
    name = c_ident(bias.name, f"b{bias.index}_")
    consts.append(f"/* {c_comment(bias.describe())} */\n" + c_array(ctype, name, bias.data, per_line, fmt))
    return name, bias.data.itemsize * bias.size


def _const_operand(t: Tensor, ctype: str, fmt, consts: list[str], per_line: int = 12) -> str:
    """A constant operand as a C const array (appended to consts); returns its name."""
    name = c_ident(t.name, f"c{t.index}_")
    # an operand the kernel also takes from the arena: a RAM pointer, so no QE_FLASH here
    consts.append(f"/* {c_comment(t.describe())} */\n"
                  + c_ram_array(c_array(ctype, name, t.data, per_line, fmt)))
    return name


def _operand(t: Tensor, ctype: str, fmt, consts: list[str]) -> str:
    """A C pointer expression for an input: the arena placeholder or a const array."""
    if t.is_constant:
        return _const_operand(t, ctype, fmt, consts)
    return f"(const {ctype} *)@T{t.index}@"


def _u16(op: Operator, model: TFLiteModel, what: str, v: int) -> int:
    if not 0 < v <= 0xFFFF:
        raise _unsupported(op, model, f"{what} {v} does not fit the kernel's uint16 field")
    return int(v)


_PADDING = {0: "SAME", 1: "VALID"}


def _window(op: Operator, model: TFLiteModel, x: Tensor, out: Tensor, k_h: int, k_w: int,
            depth_multiplier: int = 1) -> tuple[dict, str]:
    """TFLM's ComputePaddingHeightWidth for an NHWC op; checks the output shape.
    Returns (window fields, a one-line description)."""
    if len(x.shape) != 4 or len(out.shape) != 4:
        raise _unsupported(op, model, f"input {list(x.shape)} and output {list(out.shape)} must be "
                                      f"4-D (NHWC)")
    padding = _PADDING.get(_opt(op, "padding", 0))
    if padding is None:
        raise _unsupported(op, model, f"padding type {op.options.get('padding')}")
    sh, sw = int(_opt(op, "strideH", 1)), int(_opt(op, "strideW", 1))
    dh, dw = int(_opt(op, "dilationHFactor", 1)), int(_opt(op, "dilationWFactor", 1))
    if min(sh, sw, dh, dw) < 1:
        raise _unsupported(op, model, f"stride {sh}x{sw} / dilation {dh}x{dw}")
    n, ih, iw, ic = x.shape
    on, oh, ow, oc = out.shape
    pads = []
    for what, i, k, s, d, o in (("height", ih, k_h, sh, dh, oh), ("width", iw, k_w, sw, dw, ow)):
        eff = (k - 1) * d + 1
        want = (i + s - 1) // s if padding == "SAME" else (i + s - eff) // s
        if want != o:
            raise ModelError(f"op {op.index} {op.opcode}: output {what} {o}, but {padding} padding "
                             f"of {i} with a {k}-wide window (stride {s}, dilation {d}) gives {want}")
        pads.append(max((o - 1) * s + eff - i, 0) // 2)
    if on != n:
        raise ModelError(f"op {op.index} {op.opcode}: input batch {n}, output batch {on}")
    g = dict(batches=n, in_h=ih, in_w=iw, in_c=ic, out_h=oh, out_w=ow, out_c=oc, k_h=k_h, k_w=k_w,
             stride_h=sh, stride_w=sw, dil_h=dh, dil_w=dw, pad_top=pads[0], pad_left=pads[1],
             depth_multiplier=depth_multiplier)
    for key, v in g.items():
        if key.startswith("pad_"):
            if v > 0xFFFF:
                raise _unsupported(op, model, f"{key} {v} does not fit uint16")
        else:
            _u16(op, model, key, v)
    desc = (f"{k_h}x{k_w} window, stride {sh}x{sw}, dilation {dh}x{dw}, {padding} "
            f"(pad top {pads[0]}, left {pads[1]})")
    return g, desc


def _window_c(g: dict) -> str:
    return ("    .g = {\n" + "".join(f"        .{k} = {v}u,\n" for k, v in g.items()) + "    },\n")


def _act(op: Operator, model: TFLiteModel) -> str:
    act = op.fused_activation or "NONE"
    if act not in qmath.ACTIVATIONS:
        raise _unsupported(op, model, f"fused activation {act}")
    return act


# ----------------------------------------------------------- CONV_2D, DEPTHWISE_CONV_2D
def _lower_conv(op: Operator, model: TFLiteModel, pname: str) -> _Kernel:
    """CONV_2D and DEPTHWISE_CONV_2D: int8 (per-channel or per-tensor symmetric weights, int32
    bias) as TFLM's ConvPerChannel / DepthwiseConvPerChannel, and float32."""
    depthwise = op.opcode == "DEPTHWISE_CONV_2D"
    ins = op.inputs + [-1] * (3 - len(op.inputs))
    if len(op.inputs) < 2 or len(op.outputs) != 1 or ins[0] < 0 or ins[1] < 0:
        raise _unsupported(op, model, "expected input, filter, optional bias and one output")
    x, w, out = model.tensors[ins[0]], model.tensors[ins[1]], model.tensors[op.outputs[0]]
    bias = model.tensors[ins[2]] if ins[2] >= 0 else None
    act = _act(op, model)
    if not w.is_constant or (bias is not None and not bias.is_constant):
        raise _unsupported(op, model, "the filter and bias must be constant")
    if x.is_constant:
        raise _unsupported(op, model, f"input '{x.name}' is a constant")
    if x.dtype != out.dtype:
        raise _unsupported(op, model, f"input {x.dtype}, output {out.dtype}")
    if x.dtype == "float32" and w.dtype in ("int8", "uint8", "int4"):
        raise _unsupported(op, model, "float32 input with int8 weights is a hybrid (dynamic-range "
                                      "quantized) model; use full int8 or float32")
    if len(w.shape) != 4:
        raise _unsupported(op, model, f"filter of shape {list(w.shape)}, expected 4-D")
    if depthwise:
        one, k_h, k_w, oc = w.shape
        ic = x.shape[3] if len(x.shape) == 4 else 0
        if one != 1 or ic == 0 or oc % ic:
            raise _unsupported(op, model, f"depthwise filter {list(w.shape)} for input {list(x.shape)}")
        dm = oc // ic
        opt_dm = int(_opt(op, "depthMultiplier", 0))
        if opt_dm not in (0, dm):
            raise _unsupported(op, model, f"depth_multiplier option {opt_dm}, but the shapes give {dm}")
        g, desc = _window(op, model, x, out, k_h, k_w, dm)
        qdim = 3
    else:
        oc, k_h, k_w, fic = w.shape
        g, desc = _window(op, model, x, out, k_h, k_w)
        if fic != g["in_c"]:
            raise _unsupported(op, model, f"grouped convolution (filter depth {fic}, input depth "
                                          f"{g['in_c']})")
        dm = 1
        qdim = 0
    if g["out_c"] != oc:
        raise ModelError(f"op {op.index} {op.opcode}: output depth {g['out_c']}, filter gives {oc}")
    if bias is not None and bias.size != oc:
        raise ModelError(f"op {op.index} {op.opcode}: bias has {bias.size} values, expected {oc}")
    kind = "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D"
    fn = "qe_depthwise_conv" if depthwise else "qe_conv"
    wname = c_ident(w.name, f"w{w.index}_")
    comment = (f"{kind} {x.dtype}: {x.describe()} * {w.describe()}"
               + (f" + {bias.describe()}" if bias is not None else "")
               + f" -> {out.describe()}; {desc}" + (f", depth multiplier {dm}" if depthwise else "")
               + f", {act}")

    if x.dtype == "float32":
        if w.dtype != "float32" or (bias is not None and bias.dtype != "float32"):
            raise _unsupported(op, model, f"float32 input with {w.dtype} filter")
        lo, hi = qmath.activation_range_float(act)
        consts = [f"/* {c_comment(w.describe())} */\n" + c_array("float", wname, w.data, 6, c_float)]
        bname, bias_bytes = _bias_array(bias, "float", c_float, 6, consts)
        params = (f"static const qe_conv_f32_params_t {pname} = {{\n" + _window_c(g)
                  + f"    .activation_min = {c_float_limit(lo)},\n    .activation_max = {c_float_limit(hi)},\n}};\n")
        call = (f"{fn}_f32(&{pname}, (const float *)@T{x.index}@, {wname}, {bname}, "
                f"(float *)@T{out.index}@);")
        return _Kernel(op, call, params, consts, 4 * w.size + bias_bytes, comment)

    if x.dtype != "int8":
        raise _unsupported(op, model, f"{x.dtype} {kind}; supported: int8 and float32")
    if w.dtype != "int8":
        raise _unsupported(op, model, f"int8 input with {w.dtype} filter")
    for t, what in ((x, "input"), (out, "output")):
        _per_tensor(t, op, model, what)
    wq = _weight_quantization(op, model, w, "filter", oc, qdim)
    n_ch = len(wq.scale)
    if np.any(wq.zero_point != 0):
        raise _unsupported(op, model, f"filter '{w.name}' is not symmetric (zero point "
                                      f"{int(wq.zero_point[0])}); TFLM's int8 kernels need 0")
    if bias is not None and bias.dtype != "int32":
        raise _unsupported(op, model, f"bias '{bias.name}' is {bias.dtype}, expected int32")
    taps = k_h * k_w * (1 if depthwise else g["in_c"])
    worst = taps * 128 * (128 + abs(x.zero_point)) + (
        int(np.abs(bias.data.astype(np.int64)).max()) if bias is not None else 0)
    if worst > qmath.INT32_MAX:
        raise _unsupported(op, model, f"the int32 accumulator could overflow ({taps} taps)")
    mults, shifts = [], []
    for c in range(oc):
        real = qmath.effective_scale(x.scale, float(wq.scale[c if n_ch > 1 else 0]), out.scale)
        m, sh = qmath.quantize_multiplier(real)
        if not -31 <= sh <= 30:
            raise _unsupported(op, model, f"requantization scale {real:g} is out of range")
        mults.append(m)
        shifts.append(sh)
    act_min, act_max = qmath.activation_range_quantized(act, out.scale, out.zero_point)
    consts = [f"/* {c_comment(w.describe())}, {n_ch} scale(s) */\n"
              + c_array("int8_t", wname, w.data, 16, lambda v: str(int(v))),
              c_array("int32_t", f"{pname}_mult", mults, 6, str),
              c_array("int8_t", f"{pname}_shift", shifts, 16, str)]
    bname, bias_bytes = _bias_array(bias, "int32_t", str, 6, consts)
    params = (f"static const qe_conv_s8_params_t {pname} = {{\n" + _window_c(g)
              + f"    .input_offset = {-x.zero_point},\n    .output_offset = {out.zero_point},\n"
              f"    .activation_min = {act_min},\n    .activation_max = {act_max},\n"
              f"    .multipliers = {pname}_mult,\n    .shifts = {pname}_shift,\n}};\n")
    call = (f"{fn}_s8(&{pname}, (const int8_t *)@T{x.index}@, {wname}, {bname}, "
            f"(int8_t *)@T{out.index}@);")
    return _Kernel(op, call, params, consts, w.size + 5 * oc + bias_bytes, comment)


# -------------------------------------------------------- MAX_POOL_2D, AVERAGE_POOL_2D
def _lower_pool(op: Operator, model: TFLiteModel, pname: str) -> _Kernel:
    if len(op.inputs) != 1 or len(op.outputs) != 1:
        raise _unsupported(op, model, "expected one input and one output")
    x, out = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    if x.is_constant or x.dtype != out.dtype:
        raise _unsupported(op, model, "input must be an activation of the output's type")
    act = _act(op, model)
    k_h, k_w = int(_opt(op, "filterHeight", 0)), int(_opt(op, "filterWidth", 0))
    if min(k_h, k_w) < 1:
        raise _unsupported(op, model, f"window {k_h}x{k_w}")
    g, desc = _window(op, model, x, out, k_h, k_w)
    if g["dil_h"] != 1 or g["dil_w"] != 1:
        raise _unsupported(op, model, "dilated pooling")
    if g["out_c"] != g["in_c"]:
        raise ModelError(f"op {op.index} {op.opcode}: input depth {g['in_c']}, output {g['out_c']}")
    # every window must overlap the image (TFLM's AveragePool fails on an empty one)
    for o, s, pad, k, i in ((g["out_h"], g["stride_h"], g["pad_top"], k_h, g["in_h"]),
                            (g["out_w"], g["stride_w"], g["pad_left"], k_w, g["in_w"])):
        for j in range(o):
            start = j * s - pad
            if min(start + k, i) - max(start, 0) <= 0:
                raise _unsupported(op, model, "a pooling window lies entirely in the padding")
    kind = "max" if op.opcode == "MAX_POOL_2D" else "average"
    comment = f"{op.opcode} {x.dtype}: {x.describe()} -> {out.describe()}; {desc}, {act}"
    if x.dtype == "float32":
        lo, hi = qmath.activation_range_float(act)
        params = (f"static const qe_pool_f32_params_t {pname} = {{\n" + _window_c(g)
                  + f"    .activation_min = {c_float_limit(lo)},\n    .activation_max = {c_float_limit(hi)},\n}};\n")
        call = (f"qe_{kind}_pool_f32(&{pname}, (const float *)@T{x.index}@, "
                f"(float *)@T{out.index}@);")
        return _Kernel(op, call, params, [], 0, comment)
    if x.dtype != "int8":
        raise _unsupported(op, model, f"{x.dtype} {op.opcode}; supported: int8 and float32")
    _per_tensor(x, op, model, "input")
    _per_tensor(out, op, model, "output")
    if (float(x.scale), x.zero_point) != (float(out.scale), out.zero_point):
        raise _unsupported(op, model, "int8 pooling with different input and output quantization "
                                      "(TFLM's kernel does not rescale)")
    lo, hi = qmath.activation_range_quantized(act, out.scale, out.zero_point)
    params = (f"static const qe_pool_s8_params_t {pname} = {{\n" + _window_c(g)
              + f"    .activation_min = {lo},\n    .activation_max = {hi},\n}};\n")
    call = f"qe_{kind}_pool_s8(&{pname}, (const int8_t *)@T{x.index}@, (int8_t *)@T{out.index}@);"
    return _Kernel(op, call, params, [], 0, comment)


# ----------------------------------------------------------------------------- SOFTMAX
def _lower_softmax(op: Operator, model: TFLiteModel, pname: str) -> _Kernel:
    x, y = _same_shape_io(op, model)
    if not x.shape:
        raise _unsupported(op, model, "a scalar input")
    depth = x.shape[-1]
    outer = x.size // depth if depth else 0
    beta = float(np.float32(_opt(op, "beta", 0.0)))   # TFLM: 0 without options
    what = f"SOFTMAX {x.dtype}: {x.describe()} -> {y.describe()}, beta {beta:g}, over the last axis"
    if x.dtype == "float32":
        params = (f"static const qe_softmax_f32_params_t {pname} = {{\n    .beta = {c_float(beta)},\n"
                  f"    .outer = {outer}u,\n    .depth = {depth}u,\n}};\n")
        call = f"qe_softmax_f32(&{pname}, qe_libm_expf, (const float *)@T{x.index}@, (float *)@T{y.index}@);"
        return _Kernel(op, call, params, [], 0, what, inplace=True)
    if x.dtype != "int8":
        raise _unsupported(op, model, f"{x.dtype} SOFTMAX; supported: int8 and float32")
    _per_tensor(x, op, model, "input")
    _per_tensor(y, op, model, "output")
    if (float(y.scale), y.zero_point) != (1.0 / 256, -128):
        raise _unsupported(op, model, f"int8 SOFTMAX output '{y.name}' has scale {y.scale:g} and zero "
                                      f"point {y.zero_point}; TFLM needs scale 1/256, zero point -128")
    if not 1 <= depth <= 511:
        raise _unsupported(op, model, f"int8 SOFTMAX over {depth} values; at most 511 (the Q12 sum "
                                      f"and TFLM's final shift stay in range)")
    try:
        mult, shift, diff_min = qmath.softmax_params_s8(x.scale, beta)
    except ValueError as exc:
        raise _unsupported(op, model, f"input scale {x.scale:g}: {exc}") from None
    table = qmath.softmax_exp_table_s8(mult, shift, diff_min)
    tname = f"{pname}_exp"
    consts = [f"/* SOFTMAX int8, input scale {x.scale:.9g}, beta {beta:g}: exp of -k input steps "
              f"in Q0.31 (TFLM multiplier {mult}, left shift {shift}, diff_min {diff_min}) */\n"
              + c_array("int32_t", tname, table, 6, str)]
    params = (f"static const qe_softmax_s8_params_t {pname} = {{\n    .exp_table = {tname},\n"
              f"    .outer = {outer}u,\n    .depth = {depth}u,\n}};\n")
    call = f"qe_softmax_s8(&{pname}, (const int8_t *)@T{x.index}@, (int8_t *)@T{y.index}@);"
    return _Kernel(op, call, params, consts, 4 * 256, what, inplace=True)


# ----------------------------------------------------------------------------- ADD, MUL
def _broadcast(op: Operator, model: TFLiteModel, a: Tensor, b: Tensor, out: Tensor) -> str:
    """The qe_broadcast_t initializer for out = a (op) b with numpy broadcasting."""
    rank = len(out.shape)
    if max(len(a.shape), len(b.shape)) > rank or rank > 6:
        raise _unsupported(op, model, f"shapes {list(a.shape)}, {list(b.shape)} -> {list(out.shape)}")
    try:
        want = tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise ModelError(f"op {op.index} {op.opcode}: shapes {list(a.shape)} and {list(b.shape)} "
                         f"do not broadcast") from None
    if want != tuple(out.shape):
        raise ModelError(f"op {op.index} {op.opcode}: {list(a.shape)} and {list(b.shape)} broadcast "
                         f"to {list(want)}, the output is {list(out.shape)}")
    for d in out.shape:
        _u16(op, model, "output dimension", d)
    if tuple(a.shape) == tuple(b.shape) == tuple(out.shape) or out.size == 0:
        return f"    .bc = {{ .size = {out.size}u, .ndims = 0u }},\n"

    def strides(t: Tensor) -> list[int]:
        shape = [1] * (rank - len(t.shape)) + list(t.shape)
        st, acc = [0] * rank, 1
        for d in range(rank - 1, -1, -1):
            st[d] = acc if shape[d] != 1 else 0
            acc *= shape[d]
        return st
    fmt = lambda v: "{ " + ", ".join(f"{x}u" for x in v) + " }"  # noqa: E731
    return (f"    .bc = {{\n        .size = {out.size}u,\n        .ndims = {rank}u,\n"
            f"        .dims = {fmt(out.shape)},\n        .stride1 = {fmt(strides(a))},\n"
            f"        .stride2 = {fmt(strides(b))},\n    }},\n")


def _lower_binary(op: Operator, model: TFLiteModel, pname: str) -> _Kernel:
    """ADD and MUL, int8 (TFLM's rescaling) and float32, with broadcasting."""
    if len(op.inputs) != 2 or len(op.outputs) != 1 or min(op.inputs) < 0:
        raise _unsupported(op, model, "expected two inputs and one output")
    a, b = model.tensors[op.inputs[0]], model.tensors[op.inputs[1]]
    out = model.tensors[op.outputs[0]]
    act = _act(op, model)
    if not (a.dtype == b.dtype == out.dtype):
        raise _unsupported(op, model, f"inputs {a.dtype}, {b.dtype}, output {out.dtype} differ")
    if a.is_constant and b.is_constant:
        raise _unsupported(op, model, "both inputs are constant")
    bc = _broadcast(op, model, a, b, out)
    shapes = f"{a.describe()} {'+' if op.opcode == 'ADD' else '*'} {b.describe()} -> {out.describe()}, {act}"
    consts: list[str] = []
    fn = op.opcode.lower()
    inplace = not a.is_constant
    if a.dtype == "float32":
        lo, hi = qmath.activation_range_float(act)
        pa, pb = (_operand(t, "float", c_float, consts) for t in (a, b))
        params = (f"static const qe_binary_f32_params_t {pname} = {{\n{bc}"
                  f"    .activation_min = {c_float_limit(lo)},\n    .activation_max = {c_float_limit(hi)},\n}};\n")
        call = f"qe_{fn}_f32(&{pname}, {pa}, {pb}, (float *)@T{out.index}@);"
        cb = sum(4 * t.size for t in (a, b) if t.is_constant)
        return _Kernel(op, call, params, consts, cb, f"{op.opcode} float32: {shapes}", inplace=inplace)
    if a.dtype != "int8":
        raise _unsupported(op, model, f"{a.dtype} {op.opcode}; supported: int8 and float32")
    for t, what in ((a, "input 1"), (b, "input 2"), (out, "output")):
        _per_tensor(t, op, model, what)
    lo, hi = qmath.activation_range_quantized(act, out.scale, out.zero_point)
    pa, pb = (_operand(t, "int8_t", lambda v: str(int(v)), consts) for t in (a, b))
    head = (f"{bc}    .input1_offset = {-a.zero_point},\n    .input2_offset = {-b.zero_point},\n"
            f"    .output_offset = {out.zero_point},\n")
    tail = f"    .activation_min = {lo},\n    .activation_max = {hi},\n}};\n"
    if op.opcode == "ADD":
        try:
            (m1, s1), (m2, s2), (mo, so) = qmath.add_params_s8(a.scale, b.scale, out.scale)
        except ValueError as exc:
            raise _unsupported(op, model, str(exc)) from None
        params = (f"static const qe_add_s8_params_t {pname} = {{\n{head}"
                  f"    .left_shift = 20,\n"
                  f"    .input1_multiplier = {m1},\n    .input1_shift = {s1},\n"
                  f"    .input2_multiplier = {m2},\n    .input2_shift = {s2},\n"
                  f"    .output_multiplier = {mo},\n    .output_shift = {so},\n{tail}")
    else:
        real = (float(np.float32(a.scale)) * float(np.float32(b.scale)) / float(np.float32(out.scale)))
        m, sh = qmath.quantize_multiplier(real)
        if not -31 <= sh <= 30:
            raise _unsupported(op, model, f"requantization scale {real:g} is out of range")
        params = (f"static const qe_mul_s8_params_t {pname} = {{\n{head}"
                  f"    .output_multiplier = {m},\n    .output_shift = {sh},\n{tail}")
    call = f"qe_{fn}_s8(&{pname}, {pa}, {pb}, (int8_t *)@T{out.index}@);"
    cb = sum(t.size for t in (a, b) if t.is_constant)
    return _Kernel(op, call, params, consts, cb, f"{op.opcode} int8: {shapes}", inplace=inplace)


# ------------------------------------------------------------------------ CONCATENATION
def _lower_concatenation(op: Operator, model: TFLiteModel, pname: str) -> _Kernel:
    if not op.inputs or len(op.outputs) != 1 or min(op.inputs) < 0 or len(op.inputs) > 255:
        raise _unsupported(op, model, "expected 1..255 inputs and one output")
    out = model.tensors[op.outputs[0]]
    xs = [model.tensors[i] for i in op.inputs]
    if _act(op, model) != "NONE":
        raise _unsupported(op, model, f"fused activation {op.fused_activation}")
    rank = len(out.shape)
    axis = int(_opt(op, "axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise _unsupported(op, model, f"axis {_opt(op, 'axis', 0)} for rank {rank}")
    if out.dtype not in ("float32", "int8", "int16", "int32"):
        raise _unsupported(op, model, f"{out.dtype} CONCATENATION")
    for t in xs:
        if t.dtype != out.dtype:
            raise _unsupported(op, model, f"input '{t.name}' is {t.dtype}, output {out.dtype}")
        if len(t.shape) != rank or any(t.shape[d] != out.shape[d] for d in range(rank) if d != axis):
            raise ModelError(f"op {op.index} CONCATENATION: input {list(t.shape)} does not fit output "
                             f"{list(out.shape)} along axis {axis}")
        if out.dtype in ("int8", "int16"):
            _per_tensor(t, op, model, f"input '{t.name}'")
            if (float(t.scale), t.zero_point) != (float(out.scale), out.zero_point):
                raise _unsupported(op, model, f"{out.dtype} input '{t.name}' (scale {t.scale:g}, zero point "
                                              f"{t.zero_point}) and output (scale {out.scale:g}, zero point "
                                              f"{out.zero_point}) differ: TFLM's kernel copies bytes "
                                              f"without rescaling and needs one quantization")
    if sum(t.shape[axis] for t in xs) != out.shape[axis]:
        raise ModelError(f"op {op.index} CONCATENATION: inputs do not add up to {list(out.shape)}")
    outer = int(np.prod(out.shape[:axis], dtype=np.int64))
    blocks = [int(np.prod(t.shape[axis:], dtype=np.int64)) * t.itemsize for t in xs]
    consts: list[str] = []
    ptrs = []
    for t in xs:
        if t.is_constant:
            name = c_ident(t.name, f"c{t.index}_")
            consts.append(f"/* {c_comment(t.describe())} (raw bytes) */\n"
                          + c_ram_array(c_array("uint8_t", name, np.frombuffer(t.data.tobytes(), np.uint8),
                                               16, str)))
            ptrs.append(name)
        else:
            ptrs.append(f"(const uint8_t *)@T{t.index}@")
    consts.append(c_array("uint32_t", f"{pname}_block", blocks, 8, lambda v: f"{v}u"))
    params = (f"static const qe_concatenation_params_t {pname} = {{\n    .outer = {outer}u,\n"
              f"    .n_inputs = {len(xs)}u,\n    .block_bytes = {pname}_block,\n}};\n")
    call = ("{ const uint8_t *const ins[" + str(len(xs)) + "] = { " + ", ".join(ptrs) + " }; "
            f"qe_concatenation(&{pname}, ins, (uint8_t *)@T{out.index}@); }}")
    comment = (f"CONCATENATION {out.dtype} along axis {axis}: "
               + " ++ ".join(t.describe() for t in xs) + f" -> {out.describe()}")
    cb = sum(t.nbytes for t in xs if t.is_constant) + 4 * len(xs)
    return _Kernel(op, call, params, consts, cb, comment)


# --------------------------------------------------------------------- MEAN, ARG_MAX
def _axis_values(op: Operator, model: TFLiteModel, rank: int) -> list[int]:
    if len(op.inputs) != 2 or len(op.outputs) != 1 or min(op.inputs) < 0:
        raise _unsupported(op, model, "expected an input, a constant axis and one output")
    ax = model.tensors[op.inputs[1]]
    if not ax.is_constant or ax.dtype not in ("int32", "int64"):
        raise _unsupported(op, model, f"axis '{ax.name}' must be a constant int32/int64 tensor")
    vals = []
    for v in np.asarray(ax.data).ravel():
        v = int(v) + rank if int(v) < 0 else int(v)
        if not 0 <= v < rank:
            raise _unsupported(op, model, f"axis {int(v)} for rank {rank}")
        vals.append(v)
    return sorted(set(vals))


def _outer_inner(shape, lo: int, hi: int) -> tuple[int, int, int]:
    p = lambda s: int(np.prod(s, dtype=np.int64))  # noqa: E731
    return p(shape[:lo]), p(shape[lo:hi + 1]), p(shape[hi + 1:])


def _lower_mean(op: Operator, model: TFLiteModel, pname: str) -> _Kernel:
    x, out = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    axes = _axis_values(op, model, len(x.shape))
    if x.is_constant or x.dtype != out.dtype:
        raise _unsupported(op, model, "input must be an activation of the output's type")
    if not axes or axes != list(range(axes[0], axes[-1] + 1)):
        raise _unsupported(op, model, f"axes {axes} are not one contiguous run of dimensions")
    outer, reduce, inner = _outer_inner(x.shape, axes[0], axes[-1])
    if out.size != outer * inner or reduce == 0:
        raise ModelError(f"op {op.index} MEAN: output {list(out.shape)} for {list(x.shape)} over {axes}")
    what = (f"MEAN {x.dtype}: {x.describe()} over axes {axes} -> {out.describe()} "
            f"({outer} x {reduce} x {inner})")
    if x.dtype == "float32":
        params = (f"static const qe_mean_params_t {pname} = {{\n    .outer = {outer}u,\n"
                  f"    .reduce = {reduce}u,\n    .inner = {inner}u,\n}};\n")
        call = f"qe_mean_f32(&{pname}, (const float *)@T{x.index}@, (float *)@T{out.index}@);"
        return _Kernel(op, call, params, [], 0, what)
    if x.dtype != "int8":
        raise _unsupported(op, model, f"{x.dtype} MEAN; supported: int8 and float32")
    _per_tensor(x, op, model, "input")
    _per_tensor(out, op, model, "output")
    if reduce * 255 > qmath.INT32_MAX:
        raise _unsupported(op, model, f"MEAN over {reduce} values could overflow the int32 sum")
    try:
        mult, shift = qmath.mean_params_s8(x.scale, out.scale, reduce)
    except ValueError as exc:
        raise _unsupported(op, model, str(exc)) from None
    params = (f"static const qe_mean_params_t {pname} = {{\n    .outer = {outer}u,\n"
              f"    .reduce = {reduce}u,\n    .inner = {inner}u,\n"
              f"    .sum_offset = {-x.zero_point * reduce},\n"
              f"    .multiplier = {mult},\n    .shift = {shift},\n"
              f"    .output_zero_point = {out.zero_point},\n}};\n")
    call = f"qe_mean_s8(&{pname}, (const int8_t *)@T{x.index}@, (int8_t *)@T{out.index}@);"
    return _Kernel(op, call, params, [], 0, what)


def _lower_arg_max(op: Operator, model: TFLiteModel, pname: str) -> _Kernel:
    x, out = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    axes = _axis_values(op, model, len(x.shape))
    if len(axes) != 1:
        raise _unsupported(op, model, f"axes {axes}; ARG_MAX takes one")
    if x.is_constant or x.dtype not in ("int8", "float32"):
        raise _unsupported(op, model, f"{x.dtype} input; supported: int8 and float32")
    if out.dtype != "int32":
        raise _unsupported(op, model, f"{out.dtype} output (the protocol carries int32: convert "
                                      f"with tf.argmax(..., output_type=tf.int32))")
    outer, n, inner = _outer_inner(x.shape, axes[0], axes[0])
    if out.size != outer * inner or n == 0:
        raise ModelError(f"op {op.index} ARG_MAX: output {list(out.shape)} for {list(x.shape)}")
    ct = "int8_t" if x.dtype == "int8" else "float"
    params = (f"static const qe_arg_max_params_t {pname} = {{\n    .outer = {outer}u,\n"
              f"    .axis = {n}u,\n    .inner = {inner}u,\n}};\n")
    call = (f"qe_arg_max_{'s8' if x.dtype == 'int8' else 'f32'}(&{pname}, (const {ct} *)@T{x.index}@, "
            f"(int32_t *)@T{out.index}@);")
    return _Kernel(op, call, params, [], 0,
                   f"ARG_MAX {x.dtype}: {x.describe()} along axis {axes[0]} -> {out.describe()}")


_LOWER = {
    "QUANTIZE": _lower_affine,
    "DEQUANTIZE": _lower_affine,
    "FULLY_CONNECTED": _lower_fully_connected,
    "RELU": _lower_unary,
    "RELU6": _lower_unary,
    "TANH": _lower_unary,
    "LOGISTIC": _lower_unary,
    "RESHAPE": _lower_reshape,
    "SQUEEZE": _lower_reshape,
    "EXPAND_DIMS": _lower_reshape,
    "SOFTMAX": _lower_softmax,
    "CONV_2D": _lower_conv,
    "DEPTHWISE_CONV_2D": _lower_conv,
    "MAX_POOL_2D": _lower_pool,
    "AVERAGE_POOL_2D": _lower_pool,
    "ADD": _lower_binary,
    "MUL": _lower_binary,
    "CONCATENATION": _lower_concatenation,
    "MEAN": _lower_mean,
    "ARG_MAX": _lower_arg_max,
}
KERNEL_HEADERS = ("activations_f32.h", "add.h", "arg_max.h", "concatenation.h", "conv.h",
                  "depthwise_conv.h", "fully_connected.h", "lut.h", "mean.h", "mul.h", "pooling.h",
                  "quantize.h", "softmax.h")


# ------------------------------------------------------------------------------ generate
def _model_name(name: str | None, path: Path) -> str:
    raw = name if name is not None else path.stem
    s = re.sub(r"[^0-9A-Za-z_.-]+", "_", raw).strip("_")[:63]
    if not s:
        raise ModelError(f"model name {raw!r} has no usable characters")
    return s


def _io_spec(t: Tensor, what: str) -> IOTensor:
    if t.dtype not in IO_DTYPES:
        raise UnsupportedOpError(f"graph {what} '{t.name}' has type {t.dtype}; "
                                 f"supported: {', '.join(IO_DTYPES)}")
    if len(t.shape) > QE_MAX_DIMS or any(d > 0xFFFF for d in t.shape):
        raise UnsupportedOpError(f"graph {what} '{t.name}' has shape {list(t.shape)}; at most "
                                 f"{QE_MAX_DIMS} dimensions of at most 65535")
    if t.is_constant:
        raise UnsupportedOpError(f"graph {what} '{t.name}' is a constant")
    if t.dtype in ("int8", "int16"):
        if t.quantization is None or t.quantization.per_channel:
            raise UnsupportedOpError(f"graph {what} '{t.name}' is {t.dtype} without per-tensor quantization")
        return IOTensor(t.dtype, tuple(t.shape), float(t.scale), int(t.zero_point))
    return IOTensor(t.dtype, tuple(t.shape), 0.0, 0)


def generate(tflite_path, out_dir, name: str | None = None) -> GeneratedModel:
    """Generate out_dir/model.c and out_dir/model.json for a .tflite model."""
    path = Path(tflite_path)
    model = _apply_head_readout(load(path))
    mname = _model_name(name, path)
    if model.n_subgraphs != 1:
        raise UnsupportedOpError(f"the model has {model.n_subgraphs} subgraphs (control flow); "
                                 "only single-graph models are supported")
    if not model.inputs or not model.outputs:
        raise ModelError(f"{path}: the graph has no inputs or no outputs")

    # Validate and lower every op first: nothing is written for a model we cannot run.
    kernels = []
    for op in model.operators:
        lower = _LOWER.get(op.opcode)
        if lower is None:
            raise _unsupported(op, model)
        kernels.append(lower(op, model, f"op{op.index}_params"))
    inputs = [_io_spec(t, "input") for t in model.input_tensors()]
    outputs = [_io_spec(t, "output") for t in model.output_tensors()]

    # Activation tensors and their lifetimes (op indices; graph inputs live from before op 0,
    # graph outputs until after the last op, since the harness reads and writes around invoke).
    n_ops = len(model.operators)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i in model.inputs:
        first[i] = -1
        last[i] = -1
    for op in model.operators:
        for i in op.inputs:
            if i >= 0 and not model.tensors[i].is_constant:
                if i not in first:
                    raise ModelError(f"{path}: op {op.index} {op.opcode} reads tensor "
                                     f"'{model.tensors[i].name}' before anything writes it")
                last[i] = max(last[i], op.index)
        for i in op.outputs:
            if i in first:
                raise ModelError(f"{path}: tensor '{model.tensors[i].name}' is written twice")
            first[i] = last[i] = op.index
    for i in model.outputs:
        if i not in first:
            raise ModelError(f"{path}: graph output '{model.tensors[i].name}' is never written")
        last[i] = n_ops
    act_ids = sorted(first)
    root = _alias_roots(model, kernels, first, last)
    roots = sorted(set(root.values()))
    bufs = []
    for r in roots:
        group = [i for i in act_ids if root[i] == r]
        bufs.append(planner.Buffer(max(model.tensors[i].nbytes for i in group),
                                   min(first[i] for i in group), max(last[i] for i in group)))
    mem = planner.plan(bufs, alignment=16)
    planner.check(bufs, mem, alignment=16)
    root_offset = {r: mem.offsets[k] for k, r in enumerate(roots)}
    offset = {i: root_offset[root[i]] for i in act_ids}
    arena_bytes = max(mem.arena_bytes, 16)

    gm = GeneratedModel(
        name=mname, hash=model.hash8, inputs=inputs, outputs=outputs, arena_bytes=arena_bytes,
        ops=[op.opcode for op in model.operators], weight_bytes=sum(k.const_bytes for k in kernels),
        input_names=[t.name for t in model.input_tensors()],
        output_names=[t.name for t in model.output_tensors()],
        input_offsets=[offset[i] for i in model.inputs],
        output_offsets=[offset[i] for i in model.outputs],
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gm.c_path = out / "model.c"
    gm.json_path = out / "model.json"
    gm.c_path.write_text(emit.model_c(model, gm, kernels, act_ids, offset, path, KERNEL_HEADERS))
    gm.json_path.write_text(emit.model_json(gm, model, path))
    return gm


def _alias_roots(model: TFLiteModel, kernels: list[_Kernel], first: dict[int, int],
                 last: dict[int, int]) -> dict[int, int]:
    """Which activation tensors share one buffer: tensor -> the tensor whose buffer it uses.

    A RESHAPE-like op's output always shares its input's bytes (no code runs; the bytes are
    read-only views of each other). An element-wise op (lookup table, float activation) writes
    its output over its input when that is safe: the input and everything sharing its buffer
    are used for the last time by this op, and none of them is a graph input or output (the
    harness reads those around qe_model_invoke)."""
    root = {i: i for i in first}
    io = set(model.inputs) | set(model.outputs)
    for k in kernels:
        if not (k.alias or k.inplace):
            continue
        src, dst = k.op.inputs[0], k.op.outputs[0]
        r = root[src]
        if k.inplace:
            group = [t for t in root if root[t] == r]
            if (any(last[t] > k.op.index for t in group) or any(t in io for t in group + [dst])
                    or model.tensors[dst].nbytes != model.tensors[src].nbytes):
                continue
        root[dst] = r
    return root


# ---------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quarl_edge.converters.cgen",
                                 description="Generate model.c and model.json from a .tflite model.")
    ap.add_argument("model", help="the .tflite file")
    ap.add_argument("out_dir", help="directory to write model.c and model.json into")
    ap.add_argument("--name", help="model name reported by the board (default: file stem)")
    args = ap.parse_args(argv)
    try:
        gm = generate(args.model, args.out_dir, name=args.name)
    except QuarlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{gm.c_path}: {gm.name} ({gm.hash.hex()}), ops {' '.join(gm.ops)}, "
          f"{gm.weight_bytes} B weights, {gm.arena_bytes} B arena")
    return 0


if __name__ == "__main__":
    sys.exit(main())
