"""The C emitter: literals and const arrays for the lowerings, and the model.c / model.json writers.

Everything here formats; nothing validates (quarl_edge/converters/cgen.py and quarl_edge/converters/ops/ have done
that before anything is emitted). `model_c` writes the contract of firmware/core/qe_model.h:
the planned arena, each op's constants and parameters, `qe_model_invoke()` as a straight-line
schedule and `qe_model_info`; `model_json` gives the host the same facts.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..core.errors import ModelError

from . import qmath
from .safe_text import check_c, safe_text
from .spec import QE_MAX_DIMS, GeneratedModel, Kernel
from .tensor import TensorSpec
from .tflite_model import Tensor, TFLiteModel



# ------------------------------------------------------------------------- C literals, arrays
def c_ident(name: str, prefix: str = "") -> str:
    """A readable C identifier from a TFLite tensor name."""
    first = name.split(";")[0]
    s = re.sub(r"[^0-9A-Za-z]+", "_", first).strip("_")
    s = s[-40:].lstrip("_") if len(s) > 40 else s
    s = prefix + (s or "t")
    return s if not s[0].isdigit() else "t_" + s


def c_float(v: float) -> str:
    """A float32 literal that reads back to exactly the same bits."""
    f = float(np.float32(v))
    if not np.isfinite(f):
        raise ModelError(f"non-finite constant {f} cannot be emitted")
    s = repr(f) if f == 0.0 else "%.9g" % f
    if "e" not in s and "." not in s and "inf" not in s:
        s += ".0"
    return s + "f"


def c_float_limit(v: float) -> str:
    """An activation bound: c_float, or -FLT_MAX / FLT_MAX for "no bound"."""
    return "-FLT_MAX" if v == -qmath.FLT_MAX else "FLT_MAX" if v == qmath.FLT_MAX else c_float(v)


def c_int64(v) -> str:
    v = int(v)
    return "(-9223372036854775807LL - 1)" if v == -(1 << 63) else f"{v}LL"


def c_comment(text: str) -> str:
    """Text for inside a /* */ comment. Strings from a model are already safe_text (the reader
    made them so: no `*`, backslash, `?` or control character); this keeps the generator's own
    text around them from opening or closing a comment."""
    return text.replace("*/", "* /").replace("/*", "/ *")


def c_array(ctype: str, name: str, values, per_line: int, fmt) -> str:
    vals = [fmt(v) for v in np.asarray(values).ravel()]
    lines = []
    for i in range(0, len(vals), per_line):
        lines.append("    " + ", ".join(vals[i:i + per_line]) + ",")
    body = "\n".join(lines) if lines else "    0,"
    # QE_FLASH (firmware/core/qe_flash.h): empty except on AVR, where it keeps the array in flash.
    return f"static const QE_FLASH {ctype} {name}[{max(len(vals), 1)}] = {{\n{body}\n}};\n"


def c_ram_array(definition: str) -> str:
    """A c_array definition without QE_FLASH (for operands passed as ordinary pointers)."""
    return definition.replace("static const QE_FLASH ", "static const ", 1)


# ---------------------------------------------------------------------------------- model.c
def _pointer(offset: dict[int, int]):
    def sub(m: re.Match) -> str:
        return f"(qe_arena + {offset[int(m.group(1))]}u)"
    return sub


def _state_c(model: TFLiteModel, state: list[int], offset: dict[int, int]) -> str:
    """qe_model_reset_state() for a model with variable tensors: TFLM's MicroInterpreter::Reset
    (each variable set to zero, its zero point when quantized), run by the first qe_model_invoke()."""
    L = ["/* ------------------------------------------------------------------ state */",
         "/* Variable tensors (e.g. an LSTM's hidden and cell state) keep their values from one",
         " * qe_model_invoke() to the next; qe_model_reset_state() sets them to zero, as TFLM's",
         " * MicroInterpreter::Reset. The first invoke calls it. */",
         "static uint8_t qe_state_ready;     /* 0 at start */\n",
         "void qe_model_reset_state(void)\n{\n    uint32_t i;"]
    for i in state:
        t = model.tensors[i]
        # TFLM's ResetTensorData: memset with the zero point of an int8 tensor, else with 0
        fill = (t.zero_point & 0xFF) if t.dtype == "int8" else 0
        L.append(f"    /* {c_comment(t.describe())} */\n"
                 f"    for (i = 0u; i < {t.nbytes}u; ++i) {{\n"
                 f"        qe_arena[{offset[i]}u + i] = {fill}u;\n    }}")
    L.append("    qe_state_ready = 1u;\n}\n")
    return "\n".join(L)


def _spec_c(t: Tensor, spec: TensorSpec, off: int) -> str:
    dims = list(spec.shape) + [0] * (QE_MAX_DIMS - len(spec.shape))
    return (f"    {{ QE_DTYPE_{spec.dtype.upper()}, {len(spec.shape)}u, "
            f"{{ {', '.join(str(d) + 'u' for d in dims)} }}, {c_float(spec.scale)}, "
            f"{spec.zero_point}, {off}u, {spec.nbytes}u }},  /* {c_comment(t.name)} */")


# qe_model_invoke() of a model with more ops than this calls one static function per part of
# this many ops: gcc -O2's time grows much faster than linearly in one function's length
# (10,000 ops in one function: 240 s; in parts: 18 s). Smaller models keep their exact model.c.
INVOKE_PART_OPS = 256


def _schedule_c(kernels: list[Kernel], sub, scratch: dict[int, int], state: bool,
                per_op: bool = False) -> list[str]:
    """qe_model_invoke(): each op's call, its arena pointers filled in (`sub`, `scratch`);
    `per_op`: each call between QE_OP_BEGIN/QE_OP_END(slot), a slot per kernel call."""
    ops, slot = [], 0
    for k in kernels:
        lines = [f"    /* op {k.op.index}: {c_comment(k.comment)} */"]
        if k.call:
            call = re.sub(r"@S(\d+)@", lambda m: f"(qe_arena + {scratch[int(m.group(1))]}u)", k.call)
            call = "    " + re.sub(r"@T(\d+)@", sub, call)
            lines.append(f"    QE_OP_BEGIN({slot});\n{call}\n    QE_OP_END({slot});" if per_op
                         else call)
            slot += 1
        ops.append("\n".join(lines))
    head = ["void qe_model_invoke(void)\n{"]
    if state:
        head.append("    if (!qe_state_ready) {\n        qe_model_reset_state();\n    }")
    if len(ops) <= INVOKE_PART_OPS:
        return head + ops + ["}\n"]
    parts, calls = [], []
    for n, first in enumerate(range(0, len(ops), INVOKE_PART_OPS)):
        parts.append(f"/* ops {first} to {min(first + INVOKE_PART_OPS, len(ops)) - 1} */\n"
                     f"static void qe_model_invoke_part{n}(void)\n{{\n"
                     + "\n".join(ops[first:first + INVOKE_PART_OPS]) + "\n}\n")
        calls.append(f"    qe_model_invoke_part{n}();")
    return parts + head + calls + ["}\n"]


def model_c(model: TFLiteModel, gm: GeneratedModel, kernels: list[Kernel], act_ids: list[int],
            offset: dict[int, int], path: Path, kernel_headers: tuple[str, ...],
            state: list[int] = (), scratch: dict[int, int] | None = None,
            per_op: bool = False) -> str:
    """The text of model.c. Each kernel's call holds @T<tensor index>@ placeholders, replaced
    here by the tensor's arena address (@S<op index>@: the op's scratch, `scratch`);
    `kernel_headers` are included from firmware/core/kernels/. `state`: the variable tensors,
    zeroed by a generated qe_model_reset_state() (models without any get none). `per_op`: each
    kernel call between QE_OP_BEGIN/QE_OP_END(slot) and the slots' cost arrays (qe_model.h;
    a per-op build only: without it not a byte of model.c changes)."""
    scratch = scratch or {}
    L: list[str] = []
    source = c_comment(safe_text(path.name))     # the file's name is the user's (or a stranger's)
    L.append(f"/* GENERATED by quarl_edge.converters.cgen from {source}: do not edit.\n"
             f" * model {gm.name}, sha256 {model.sha256.hex()}\n"
             f" * {len(kernels)} ops, {gm.weight_bytes} bytes of weights, {gm.arena_bytes} bytes of arena.\n"
             f" * Requantization: TFLM double rounding (see firmware/core/requant.h). */")
    L.append("#include <float.h>\n#include <math.h>\n#include <stddef.h>\n#include <stdint.h>\n")
    L.append("/* libm as float(float) on every target: avr-libc declares tanhf/expf as double(double)\n"
             " * (double is 32-bit there), which does not convert to the kernels' function type. */\n"
             "static inline float qe_libm_tanhf(float x) { return (float)tanhf(x); }\n"
             "static inline float qe_libm_expf(float x) { return (float)expf(x); }\n")
    L.append('#include "qe_model.h"\n#include "qe_protocol.h"\n'
             + "".join(f'#include "kernels/{h}"\n' for h in kernel_headers))
    L.append(f"#define QE_ARENA_BYTES {gm.arena_bytes}u\n")
    L.append("/* Activation arena: tensor -> offset (bytes), live from op to op.")
    is_state = set(state)
    for i in act_ids:
        t = model.tensors[i]
        L.append(f" *   {offset[i]:6d}  {t.nbytes:6d} B  {c_comment(t.describe())}"
                 + ("  (variable: kept across invocations)" if i in is_state else ""))
    by_index = {k.op.index: k for k in kernels}
    for j, off in scratch.items():
        k = by_index[j]
        L.append(f" *   {off:6d}  {k.scratch_bytes:6d} B  scratch of op {j} {k.op.opcode}")
    L.append(" */\nuint8_t qe_arena[QE_ARENA_BYTES] QE_ALIGNED(16);\n")

    L.append("/* ---------------------------------------------------------------- constants */")
    emitted: set[str] = set()     # a constant tensor shared by two ops (the converter
    for k in kernels:              # dedupes equal buffers, e.g. zero biases) is emitted once
        L.append(f"/* op {k.op.index}: {c_comment(k.comment)} */")
        for c in k.consts:
            m = re.search(r"static const (?:QE_FLASH )?\w+ (\w+)\[", c)
            if m is not None and m.group(1) in emitted:
                L.append(f"/* {m.group(1)}: defined above (a constant shared with an earlier op) */")
                continue
            if m is not None:
                emitted.add(m.group(1))
            L.append(c)
        if k.params:
            L.append(k.params)

    sub = _pointer(offset)
    if state:
        L.append(_state_c(model, state, offset))
    L.append("/* ----------------------------------------------------------------- schedule */")
    if per_op:
        slots = sum(1 for k in kernels if k.call)
        L.append(f"/* per-op cost (QE_PER_OP, qe_model.h): one slot per kernel call, in order */\n"
                 f"uint32_t qe_op_costs[{max(slots, 1)}];\nuint32_t qe_op_min[{max(slots, 1)}];\n"
                 f"const uint16_t qe_op_count = {slots}u;\n")
    L.extend(_schedule_c(kernels, sub, scratch, bool(state), per_op))

    L.append("/* ------------------------------------------------------------------- info */")
    L.append("static const qe_tensor_spec_t qe_model_inputs[] = {")
    for i, spec in zip(model.inputs, gm.inputs):
        L.append(_spec_c(model.tensors[i], spec, offset[i]))
    L.append("};\nstatic const qe_tensor_spec_t qe_model_outputs[] = {")
    for i, spec in zip(model.outputs, gm.outputs):
        L.append(_spec_c(model.tensors[i], spec, offset[i]))
    L.append("};\n")
    hash_c = ", ".join(f"0x{b:02x}" for b in gm.hash)
    L.append("const qe_model_info_t qe_model_info = {\n"
             f"    \"{gm.name}\",\n    {{ {hash_c} }},\n    QE_ARENA_BYTES,\n"
             f"    {len(gm.inputs)}u,\n    {len(gm.outputs)}u,\n"
             "    qe_model_inputs,\n    qe_model_outputs,\n};\n")
    return check_c("\n".join(L), "model.c")


# ------------------------------------------------------------------------------- model.json
def model_json(gm: GeneratedModel, model: TFLiteModel, path: Path) -> str:
    """The text of model.json: name, hashes, memory, ops and the graph's input/output specs."""
    def spec(s: TensorSpec, name: str, off: int) -> dict:
        d = asdict(s)
        d["shape"] = list(s.shape)
        d.update(name=name, arena_offset=off, bytes=s.nbytes)
        return d
    info = {
        "name": gm.name,
        "hash": gm.hash.hex(),
        "sha256": model.sha256.hex(),
        "source": path.name,
        "arena_bytes": gm.arena_bytes,
        "weight_bytes": gm.weight_bytes,
        **({"layout_extra_bytes": gm.layout_extra_bytes} if gm.layout_extra_bytes else {}),
        "ops": gm.ops,
        "inputs": [spec(s, n, o) for s, n, o in zip(gm.inputs, gm.input_names, gm.input_offsets)],
        "outputs": [spec(s, n, o) for s, n, o in zip(gm.outputs, gm.output_names, gm.output_offsets)],
        "rounding": qmath.ROUNDING,
        "generator": "quarl_edge.converters.cgen",
    }
    return json.dumps(info, indent=2) + "\n"
