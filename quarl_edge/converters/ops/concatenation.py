"""CONCATENATION along any axis: firmware/core/kernels/concatenation.c, TFLM's concatenation.cc
(reference_ops::Concatenation).

- float32, int16, int32, and int8 when every input has the output's quantization: the kernel
  copies bytes without rescaling, as TFLM's does (its interpreter refuses other int8 cases, and
  so do we); int16 inputs likewise share the output's quantization;
- 1 to 255 inputs, any of them constant (emitted as RAM arrays: the kernel reads them through
  ordinary pointers); no fused activation.
"""
from __future__ import annotations

import numpy as np

from ...core.errors import ModelError

from ..emit import c_array, c_comment, c_ident, c_ram_array
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, fused_activation, opt, per_tensor, unsupported

SUPPORTED = ("CONCATENATION float32/int8 (equal quantization)/int16/int32",)
KERNEL_HEADERS = ("concatenation.h",)


def lower_concatenation(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    if not op.inputs or len(op.outputs) != 1 or min(op.inputs) < 0 or len(op.inputs) > 255:
        raise unsupported(op, model, "expected 1..255 inputs and one output")
    out = model.tensors[op.outputs[0]]
    xs = [model.tensors[i] for i in op.inputs]
    if fused_activation(op, model) != "NONE":
        raise unsupported(op, model, f"fused activation {op.fused_activation}")
    rank = len(out.shape)
    axis = int(opt(op, "axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise unsupported(op, model, f"axis {opt(op, 'axis', 0)} for rank {rank}")
    if out.dtype not in ("float32", "int8", "int16", "int32"):
        raise unsupported(op, model, f"{out.dtype} CONCATENATION")
    for t in xs:
        if t.dtype != out.dtype:
            raise unsupported(op, model, f"input '{t.name}' is {t.dtype}, output {out.dtype}")
        if len(t.shape) != rank or any(t.shape[d] != out.shape[d] for d in range(rank) if d != axis):
            raise ModelError(f"op {op.index} CONCATENATION: input {list(t.shape)} does not fit output "
                             f"{list(out.shape)} along axis {axis}")
        if out.dtype in ("int8", "int16"):
            per_tensor(t, op, model, f"input '{t.name}'")
            if (float(t.scale), t.zero_point) != (float(out.scale), out.zero_point):
                raise unsupported(op, model, f"{out.dtype} input '{t.name}' (scale {t.scale:g}, zero point "
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
    return Kernel(op, call, params, consts, cb, comment)
