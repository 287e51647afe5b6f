"""What every op lowering shares: the kernel record it returns, the refusal, per-tensor checks,
bias and operand arrays, NHWC windows and padding, fused activations, axis arguments.

A lowering is `lower_x(op, model, pname) -> Kernel`: it validates the op completely (raising
`unsupported(...)` naming what it cannot run, or ModelError for a malformed model) and returns
the C to emit. `pname` is the name of its const params struct ("op<index>_params").
"""
from __future__ import annotations

import numpy as np

from ...core.errors import ModelError, UnsupportedOpError

from .. import qmath
from ..emit import c_array, c_comment, c_ident, c_ram_array
from ..spec import Kernel  # noqa: F401  (the lowerings' result, re-exported for them)
from ..tflite_model import Operator, Tensor, TFLiteModel


def shape_str(t: Tensor) -> str:
    return "[" + ",".join(str(d) for d in t.shape) + "]"


def unsupported(op: Operator, model: TFLiteModel, why: str = "") -> UnsupportedOpError:
    """The error for an op we cannot run: its index, types, shapes and the reason. The driver
    (cgen.generate) adds what is supported: the table of lowerings imports this module."""
    types = []
    for i in op.inputs:
        if i >= 0:
            t = model.tensors[i]
            types.append(t.dtype + (" (const)" if t.is_constant else ""))
    outs = [model.tensors[i].dtype for i in op.outputs]
    shapes = (", ".join(shape_str(model.tensors[i]) for i in op.inputs if i >= 0) + " -> "
              + ", ".join(shape_str(model.tensors[i]) for i in op.outputs))
    msg = (f"op {op.index} {op.opcode} ({', '.join(types)} -> {', '.join(outs)}) is not supported"
           + (f": {why}" if why else "") + f". Shapes: {shapes}")
    err = UnsupportedOpError(msg)
    err.lists_supported = True      # cgen.generate appends ". Supported: ..." to this one
    return err


def elementwise_operands(op: Operator, model: TFLiteModel):
    """(a, b, output) of a two-input element-wise op (ADD, MUL, SUB, MAXIMUM, MINIMUM): one type
    for all three, at most one constant input."""
    if len(op.inputs) != 2 or len(op.outputs) != 1 or min(op.inputs) < 0:
        raise unsupported(op, model, "expected two inputs and one output")
    a, b = model.tensors[op.inputs[0]], model.tensors[op.inputs[1]]
    out = model.tensors[op.outputs[0]]
    if not (a.dtype == b.dtype == out.dtype):
        raise unsupported(op, model, f"inputs {a.dtype}, {b.dtype}, output {out.dtype} differ")
    if a.is_constant and b.is_constant:
        raise unsupported(op, model, "both inputs are constant")
    return a, b, out


def weighted_operands(op: Operator, model: TFLiteModel, weights: str):
    """(input, weights, bias or None, output, fused activation) of an op with constant weights
    (FULLY_CONNECTED, CONV_2D, DEPTHWISE_CONV_2D); `weights` is their name in errors."""
    ins = op.inputs + [-1] * (3 - len(op.inputs))
    if len(op.inputs) < 2 or len(op.outputs) != 1 or ins[0] < 0 or ins[1] < 0:
        raise unsupported(op, model, f"expected input, {weights}, optional bias and one output")
    x, w, out = model.tensors[ins[0]], model.tensors[ins[1]], model.tensors[op.outputs[0]]
    bias = model.tensors[ins[2]] if ins[2] >= 0 else None
    return x, w, bias, out, fused_activation(op, model)


def opt(op: Operator, key: str, default=None):
    """An op option (TFLite's BuiltinOptions field, camelCase), `default` when absent or None."""
    v = op.options.get(key, default)
    return default if v is None else v


# ------------------------------------------------------------------- quantization checks
ZERO_POINT_RANGE = {"int4": (-8, 7), "int8": (-128, 127), "int16": (-32768, 32767)}


