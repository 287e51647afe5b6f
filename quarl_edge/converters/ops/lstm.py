"""UNIDIRECTIONAL_SEQUENCE_LSTM: firmware/core/kernels/lstm.c, TFLM's
unidirectional_sequence_lstm.cc (lstm_eval.h EvalLstm, the float instantiation).

- float32: input, weights, biases, states and output all float32; the standard LSTM (gates
  i, f, c, o, each with input and recurrent weights and a bias), the cell gate's activation
  TANH (the op's fused activation: the only one TFLM's kernel runs from a flatbuffer; the
  schema has no SIGMOID), cell clipping (cellClip > 0), time_major or batch-major, any
  batch;
- float32: the weights are plain const arrays (not QE_FLASH: on AVR they would sit in RAM);
- int8 (the converter's full-integer LSTM; firmware/core/kernels/lstm_int8.c, TFLM's
  EvalLstm<int8_t, int8_t, int16_t, int32_t>): int8 input, output and hidden state, int8
  weights with one scale per tensor, int32 biases, int16 cell state with a power-of-two scale
  and zero point 0. Everything TFLM's Prepare computes is computed here, in Python
  (quarl_edge/converters/qmath.py): each gate's two FC multipliers to the fixed gate scale 2^-12 (TFLM
  ignores the converter's intermediate tensors, and so do we), the three element-wise
  multipliers (f*c, i*g to the cell scale; tanh(c)*o to the hidden state's), the cell clip in
  cell-state steps, and tanh's input scaling from the cell state's power of two; the int16
  sigmoid/tanh table (quarl_edge/converters/sigmoid_table_u16.py, measured from TFLM) is emitted with the
  op. Weights, biases and the table are QE_FLASH arrays, as the FULLY_CONNECTED weights;
- the hidden and cell states are variable tensors (TFLite's isVariable): the generator keeps
  them alive for the whole run in memory nothing else uses, and the generated
  `qe_model_reset_state()` sets them to zero (an int8 hidden state to its zero point, as TFLM's
  reset does);
- refused, by name: CIFG (no input gate), peephole, projection, layer norm (TFLM refuses
  those variants too), proj_clip, int16 activations (the 16x8 integer LSTM), hybrid (float
  activations with int8 weights), per-channel weights (TFLM's integer LSTM reads one
  multiplier per FC), a cell state that is not int16 with a power-of-two scale, states that are
  not variable tensors.
"""
from __future__ import annotations

import math

import numpy as np

from .. import qmath
from ..emit import c_array, c_comment, c_float, c_ident
from ..tflite_model import Operator, TFLiteModel
from .common import (Kernel, bias_array, const_operand, opt, per_tensor, unsupported,
                     weight_quantization)

SUPPORTED = (("UNIDIRECTIONAL_SEQUENCE_LSTM float32 and int8 (int16 cell state; no peephole, "
              "projection or layer norm)"),)
KERNEL_HEADERS = ()
OP_HEADERS = ("lstm.h",)
OP_HEADERS_S8 = ("lstm_int8.h",)

GATES = ("input", "forget", "cell", "output")
_INPUT_W, _RECURRENT_W, _BIAS = (1, 2, 3, 4), (5, 6, 7, 8), (12, 13, 14, 15)
_VARIANTS = (((9, 10, 11), "peephole (cell-to-gate) weights"),
             ((16,), "projection weights"), ((17,), "a projection bias"),
             ((20, 21, 22, 23), "layer norm coefficients"))
_OUTPUT_STATE, _CELL_STATE = 18, 19


def _get(op: Operator, k: int) -> int:
    return op.inputs[k] if k < len(op.inputs) else -1


def _constant_operand(op: Operator, model: TFLiteModel, k: int):
    """Operand k, a weight or a bias: present and constant."""
    if _get(op, k) < 0:
        raise unsupported(op, model, f"input {k} (a weight or bias) is missing")
    w = model.tensors[op.inputs[k]]
    if not w.is_constant:
        raise unsupported(op, model, f"weight or bias '{w.name}' is not a constant")
    return w


