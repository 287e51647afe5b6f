"""int8-acc: the accumulator readout, a graph rewrite before lowering.

quarl_edge/quant/remedies.py: a model tagged with metadata "quarl_edge.head" = "accumulators" ends in
FULLY_CONNECTED(int8) -> DEQUANTIZE; its greedy action is to be the argmax of that layer's
int32 accumulators. The rewrite drops the DEQUANTIZE and lets the FULLY_CONNECTED write the
graph's float32 output itself: (float)acc * (input_scale * weight_scale[o]). The rewritten op
carries ACCUMULATOR_READOUT_OPTION; quarl_edge/converters/ops/fully_connected.py lowers it to
qe_fully_connected_s8_acc_f32.
"""
from __future__ import annotations

import dataclasses

from ..core.errors import ModelError, UnsupportedOpError

from .tflite_model import TFLiteModel

# the .tflite metadata name, as models carry it (its "head" is the accumulator readout)
READOUT_METADATA = "quarl_edge.head"
# marks the rewritten op (not a TFLite option); the value is only ever compared in memory
ACCUMULATOR_READOUT_OPTION = "_quarl_edge_head_accumulators"


def apply_accumulator_readout(model: TFLiteModel) -> TFLiteModel:
    """The model with its accumulator readout rewritten, or the model itself when it has none."""
    value = model.metadata.get(READOUT_METADATA)
    if value is None:
        return model
    if value != b"accumulators":
        raise ModelError(f"{model.path}: metadata {READOUT_METADATA} = {value!r}; the generator "
                         "knows only b'accumulators'")
    why = ("the accumulator readout (int8-acc) needs a graph ending in FULLY_CONNECTED(int8) -> "
           "DEQUANTIZE")
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
                                    options={**fc.options, ACCUMULATOR_READOUT_OPTION: True})
    ops = [rewritten if op.index == fc.index else op for op in model.operators if op is not deq]
    return dataclasses.replace(model, operators=ops)
