"""UNIDIRECTIONAL_SEQUENCE_LSTM: firmware/core/kernels/lstm.c, TFLM's
unidirectional_sequence_lstm.cc (lstm_eval.h EvalLstm, the float instantiation).

- float32: input, weights, biases, states and output all float32; the standard LSTM (gates
  i, f, c, o, each with input and recurrent weights and a bias), the cell gate's activation
  TANH (the op's fused activation: the only one TFLM's kernel runs from a flatbuffer; the
  schema has no SIGMOID), cell clipping (cellClip > 0), time_major or batch-major, any
  batch;
- the hidden and cell states are variable tensors (TFLite's isVariable): the generator keeps
  them alive for the whole run in memory nothing else uses, and the generated
  `qe_model_reset_state()` zeros them (the first invoke calls it; a RESET command can);
- the weights are plain const arrays (not QE_FLASH: on AVR they would sit in RAM);
- refused, by name: CIFG (no input gate), peephole, projection, layer norm (TFLM refuses
  those variants too), proj_clip, int8/int16 (the integer LSTM), hybrid (float activations
  with int8 weights), states that are not variable tensors.
"""
from __future__ import annotations

from ..emit import c_float
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, const_operand, opt, unsupported

SUPPORTED = ("UNIDIRECTIONAL_SEQUENCE_LSTM float32 (no peephole, projection or layer norm)",)
KERNEL_HEADERS = ()
OP_HEADERS = ("lstm.h",)

GATES = ("input", "forget", "cell", "output")
_INPUT_W, _RECURRENT_W, _BIAS = (1, 2, 3, 4), (5, 6, 7, 8), (12, 13, 14, 15)
_VARIANTS = (((9, 10, 11), "peephole (cell-to-gate) weights"),
             ((16,), "projection weights"), ((17,), "a projection bias"),
             ((20, 21, 22, 23), "layer norm coefficients"))
_OUTPUT_STATE, _CELL_STATE = 18, 19


def _get(op: Operator, k: int) -> int:
    return op.inputs[k] if k < len(op.inputs) else -1


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
    if x.dtype != "float32":
        raise unsupported(op, model, f"{x.dtype} LSTM (the integer LSTM with int16 cell state is "
                                     f"not supported yet); supported: float32")
    for k in (*_INPUT_W, *_RECURRENT_W, *_BIAS):
        if _get(op, k) < 0:
            raise unsupported(op, model, f"input {k} (a weight or bias) is missing")
        w = t[op.inputs[k]]
        if not w.is_constant:
            raise unsupported(op, model, f"weight or bias '{w.name}' is not a constant")
        if w.dtype != "float32":
            raise unsupported(op, model, f"weight or bias '{w.name}' is {w.dtype}: hybrid LSTMs "
                                         f"(float activations, quantized weights) are not "
                                         f"supported; use the fp32 model")
    h = t[_get(op, _OUTPUT_STATE)] if _get(op, _OUTPUT_STATE) >= 0 else None
    c = t[_get(op, _CELL_STATE)] if _get(op, _CELL_STATE) >= 0 else None
    for s, what in ((h, "hidden (output) state"), (c, "cell state")):
        if s is None:
            raise unsupported(op, model, f"no {what} tensor")
        if not s.is_variable or s.is_constant:
            raise unsupported(op, model, f"{what} '{s.name}' is not a variable tensor without "
                                         f"initial data (TFLM requires a variable)")
        if s.dtype != "float32":
            raise unsupported(op, model, f"{what} '{s.name}' is {s.dtype}, expected float32")
    if y.dtype != "float32":
        raise unsupported(op, model, f"output '{y.name}' is {y.dtype}, expected float32")
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
