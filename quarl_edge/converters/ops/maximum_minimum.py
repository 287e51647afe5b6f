"""MAXIMUM and MINIMUM: firmware/core/kernels/maximum_minimum.c over broadcast.c, TFLM's
maximum_minimum.cc (MaximumMinimumBroadcastSlow).

- float32, int8 and int16; integer inputs and the output must share one quantization (TFLM
  compares raw values and never rescales; the converter always emits them so);
- numpy broadcasting up to 6-D (every output dimension <= 65535); either input may be a
  constant (the clip of SB3's VecNormalize: MINIMUM(MAXIMUM(x, -c), c)), not both; the output
  may be written over the first input when it is not a constant (Kernel.inplace).
"""
from __future__ import annotations

from ..emit import c_float
from ..tflite_model import Operator, TFLiteModel
from .common import Kernel, broadcast_c, elementwise_operands, operand, per_tensor, unsupported

SUPPORTED = ("MAXIMUM/MINIMUM float32, int8 and int16 (equal quantization, broadcasting)",)
KERNEL_HEADERS = ()
OP_HEADERS = ("maximum_minimum.h",)
_TYPES = {"float32": ("float", "f32", c_float), "int8": ("int8_t", "s8", lambda v: str(int(v))),
          "int16": ("int16_t", "s16", lambda v: str(int(v)))}


def lower_maximum_minimum(op: Operator, model: TFLiteModel, pname: str) -> Kernel:
    a, b, out = elementwise_operands(op, model)
    if a.dtype not in _TYPES:
        raise unsupported(op, model, f"{a.dtype} {op.opcode}; supported: float32, int8, int16")
    if a.dtype != "float32":
        for t, w in ((a, "input 1"), (b, "input 2"), (out, "output")):
            per_tensor(t, op, model, w)
        qs = {(float(t.scale), t.zero_point) for t in (a, b, out)}
        if len(qs) != 1:
            raise unsupported(op, model, f"{a.dtype} inputs and output have different quantizations "
                                         f"({', '.join(f'{s:g}/{z}' for s, z in sorted(qs))}): "
                                         f"TFLM's kernel compares raw values without rescaling")
    ctype, suffix, fmt = _TYPES[a.dtype]
    bc = broadcast_c(op, model, a, b, out)
    consts: list[str] = []
    pa, pb = (operand(t, ctype, fmt, consts) for t in (a, b))
    params = f"static const qe_broadcast_t {pname} = {_bc_body(bc)};\n"
    fn = op.opcode.lower()
    call = f"qe_{fn}_{suffix}(&{pname}, {pa}, {pb}, ({ctype} *)@T{out.index}@);"
    sym = "max" if op.opcode == "MAXIMUM" else "min"
    what = f"{op.opcode} {a.dtype}: {sym}({a.describe()}, {b.describe()}) -> {out.describe()}"
    cb = sum(t.nbytes for t in (a, b) if t.is_constant)
    return Kernel(op, call, params, consts, cb, what, inplace=not a.is_constant, headers=OP_HEADERS)


def _bc_body(bc: str) -> str:
    """broadcast_c's `    .bc = {...},\\n` member initializer as a plain `{...}` initializer."""
    body = bc.strip().removeprefix(".bc = ").removesuffix(",")
    return body