def zero_point_error(t: Tensor, zero_points, what: str) -> str | None:
    """Why the zero point(s) of `t` are outside its type's range (int8: [-128, 127], int16:
    [-32768, 32767]), or None. The kernels take -zero_point as an offset, and the int8/int16
    output stages rely on it being in that range; a converter never writes anything else, so
    only a malformed model fails this."""
    lo, hi = ZERO_POINT_RANGE.get(t.dtype, (None, None))
    if lo is None:
        return None
    for zp in np.asarray(zero_points).ravel():
        if not lo <= int(zp) <= hi:
            return (f"{what} '{t.name}' has zero point {int(zp)}, outside the {t.dtype} range "
                    f"[{lo}, {hi}]")
    return None


def per_tensor(t: Tensor, op: Operator, model: TFLiteModel, what: str) -> None:
    """`t` is quantized with one finite, positive scale and a zero point in its type's range."""
    if t.quantization is None:
        raise unsupported(op, model, f"{what} '{t.name}' has no quantization parameters")
    if t.quantization.per_channel:
        raise unsupported(op, model, f"{what} '{t.name}' is quantized per channel "
                                     f"({len(t.quantization.scale)} scales); only per-tensor is supported")
    if not (np.isfinite(t.scale) and t.scale > 0):
        raise unsupported(op, model, f"{what} '{t.name}' has scale {t.scale}")
    why = zero_point_error(t, t.quantization.zero_point, what)
    if why is not None:
        raise unsupported(op, model, why)



def int16_zero_points(op: Operator, model: TFLiteModel, tensors) -> None:
    """Every int16 tensor of an element-wise op (ADD, SUB, MUL) has zero point 0: TFLM's int16
    MUL requires it, its SUB asserts it, and the int16x8 scheme never writes anything else."""
    for t, what in zip(tensors, ("input 1", "input 2", "output")):
        if t.zero_point != 0:
            raise unsupported(op, model, f"int16 {what} '{t.name}' has zero point {t.zero_point}; "
                                         f"int16 {op.opcode} needs 0 (TFLM's int16 kernels)")

def weight_quantization(op, model, w, what: str, n_out: int, qdim: int):
    """The quantization of int8 weights `w` (`what`: "weights" or "filter"), checked: present,
    one scale per tensor or one per output channel along `qdim`, every scale finite and > 0,
    every zero point in the int8 range."""
    wq = w.quantization
    if wq is None:
        raise unsupported(op, model, f"{what} '{w.name}': no quantization parameters")
    n_ch = len(wq.scale)
    if n_ch > 1 and (n_ch != n_out or wq.quantized_dimension != qdim):
        raise unsupported(op, model, f"{what} '{w.name}': {n_ch} scales along dimension "
                                     f"{wq.quantized_dimension}; expected {n_out} along {qdim}")
    if not np.all(np.isfinite(wq.scale) & (wq.scale > 0)):
        raise unsupported(op, model, f"{what} '{w.name}': a scale is not finite and positive")
    why = zero_point_error(w, wq.zero_point, what)
    if why is not None:
        raise unsupported(op, model, why)
    return wq


# --------------------------------------------------------------------------- tensor checks
def activation_tensor(op: Operator, model: TFLiteModel, idx: int, dtype: str, what: str) -> Tensor:
    """Tensor `idx`, checked to be a non-constant `dtype` tensor."""
    t = model.tensors[idx]
    if t.is_constant:
        raise unsupported(op, model, f"{what} '{t.name}' is a constant")
    if t.dtype != dtype:
        raise unsupported(op, model, f"{what} '{t.name}' is {t.dtype}, expected {dtype}")
    return t


def same_shape_io(op: Operator, model: TFLiteModel) -> tuple[Tensor, Tensor]:
    """The (input, output) of an element-wise op: one activation input, one output of its type
    and size."""
    if len([i for i in op.inputs if i >= 0]) < 1 or len(op.outputs) != 1:
        raise unsupported(op, model, "expected one input and one output")
    x, y = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    if x.is_constant:
        raise unsupported(op, model, f"input '{x.name}' is a constant")
    if x.dtype != y.dtype:
        raise unsupported(op, model, f"input {x.dtype} and output {y.dtype} differ")
    if x.size != y.size:
        raise ModelError(f"op {op.index} {op.opcode}: input has {x.size} elements, output {y.size}")
    return x, y


def u16(op: Operator, model: TFLiteModel, what: str, v: int) -> int:
    """`v`, checked to fit a kernel's uint16 field (and be positive)."""
    if not 0 < v <= 0xFFFF:
        raise unsupported(op, model, f"{what} {v} does not fit the kernel's uint16 field")
    return int(v)


