"""Hand-built .tflite flatbuffers for the tests, with exact control over scales, zero points
and shapes (helpers_models.py re-exports them; new tests may import them from here):

    fc_model(weights, input_q, weight_scale, output_q)   # int8 FULLY_CONNECTED
    affine_model("QUANTIZE", size, scale, zero_point)    # one QUANTIZE or DEQUANTIZE
    op_model(op, inputs, outputs, options)               # any one-op (or two-op) model
    build_tflite(tensors, buffers, ops, inputs, outputs) # the packer under them
"""
from __future__ import annotations

import numpy as np


# ------------------------------------------------------------ hand-built flatbuffers
def schema():
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s
    return s


def quant(scale, zp):
    s = schema()
    q = s.QuantizationParametersT()
    q.scale = [float(v) for v in np.atleast_1d(scale)]
    q.zeroPoint = [int(v) for v in np.atleast_1d(zp)]
    return q


def tensor(name, shape, ttype, buf, q=None):
    s = schema()
    t = s.TensorT()
    t.name, t.shape, t.type, t.buffer, t.quantization = name, np.array(shape, np.int32), ttype, buf, q
    return t


def build_tflite(tensors, buffers, ops, inputs, outputs) -> bytes:
    """Pack a one-subgraph model. tensors: TensorT list; buffers: list of bytes|None (index 0
    must be None); ops: list of (builtin op name, inputs, outputs, options object or None)."""
    import flatbuffers
    s = schema()
    m = s.ModelT()
    m.version, m.description = 3, "quarl-edge test model"
    names = []
    for name, *_ in ops:
        if name not in names:
            names.append(name)
    m.operatorCodes = []
    for name in names:
        oc = s.OperatorCodeT()
        code = getattr(s.BuiltinOperator, name)
        oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
        m.operatorCodes.append(oc)
    m.buffers = []
    for data in buffers:
        b = s.BufferT()
        if data is not None:
            b.data = np.frombuffer(bytes(data), np.uint8)
        m.buffers.append(b)
    sg = s.SubGraphT()
    sg.tensors, sg.inputs, sg.outputs, sg.name = tensors, list(inputs), list(outputs), "main"
    sg.operators = []
    for name, ins, outs, options in ops:
        op = s.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = names.index(name), list(ins), list(outs)
        if options is not None:
            op.builtinOptionsType = getattr(s.BuiltinOptions, type(options).__name__[:-1])
            op.builtinOptions = options
        sg.operators.append(op)
    m.subgraphs = [sg]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def fc_model(weights, input_q, weight_scale, output_q, bias=None, activation="NONE",
             input_shape=None, output_shape=None, keep_num_dims=False, weight_zp=0) -> bytes:
    """int8 input -> FULLY_CONNECTED -> int8 output with exact quantization parameters.

    input_q/output_q: (scale, zero_point); weight_scale may be a list (per-channel)."""
    s = schema()
    w = np.asarray(weights, np.int8)
    out_depth, depth = w.shape
    input_shape = input_shape or [1, depth]
    output_shape = output_shape or [int(np.prod(input_shape)) // depth, out_depth]
    ws = np.atleast_1d(weight_scale)
    tensors = [
        tensor("input", input_shape, s.TensorType.INT8, 1, quant(*input_q)),
        tensor("fc/weights", list(w.shape), s.TensorType.INT8, 2, quant(ws, [weight_zp] * len(ws))),
        tensor("output", output_shape, s.TensorType.INT8, 3, quant(*output_q)),
    ]
    buffers = [None, None, w.tobytes(), None]
    ins = [0, 1, -1]
    if bias is not None:
        tensors.append(tensor("fc/bias", [out_depth], s.TensorType.INT32, 4,
                               quant(np.float32(input_q[0]) * np.float32(ws[0]), 0)))
        buffers.append(np.asarray(bias, np.int32).tobytes())
        ins = [0, 1, 3]
    if len(ws) > 1:
        tensors[1].quantization.quantizedDimension = 0
    opt = s.FullyConnectedOptionsT()
    opt.fusedActivationFunction = getattr(s.ActivationFunctionType, activation)
    opt.keepNumDims = keep_num_dims
    return build_tflite(tensors, buffers, [("FULLY_CONNECTED", ins, [2], opt)], [0], [2])


def affine_model(op: str, size: int, scale: float, zero_point: int) -> bytes:
    """A single QUANTIZE (float32 -> int8) or DEQUANTIZE (int8 -> float32) model."""
    s = schema()
    q = quant(scale, zero_point)
    f = tensor("x_float", [1, size], s.TensorType.FLOAT32, 1)
    i = tensor("x_int8", [1, size], s.TensorType.INT8, 2, q)
    tensors = [f, i] if op == "QUANTIZE" else [i, f]
    return build_tflite(tensors, [None, None, None], [(op, [0], [1], None)], [0], [1])


# ---------------------------------------------------------------- generic one-op models
_TT = {"float32": "FLOAT32", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64"}


def op_model(op: str, inputs, outputs, options=None, op2=None) -> bytes:
    """A one-op (or two-op, with `op2`) model from tensor descriptions.

    inputs/outputs: lists of dicts {shape, dtype, q=(scale, zp) | None, data=ndarray | None,
    variable=bool}. Constant inputs (with data) and variable ones (state kept across
    invocations, e.g. SVDF's) are not graph inputs. op2: (op name, options, out dict) applied
    to the first op's output; the graph output is then op2's output."""
    s = schema()
    tensors, buffers = [], [None]
    graph_inputs, op_inputs = [], []

    def add(d, name):
        buf = len(buffers)
        data = d.get("data")
        buffers.append(None if data is None else np.asarray(data, d["dtype"]).tobytes())
        q = d.get("q")
        qq = None
        if q is not None:
            qq = quant(q[0], q[1])
            if len(np.atleast_1d(q[0])) > 1:
                qq.quantizedDimension = d.get("qdim", 0)
        tensors.append(tensor(name, list(d["shape"]), getattr(s.TensorType, _TT[d["dtype"]]), buf, qq))
        tensors[-1].isVariable = bool(d.get("variable", False))
        return len(tensors) - 1

    for k, d in enumerate(inputs):
        if d is None:
            op_inputs.append(-1)
            continue
        i = add(d, f"in{k}")
        op_inputs.append(i)
        if d.get("data") is None and not d.get("variable"):
            graph_inputs.append(i)
    outs = [add(d, f"out{k}") for k, d in enumerate(outputs)]
    ops = [(op, op_inputs, outs, options)]
    if op2 is not None:
        name2, opt2, out2 = op2
        o2 = add(out2, "out_b")
        ops.append((name2, [outs[0]], [o2], opt2))
        outs = [o2]
    return build_tflite(tensors, buffers, ops, graph_inputs, outs)


def unary_model(op: str, shape, dtype: str, in_q=None, out_q=None, options=None) -> bytes:
    return op_model(op, [dict(shape=shape, dtype=dtype, q=in_q)],
                    [dict(shape=shape, dtype=dtype, q=out_q)], options)