def _states(op: Operator, model: TFLiteModel, h_dtype: str, c_dtype: str | None = None):
    """(hidden state, cell state): both present, variable tensors of the expected types."""
    t = model.tensors
    h = t[_get(op, _OUTPUT_STATE)] if _get(op, _OUTPUT_STATE) >= 0 else None
    c = t[_get(op, _CELL_STATE)] if _get(op, _CELL_STATE) >= 0 else None
    for s, what, dtype in ((h, "hidden (output) state", h_dtype),
                           (c, "cell state", c_dtype or h_dtype)):
        if s is None:
            raise unsupported(op, model, f"no {what} tensor")
        if not s.is_variable or s.is_constant:
            raise unsupported(op, model, f"{what} '{s.name}' is not a variable tensor without "
                                         f"initial data (TFLM requires a variable)")
        if s.dtype != dtype:
            raise unsupported(op, model, f"{what} '{s.name}' is {s.dtype}, expected {dtype}")
    return h, c


def _geometry(op: Operator, model: TFLiteModel, x, y, h, c):
    """(batches, time steps, input size, units, time_major), every shape and option checked."""
    t = model.tensors
    if len(x.shape) != 3:
        raise unsupported(op, model, f"input shape {list(x.shape)}: expected 3-D")
    time_major = bool(opt(op, "timeMajor", False))
    if time_major:
        n_t, n_b, n_in = x.shape
    else:
        n_b, n_t, n_in = x.shape
    w_i = t[op.inputs[1]]
    if len(w_i.shape) != 2 or w_i.shape[1] != n_in:
        raise unsupported(op, model, f"input weights {list(w_i.shape)} for input size {n_in}")
    units = w_i.shape[0]
    for k in _INPUT_W:
        if tuple(t[op.inputs[k]].shape) != (units, n_in):
            raise unsupported(op, model, f"input weights '{t[op.inputs[k]].name}' "
                                         f"{list(t[op.inputs[k]].shape)}, expected [{units},{n_in}]")
    for k in _RECURRENT_W:
        if tuple(t[op.inputs[k]].shape) != (units, units):
            raise unsupported(op, model, f"recurrent weights '{t[op.inputs[k]].name}' "
                                         f"{list(t[op.inputs[k]].shape)}, expected [{units},{units}]")
    for k in _BIAS:
        if tuple(t[op.inputs[k]].shape) != (units,):
            raise unsupported(op, model, f"bias '{t[op.inputs[k]].name}' "
                                         f"{list(t[op.inputs[k]].shape)}, expected [{units}]")
    for s in (h, c):
        if s.size != n_b * units:
            raise unsupported(op, model, f"state '{s.name}' {list(s.shape)} for batch {n_b} and "
                                         f"{units} units")
    want_out = (n_t, n_b, units) if time_major else (n_b, n_t, units)
    if tuple(y.shape) != want_out:
        raise unsupported(op, model, f"output {list(y.shape)}, expected {list(want_out)}")
    act = op.fused_activation or "NONE"
    if act != "TANH":
        raise unsupported(op, model, f"cell gate activation {act}; TFLM's kernel runs TANH")
    if float(opt(op, "projClip", 0.0)) != 0.0:
        raise unsupported(op, model, "proj_clip without projection weights")
    if opt(op, "diagonalRecurrentTensors", False):
        raise unsupported(op, model, "diagonal recurrent tensors")
    for what, v in (("batch", n_b), ("time steps", n_t), ("input size", n_in), ("units", units)):
        if not 0 < v <= 0xFFFF:
            raise unsupported(op, model, f"{what} {v} does not fit the kernel's uint16 field")
    return n_b, n_t, n_in, units, time_major


