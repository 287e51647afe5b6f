"""SVDF int8 (full integer, an int16 or an int8 activation state): firmware/core/kernels/svdf.c,
TFLM's svdf_common.cc (PrepareSvdf, EvalIntegerSvdfReference<int16_t / int8_t>).

- input and output int8 [batches, input] -> [batches, units]; weights_feature int8
  [filters, input]; weights_time int16 or int8 [filters, memory], the state's type; an int32
  bias [units] (required: TFLM's Prepare reads its scale; without one the interpreter crashes)
  whose scale is state scale x time-weight scale (TFLM: within 1e-5); the state a variable
  tensor [batches, filters x memory] (kept across invocations, zeroed to its
  zero point by qe_model_reset_state as TFLM's Reset), filters = units x rank;
- TFLM's multipliers, computed in float32 then quantized as TFLM does:
  input scale x feature scale / state scale, state scale x time scale / output scale;
- TFLM's integer SVDF applies no fused activation (the option is ignored, as there);
- float32 (and hybrid) SVDF are not supported.
"""
from __future__ import annotations

import numpy as np

from ..emit import c_array, c_comment, c_ident
from ..qmath import quantize_multiplier
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, opt, per_tensor, unsupported

SUPPORTED = ("SVDF int8 with an int16 or int8 state (TFLM's integer reference)",)
KERNEL_HEADERS = ()
OP_HEADERS = ("svdf.h",)

_CTYPE = {"int16": "int16_t", "int8": "int8_t"}


def _multiplier(op, model, real: float, what: str) -> tuple[int, int]:
    m, shift = quantize_multiplier(real)
    if not -31 <= shift <= 30:
        raise unsupported(op, model, f"the {what} rescale {real:g} is out of range (shift {shift})")
    return m, shift