def fused_activation(op: Operator, model: TFLiteModel) -> str:
    """The op's fused activation (NONE, RELU, RELU6, RELU_N1_TO_1); anything else is refused."""
    act = op.fused_activation or "NONE"
    if act not in qmath.ACTIVATIONS:
        raise unsupported(op, model, f"fused activation {act}")
    return act


# ------------------------------------------------------------------ constant arrays, operands
def bias_array(bias: Tensor | None, ctype: str, fmt, per_line: int, consts: list[str]) -> tuple[str, int]:
    """An op's optional bias as a const array appended to consts: (its C name, or QE_FLASH_NULL
    when there is none (firmware/core/qe_flash.h); the bytes it takes)."""
    if bias is None:
        return "QE_FLASH_NULL", 0
    name = c_ident(bias.name, f"b{bias.index}_")
    consts.append(f"/* {c_comment(bias.describe())} */\n" + c_array(ctype, name, bias.data, per_line, fmt))
    return name, bias.data.itemsize * bias.size


def const_operand(t: Tensor, ctype: str, fmt, consts: list[str], per_line: int = 12) -> str:
    """A constant operand as a C const array (appended to consts); returns its name."""
    name = c_ident(t.name, f"c{t.index}_")
    # an operand the kernel also takes from the arena: a RAM pointer, so no QE_FLASH here
    consts.append(f"/* {c_comment(t.describe())} */\n"
                  + c_ram_array(c_array(ctype, name, t.data, per_line, fmt)))
    return name


def operand(t: Tensor, ctype: str, fmt, consts: list[str]) -> str:
    """A C pointer expression for an input: the arena placeholder or a const array."""
    if t.is_constant:
        return const_operand(t, ctype, fmt, consts)
    return f"(const {ctype} *)@T{t.index}@"


# ------------------------------------------------------------------ NHWC windows (conv, pool)
_PADDING = {0: "SAME", 1: "VALID"}


def window(op: Operator, model: TFLiteModel, x: Tensor, out: Tensor, k_h: int, k_w: int,
           depth_multiplier: int = 1) -> tuple[dict, str]:
    """TFLM's ComputePaddingHeightWidth for an NHWC op; checks the output shape.
    Returns (window fields, a one-line description)."""
    if len(x.shape) != 4 or len(out.shape) != 4:
        raise unsupported(op, model, f"input {list(x.shape)} and output {list(out.shape)} must be "
                                     f"4-D (NHWC)")
    padding = _PADDING.get(opt(op, "padding", 0))
    if padding is None:
        raise unsupported(op, model, f"padding type {op.options.get('padding')}")
    sh, sw = int(opt(op, "strideH", 1)), int(opt(op, "strideW", 1))
    dh, dw = int(opt(op, "dilationHFactor", 1)), int(opt(op, "dilationWFactor", 1))
    if min(sh, sw, dh, dw) < 1:
        raise unsupported(op, model, f"stride {sh}x{sw} / dilation {dh}x{dw}")
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
                raise unsupported(op, model, f"{key} {v} does not fit uint16")
        else:
            u16(op, model, key, v)
    desc = (f"{k_h}x{k_w} window, stride {sh}x{sw}, dilation {dh}x{dw}, {padding} "
            f"(pad top {pads[0]}, left {pads[1]})")
    return g, desc


def window_c(g: dict) -> str:
    """The `.g = { ... }` initializer of a qe_window_t (firmware/core/kernels/window.h)."""
    return ("    .g = {\n" + "".join(f"        .{k} = {v}u,\n" for k, v in g.items()) + "    },\n")


