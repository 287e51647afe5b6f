"""The slots of a per-op build: which op each timed kernel call is, its shapes and MACs.

A per-op build (cgen.generate(per_op=True), `quarl-edge bench --per-op`) times every kernel
call of the schedule; slot j is the j-th op that has a call (an op lowered to nothing, e.g. a
RESHAPE whose output aliases its input, has none). perop.json beside model.c lists them, so the
host can label the board's costs. MACs are multiply-accumulates of the op's arithmetic (0 for
ops without a weight tensor: elementwise, pooling, quantize...)."""
from __future__ import annotations

import json
import math

from .tflite_model import TFLiteModel


def _shape(model: TFLiteModel, i: int) -> list[int]:
    return list(model.tensors[i].shape) if i >= 0 else []


def op_macs(op, model: TFLiteModel) -> int:
    """Multiply-accumulates of one op (the arithmetic of its weights; 0 when it has none)."""
    ins = [_shape(model, i) for i in op.inputs]
    out = _shape(model, op.outputs[0]) if op.outputs else []
    n_out = math.prod(out) if out else 0
    if op.opcode == "FULLY_CONNECTED" and len(ins) > 1 and len(ins[1]) == 2:
        return n_out * ins[1][1]
    if op.opcode == "CONV_2D" and len(ins) > 1 and len(ins[1]) == 4:
        return n_out * ins[1][1] * ins[1][2] * ins[1][3]
    if op.opcode == "DEPTHWISE_CONV_2D" and len(ins) > 1 and len(ins[1]) == 4:
        return n_out * ins[1][1] * ins[1][2]
    if op.opcode == "TRANSPOSE_CONV" and len(ins) > 2 and len(ins[1]) == 4:
        return math.prod(ins[2]) * ins[1][0] * ins[1][1] * ins[1][2]
    if op.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM" and len(ins) > 5 and ins[0] and ins[5]:
        units, n_in = ins[5][0], ins[0][-1]           # recurrent weights [units, units]
        return math.prod(ins[0][:-1]) * 4 * units * (n_in + units)
    return 0


def slots(model: TFLiteModel, kernels) -> list[dict]:
    """One entry per timed call, in schedule order: slot, op index, op type, the op's input and
    output shapes (omitted optional inputs left out) and MACs."""
    out = []
    for k in kernels:
        if not k.call:
            continue
        op = k.op
        out.append({"slot": len(out), "op": op.index, "type": op.opcode,
                    "inputs": [_shape(model, i) for i in op.inputs if i >= 0],
                    "outputs": [_shape(model, i) for i in op.outputs],
                    "macs": op_macs(op, model)})
    return out


def slots_json(model: TFLiteModel, kernels) -> str:
    return json.dumps({"slots": slots(model, kernels)}, indent=1) + "\n"