def lower_svdf(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """SVDF int8 (the module docstring), in TFLM's steps: the operands, the shapes, Prepare's
    multipliers, then the kernel's constants and parameters."""
    x, wf, wt, bias, st, y = _operands(op, model)
    batches, input_size, filters, memory, rank, units = _shapes(op, model, x, wf, wt, bias, st, y)
    (real1, m1, sh1), (real2, m2, sh2) = _multipliers(op, model, x, wf, wt, bias, st, y)

    ctype = _CTYPE[st.dtype]
    wfname = c_ident(wf.name, f"w{wf.index}_")
    wtname = c_ident(wt.name, f"w{wt.index}_")
    consts = [f"/* {c_comment(wf.describe())}: feature weights */\n"
              + c_array("int8_t", wfname, wf.data, 16, lambda v: str(int(v))),
              f"/* {c_comment(wt.describe())}: time weights */\n"
              + c_array(ctype, wtname, wt.data, 12, lambda v: str(int(v)))]
    const_bytes = wf.size + wt.size * (2 if st.dtype == "int16" else 1)
    if bias is not None:
        bname = c_ident(bias.name, f"b{bias.index}_")
        consts.append(f"/* {c_comment(bias.describe())} */\n"
                      + c_array("int32_t", bname, bias.data, 8, lambda v: str(int(v))))
        const_bytes += 4 * bias.size
    else:
        bname = "QE_FLASH_NULL"
    params = (f"static const qe_svdf_params_t {pname} = {{\n"
              f"    .weights_feature = {wfname},\n    .weights_time = {wtname},\n"
              f"    .bias = {bname},\n"
              f"    .batches = {batches}u,\n    .input_size = {input_size}u,\n"
              f"    .filters = {filters}u,\n    .rank = {rank}u,\n    .memory = {memory}u,\n"
              f"    .input_zero_point = {x.zero_point},\n    .state_zero_point = {st.zero_point},\n"
              f"    .output_zero_point = {y.zero_point},\n"
              f"    .multiplier_1 = {m1},  /* {real1:.17g} */\n    .shift_1 = {sh1},\n"
              f"    .multiplier_2 = {m2},  /* {real2:.17g} */\n    .shift_2 = {sh2},\n}};\n")
    fn = "qe_svdf_s8_s16" if st.dtype == "int16" else "qe_svdf_s8_s8"
    call = (f"{fn}(&{pname}, (const int8_t *)@T{x.index}@, ({ctype} *)@T{st.index}@, "
            f"(int8_t *)@T{y.index}@, (int32_t *)@S{op.index}@);")
    scratch = 4 * batches * (filters + units)
    what = (f"SVDF int8, {st.dtype} state: {x.describe()} -> {y.describe()}, rank {rank}, "
            f"{filters} filters x {memory} memory, {scratch} B of scratch")
    return Kernel(op, call, params, consts, const_bytes, what, headers=OP_HEADERS,
                  scratch_bytes=scratch)


def _operands(op: Operator, model: TFLiteModel):
    """(input, feature weights, time weights, bias, state, output): their types, constant
    weights and bias, the bias present, the state a variable tensor."""
    t = model.tensors
    ins = list(op.inputs) + [-1] * (5 - len(op.inputs))
    if len(op.inputs) != 5 or len(op.outputs) != 1 or min(ins[0], ins[1], ins[2], ins[4]) < 0:
        raise unsupported(op, model, "expected input, feature weights, time weights, optional "
                                     "bias, state and one output")
    x, wf, wt, st, y = t[ins[0]], t[ins[1]], t[ins[2]], t[ins[4]], t[op.outputs[0]]
    bias = t[ins[3]] if ins[3] >= 0 else None
    if x.dtype != "int8":
        raise unsupported(op, model, f"{x.dtype} SVDF; supported: int8 (full integer)")
    if x.is_constant:
        raise unsupported(op, model, f"input '{x.name}' is a constant")
    if wf.dtype != "int8" or y.dtype != "int8" or st.dtype not in _CTYPE or wt.dtype != st.dtype:
        raise unsupported(op, model, f"feature weights {wf.dtype}, time weights {wt.dtype}, state "
                                     f"{st.dtype}, output {y.dtype}; supported: int8 feature "
                                     f"weights and output, time weights and state both int16 or "
                                     f"both int8")
    if not (wf.is_constant and wt.is_constant) or (bias is not None and not bias.is_constant):
        raise unsupported(op, model, "weights or bias are not constant")
    if bias is None:
        raise unsupported(op, model, "no bias: TFLM's int8 SVDF reads the bias's scale in Prepare "
                                     "(without one the interpreter crashes), so there is nothing "
                                     "to be bit-exact with")
    if bias.dtype != "int32":
        raise unsupported(op, model, f"bias '{bias.name}' is {bias.dtype}; TFLM needs int32")
    if not st.is_variable or st.is_constant:
        raise unsupported(op, model, f"state '{st.name}' is not a variable tensor without initial "
                                     f"data (TFLM requires a variable)")
    return x, wf, wt, bias, st, y


def _shapes(op: Operator, model: TFLiteModel, x, wf, wt, bias, st, y):
    """(batches, input size, filters, memory, rank, units), every tensor's shape checked against
    them."""
    rank = int(opt(op, "rank", 0))
    if len(x.shape) != 2 or len(wf.shape) != 2 or len(wt.shape) != 2 or len(y.shape) != 2 \
            or len(st.shape) != 2:
        raise unsupported(op, model, "input, weights, state and output must be 2-D")
    batches, input_size = x.shape
    filters, memory = wt.shape
    if rank < 1 or filters % rank or wf.shape != (filters, input_size):
        raise unsupported(op, model, f"rank {rank}, feature weights {wf.shape}, time weights "
                                     f"{wt.shape}: filters must be a multiple of the rank and "
                                     f"the feature weights [filters, input]")
    units = filters // rank
    if tuple(y.shape) != (batches, units) or tuple(st.shape) != (batches, memory * filters) \
            or (bias is not None and tuple(bias.shape) != (units,)):
        raise unsupported(op, model, f"output {y.shape}, state {st.shape}, bias "
                                     f"{None if bias is None else bias.shape} do not fit "
                                     f"{batches} batches, {units} units, {filters} filters x "
                                     f"{memory} memory")
    if max(batches, input_size, filters, memory) > 65535:
        raise unsupported(op, model, "a dimension above 65535")
    return batches, input_size, filters, memory, rank, units


def _multipliers(op: Operator, model: TFLiteModel, x, wf, wt, bias, st, y):
    """TFLM's PrepareSvdf: per-tensor quantization, the bias's scale, and the two rescales
    ((real, multiplier, shift) each), computed in float32 as TFLM does."""
    for tensor, what in ((x, "input"), (wf, "feature weights"), (wt, "time weights"),
                         (st, "state"), (y, "output")):
        per_tensor(tensor, op, model, what)
    f32 = np.float32
    s_state, s_wt = f32(st.scale), f32(wt.scale)
    if bias is not None:
        if bias.quantization is None or abs(float(f32(bias.scale)) - float(s_state * s_wt)) >= 1e-5:
            raise unsupported(op, model, f"bias '{bias.name}' scale is not state scale x time "
                                         f"weight scale (TFLM: within 1e-5)")
    real1 = float(f32(x.scale) * f32(wf.scale) / s_state)      # float32, as TFLM's Prepare
    real2 = float(s_state * s_wt / f32(y.scale))
    m1, sh1 = _multiplier(op, model, real1, "feature")
    m2, sh2 = _multiplier(op, model, real2, "output")
    return (real1, m1, sh1), (real2, m2, sh2)