# ------------------------------------------------------- broadcasting (binary element-wise ops)
def broadcast_c(op: Operator, model: TFLiteModel, a: Tensor, b: Tensor, out: Tensor) -> str:
    """The `.bc = {...}` qe_broadcast_t initializer (firmware/core/kernels/broadcast.h) for
    out = a (op) b with numpy broadcasting up to 6-D (ADD, MUL, SUB, MAXIMUM, MINIMUM)."""
    rank = len(out.shape)
    if max(len(a.shape), len(b.shape)) > rank or rank > 6:
        raise unsupported(op, model, f"shapes {list(a.shape)}, {list(b.shape)} -> {list(out.shape)}")
    try:
        want = tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise ModelError(f"op {op.index} {op.opcode}: shapes {list(a.shape)} and {list(b.shape)} "
                         f"do not broadcast") from None
    if want != tuple(out.shape):
        raise ModelError(f"op {op.index} {op.opcode}: {list(a.shape)} and {list(b.shape)} broadcast "
                         f"to {list(want)}, the output is {list(out.shape)}")
    for d in out.shape:
        u16(op, model, "output dimension", d)
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


# ----------------------------------------------------------------- axis arguments (MEAN, ARG_MAX)
def axis_values(op: Operator, model: TFLiteModel, rank: int) -> list[int]:
    """The op's constant axis input (its second), normalised to 0..rank-1, sorted, unique."""
    if len(op.inputs) != 2 or len(op.outputs) != 1 or min(op.inputs) < 0:
        raise unsupported(op, model, "expected an input, a constant axis and one output")
    ax = model.tensors[op.inputs[1]]
    if not ax.is_constant or ax.dtype not in ("int32", "int64"):
        raise unsupported(op, model, f"axis '{ax.name}' must be a constant int32/int64 tensor")
    vals = []
    for v in np.asarray(ax.data).ravel():
        v = int(v) + rank if int(v) < 0 else int(v)
        if not 0 <= v < rank:
            raise unsupported(op, model, f"axis {int(v)} for rank {rank}")
        vals.append(v)
    return sorted(set(vals))


def outer_inner(shape, lo: int, hi: int) -> tuple[int, int, int]:
    """`shape` viewed as [outer][dims lo..hi][inner]: the three sizes."""
    p = lambda s: int(np.prod(s, dtype=np.int64))  # noqa: E731
    return p(shape[:lo]), p(shape[lo:hi + 1]), p(shape[hi + 1:])


# ---------------------------------------------------- data movement (PAD, TRANSPOSE, STRIDED_SLICE)
def copy_io(op: Operator, model: TFLiteModel, dtypes: tuple[str, ...]) -> tuple[Tensor, Tensor]:
    """(input, output) of an op that moves elements without changing them: a non-constant input
    of one of `dtypes`, an output of the same type and, for int8/int16, the same quantization
    (TFLM copies raw values; the converter always emits these ops so)."""
    if not op.inputs or op.inputs[0] < 0 or len(op.outputs) != 1:
        raise unsupported(op, model, "expected an input and one output")
    x, y = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    if x.dtype not in dtypes:
        raise unsupported(op, model, f"{x.dtype} {op.opcode}; supported: {', '.join(dtypes)}")
    if y.dtype != x.dtype:
        raise unsupported(op, model, f"input {x.dtype} and output {y.dtype} differ")
    if x.is_constant:
        raise unsupported(op, model, f"input '{x.name}' is a constant")
    if x.dtype in ("int8", "int16"):
        per_tensor(x, op, model, "input")
        per_tensor(y, op, model, "output")
        if (float(x.scale), x.zero_point) != (float(y.scale), y.zero_point):
            raise unsupported(op, model, f"input (scale {x.scale:g}, zero point {x.zero_point}) and "
                                         f"output (scale {y.scale:g}, zero point {y.zero_point}) "
                                         f"differ: TFLM's kernel copies raw values")
    return x, y


def const_int_input(op: Operator, model: TFLiteModel, k: int, what: str) -> np.ndarray:
    """Input `k` of the op, which must be a constant int32/int64 tensor: its values as int64."""
    if len(op.inputs) <= k or op.inputs[k] < 0:
        raise unsupported(op, model, f"no {what} input")
    t = model.tensors[op.inputs[k]]
    if not t.is_constant or t.dtype not in ("int32", "int64"):
        raise unsupported(op, model, f"{what} '{t.name}' must be a constant int32/int64 tensor "
                                     f"(TFLM's kernel needs it constant too)")
    return np.asarray(t.data, dtype=np.int64)


def dims_c(values, suffix: str = "u") -> str:
    """A C brace list `{ 1u, 2u }` of ints."""
    return "{ " + ", ".join(f"{int(v)}{suffix}" for v in values) + " }"