def lower_lstm(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    if len(op.inputs) not in (20, 24) or len(op.outputs) != 1 or _get(op, 0) < 0:
        raise unsupported(op, model, f"expected 20 or 24 inputs and one output, got "
                                     f"{len(op.inputs)} and {len(op.outputs)}")
    t = model.tensors
    x, y = t[op.inputs[0]], t[op.outputs[0]]
    if _get(op, 1) < 0:
        raise unsupported(op, model, "CIFG (coupled input and forget gate: no input gate "
                                     "weights) is not supported (TFLM's kernel refuses it too)")
    for idx, what in _VARIANTS:
        if any(_get(op, k) >= 0 for k in idx):
            raise unsupported(op, model, f"the LSTM has {what}: only the standard LSTM without "
                                         f"peephole, projection or layer norm is supported "
                                         f"(as in TFLM)")
    if x.dtype == "int8":
        return _lower_lstm_s8(op, model, pname)
    if x.dtype != "float32":
        raise unsupported(op, model, f"{x.dtype} LSTM ({x.dtype} activations"
                                     f"{': the 16x8 integer LSTM' if x.dtype == 'int16' else ''}) "
                                     f"is not supported; supported: float32, int8")
    for k in (*_INPUT_W, *_RECURRENT_W, *_BIAS):
        w = _constant_operand(op, model, k)
        if w.dtype != "float32":
            raise unsupported(op, model, f"weight or bias '{w.name}' is {w.dtype}: hybrid LSTMs "
                                         f"(float activations, quantized weights) are not "
                                         f"supported; use the fp32 model")
    h, c = _states(op, model, "float32")
    if y.dtype != "float32":
        raise unsupported(op, model, f"output '{y.name}' is {y.dtype}, expected float32")
    n_b, n_t, n_in, units, time_major = _geometry(op, model, x, y, h, c)
    cell_clip = float(opt(op, "cellClip", 0.0))
    consts: list[str] = []
    names = {k: const_operand(t[op.inputs[k]], "float", c_float, consts, per_line=8)
             for k in (*_INPUT_W, *_RECURRENT_W, *_BIAS)}
    const_bytes = sum(t[op.inputs[k]].nbytes for k in names)
    arr = lambda ks: "{ " + ", ".join(names[k] for k in ks) + " }"  # noqa: E731
    params = (f"static const qe_lstm_f32_params_t {pname} = {{\n"
              f"    .batches = {n_b}u,\n    .time_steps = {n_t}u,\n    .input_size = {n_in}u,\n"
              f"    .units = {units}u,\n    .time_major = {int(time_major)}u,\n"
              f"    .cell_clip = {c_float(max(cell_clip, 0.0))},\n"
              f"    .input_weights = {arr(_INPUT_W)},\n"
              f"    .recurrent_weights = {arr(_RECURRENT_W)},\n    .bias = {arr(_BIAS)},\n}};\n")
    call = (f"qe_lstm_f32(&{pname}, qe_libm_tanhf, qe_libm_expf, (const float *)@T{x.index}@, "
            f"(float *)@T{y.index}@, (float *)@T{h.index}@, (float *)@T{c.index}@, "
            f"(float *)@S{op.index}@);")
    what = (f"UNIDIRECTIONAL_SEQUENCE_LSTM float32, {units} units, {n_t} steps, "
            f"{'time major' if time_major else 'batch major'}, "
            f"cell clip {cell_clip:g}: {x.describe()} -> {y.describe()}; state {h.name}, {c.name}")
    return Kernel(op, call, params, consts, const_bytes, what, headers=OP_HEADERS,
                  scratch_bytes=4 * units * 4)


# ------------------------------------------------------------------------------------ int8
GATE_SCALE = 2.0 ** -12          # TFLM: every gate's FC output is int16 Q3.12 ...
ACTIVATION_SCALE = 2.0 ** -15    # ... and its sigmoid/tanh int16 Q0.15
_S16 = (-32768, 32767)


def _multiplier(op, model, what: str, real: float) -> tuple[int, int]:
    """QuantizeMultiplier(real), checked to be in the range requant.h's MBQM takes."""
    m, shift = qmath.quantize_multiplier(real)
    if not -31 <= shift <= 30:
        raise unsupported(op, model, f"the {what} rescaling {real:g} is out of range "
                                     f"(shift {shift})")
    return m, shift


def _lower_lstm_s8(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    """int8: TFLM's integer LSTM (the module docstring): the operands' checks, the cell state's
    tanh scaling, each gate's weights and multipliers, the inter-gate products, the table."""
    t = model.tensors
    x, y = t[op.inputs[0]], t[op.outputs[0]]
    _check_s8_weights(op, model)
    h, c = _states(op, model, "int8", "int16")
    if y.dtype != "int8":
        raise unsupported(op, model, f"output '{y.name}' is {y.dtype}, expected int8")
    n_b, n_t, n_in, units, time_major = _geometry(op, model, x, y, h, c)
    for a, what in ((x, "input"), (h, "hidden state"), (c, "cell state")):
        per_tensor(a, op, model, what)
    power, tanh_m, tanh_s = _cell_tanh_s8(op, model, c)
    x_s, h_s, c_s = (float(np.float32(v.scale)) for v in (x, h, c))

    consts: list[str] = []
    const_bytes = 0
    gates = []
    for g in range(4):
        gate, nbytes = _gate_s8(op, model, g, x_s, h_s, n_in, units, consts)
        gates.append(gate)
        const_bytes += nbytes
    # CreateInterGateMulParams: (double)in1 * (double)in2 / (double)out
    a_s = ACTIVATION_SCALE
    scales = {"forget_cell": a_s * c_s / c_s, "input_cell": a_s * a_s / c_s, "hidden": a_s * a_s / h_s}
    muls = {k: _multiplier(op, model, k.replace("_", "-") + " product", v) for k, v in scales.items()}
    cell_clip = float(np.float32(opt(op, "cellClip", 0.0)))
    clip_q = int(min(max(cell_clip / c_s, -32768.0), 32767.0)) if cell_clip > 0 else 0
    table = qmath.sigmoid_table_u16()
    tname = f"op{op.index}_sigmoid_table"
    consts.append("/* TFLM's int16 sigmoid/tanh table, sigmoid(i/24) in 0.16 (measured from TFLM: "
                  "scripts/measure_sigmoid_table.py) */\n"
                  + c_array("uint16_t", tname, table, 12, lambda v: f"{v}u"))
    const_bytes += 2 * len(table)
    mul_c = "".join(f"    .{k} = {{ {m}, {s} }},\n" for k, (m, s) in muls.items())
    params = (f"static const qe_lstm_s8_params_t {pname} = {{\n"
              f"    .batches = {n_b}u,\n    .time_steps = {n_t}u,\n    .input_size = {n_in}u,\n"
              f"    .units = {units}u,\n    .time_major = {int(time_major)}u,\n"
              f"    .cell_clip_on = {int(cell_clip > 0)}u,\n    .cell_clip = {clip_q},\n"
              f"    .input_offset = {-x.zero_point},\n    .hidden_offset = {-h.zero_point},\n"
              f"    .hidden_zero_point = {h.zero_point},\n"
              f"    .gate = {{\n{''.join(gates)}    }},\n{mul_c}"
              f"    .cell_tanh_multiplier = {tanh_m},\n    .cell_tanh_shift = {tanh_s},\n"
              f"    .sigmoid_table = {tname},\n}};\n")
    call = (f"qe_lstm_s8(&{pname}, (const int8_t *)@T{x.index}@, (int8_t *)@T{y.index}@, "
            f"(int8_t *)@T{h.index}@, (int16_t *)@T{c.index}@, (int16_t *)@S{op.index}@);")
    what = (f"UNIDIRECTIONAL_SEQUENCE_LSTM int8 (int16 cell state 2^{power}), {units} units, "
            f"{n_t} steps, {'time major' if time_major else 'batch major'}, "
            f"cell clip {cell_clip:g}: {x.describe()} -> {y.describe()}; state {h.name}, {c.name}")
    return Kernel(op, call, params, consts, const_bytes, what, headers=OP_HEADERS_S8,
                  scratch_bytes=4 * units * 2)


def _check_s8_weights(op: Operator, model: TFLiteModel) -> None:
    """Every gate's input and recurrent weights (constant int8) and bias (constant int32)."""
    for k in (*_INPUT_W, *_RECURRENT_W, *_BIAS):
        w = _constant_operand(op, model, k)
        want = "int32" if k in _BIAS else "int8"
        if w.dtype != want:
            raise unsupported(op, model, f"{'bias' if k in _BIAS else 'weights'} '{w.name}' is "
                                         f"{w.dtype}; the int8 LSTM takes int8 weights and int32 "
                                         f"biases")


def _cell_tanh_s8(op: Operator, model: TFLiteModel, c) -> tuple[int, int, int]:
    """The symmetric, power-of-two cell state TFLM's integer tanh needs: (power: scale =
    2^power, the int16 tanh's multiplier, its shift)."""
    if c.zero_point != 0:
        raise unsupported(op, model, f"cell state '{c.name}' has zero point {c.zero_point}; "
                                     f"TFLM's integer LSTM takes a symmetric cell state")
    mant, exp2 = math.frexp(float(np.float32(c.scale)))
    power = exp2 - 1                           # scale = 2^power
    if mant != 0.5:
        raise unsupported(op, model, f"cell state '{c.name}' has scale {c.scale:g}, not a power "
                                     f"of two (TFLM's integer tanh needs one)")
    tanh_shift = 12 + power                    # TFLM's (15 + power) - 3
    if not -30 <= tanh_shift <= 14:
        raise unsupported(op, model, f"cell state scale 2^{power} is out of the range the int16 "
                                     f"tanh can scale (2^-42 .. 2^2)")
    tanh_m, tanh_s = (3 << tanh_shift, 0) if tanh_shift >= 0 else (3, -tanh_shift)
    return power, tanh_m, tanh_s


def _gate_s8(op: Operator, model: TFLiteModel, g: int, x_s: float, h_s: float, n_in: int,
             units: int, consts: list[str]) -> tuple[str, int]:
    """Gate g's weights and bias (appended to `consts`) and its input and recurrent multipliers
    to the gates' Q3.12: (its initializer in qe_lstm_s8_params_t's .gate, its constant bytes)."""
    t = model.tensors
    wx, wh, b = (t[op.inputs[_INPUT_W[g]]], t[op.inputs[_RECURRENT_W[g]]],
                 t[op.inputs[_BIAS[g]]])
    for w, depth in ((wx, n_in), (wh, units)):
        wq = weight_quantization(op, model, w, "weights", units, 0)
        if len(wq.scale) != 1:
            raise unsupported(op, model, f"weights '{w.name}' are quantized per channel; "
                                         f"TFLM's integer LSTM takes one scale per tensor")
        bias_max = int(np.abs(b.data.astype(np.int64)).max(initial=0)) if w is wx else 0
        if depth * 255 * 255 + bias_max > qmath.INT32_MAX:
            raise unsupported(op, model, f"weights '{w.name}': a depth of {depth} could "
                                         f"overflow the int32 accumulator")
    m_x, s_x = _multiplier(op, model, f"gate {GATES[g]} input",
                           qmath.effective_scale(x_s, wx.scale, GATE_SCALE))
    m_h, s_h = _multiplier(op, model, f"gate {GATES[g]} recurrent",
                           qmath.effective_scale(h_s, wh.scale, GATE_SCALE))
    names = []
    const_bytes = 0
    for w in (wx, wh):
        name = c_ident(w.name, f"w{w.index}_")
        consts.append(f"/* {c_comment(w.describe())} */\n"
                      + c_array("int8_t", name, w.data, 16, str))
        names.append(name)
        const_bytes += w.nbytes
    bname, nb = bias_array(b, "int32_t", str, 8, consts)
    const_bytes += nb
    return (f"        {{ /* {GATES[g]} */\n"
            f"            .input_weights = {names[0]},\n"
            f"            .recurrent_weights = {names[1]},\n"
            f"            .bias = {bname},\n"
            f"            .input_weights_offset = {-wx.zero_point},\n"
            f"            .recurrent_weights_offset = {-wh.zero_point},\n"
            f"            .input_multiplier = {m_x},\n            .input_shift = {s_x},\n"
            f"            .recurrent_multiplier = {m_h},\n"
            f"            .recurrent_shift = {s_h},\n        }},\n"), const_bytes
