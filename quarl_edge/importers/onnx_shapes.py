"""Static shapes of an ONNX graph's tensors, for folding its shape arithmetic (onnx_fold.py):
ONNX's shape inference, then our own pass where it left a dimension unknown. A dimension is an
int, a Dim (named in the file, as torch names the batch) or None (unknown)."""
from __future__ import annotations

# onnx is optional (quarl-edge[onnx]): onnx_policy.load imports this module only after
# _modules() found it, or said how to install it
import onnx
from onnx import numpy_helper


class Dim:
    """A dimension known only by the name the file gives it (the batch: "batch" in torch's
    dynamic_axes, "s0" or "batch" from the dynamo exporter). Two are the same dimension when
    their names are; a dimension without a name is None, unknown."""

    def __init__(self, name: str):
        self.name = name

    def __eq__(self, other):
        return isinstance(other, Dim) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return self.name


def shapes_and_types(model) -> tuple[dict, dict]:
    """Every tensor's static shape and element type. A dimension is an int, a Dim (named in
    the file, as torch names the batch) or None (unknown). ONNX's shape inference first, then
    our own pass (_propagate) where it left a dimension unknown: it names the result of a
    broadcast against a Shape-built tensor (SB3's gSDE) with a fresh symbol, where the shape is
    in fact the batch's."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:   # noqa: BLE001 (any failure: fall back to what the file declares)
        inferred = model
    g = inferred.graph
    shapes, types = {}, {}
    for v in [*g.input, *g.value_info, *g.output]:
        t = v.type.tensor_type
        types[v.name] = t.elem_type
        if t.HasField("shape"):
            shapes[v.name] = [d.dim_value if d.HasField("dim_value") else
                              Dim(d.dim_param) if d.dim_param and
                              not d.dim_param.startswith("unk__") else None
                              for d in t.shape.dim]
    _propagate(model.graph, shapes)
    return shapes, types


def all_known(shape) -> bool:
    """Whether a static shape is given and has no unknown (None) dimension."""
    return shape is not None and all(d is not None for d in shape)


def _broadcast(a, b):
    """numpy's broadcast of two static shapes, or None when it cannot be told."""
    if not (all_known(a) and all_known(b)):
        return None
    out = []
    for k in range(1, max(len(a), len(b)) + 1):
        x, y = (a[-k] if k <= len(a) else 1), (b[-k] if k <= len(b) else 1)
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return out[::-1]


def _propagate(g, shapes) -> None:
    """Shapes ONNX's inference left unknown, from the ops' own rules (elementwise ops,
    broadcasts, Gemm, and ConstantOfShape/Expand of a Shape), in place. Only shapes: no value
    is computed here."""
    for t in g.initializer:
        shapes[t.name] = list(t.dims)
    shape_of = {}                     # a Shape node's output -> the shape it holds
    unary = ("Relu", "Tanh", "Sigmoid", "Exp", "Sqrt", "Neg", "Abs", "Cast", "Identity", "Clip",
             "Softmax", "Dropout")
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    shapes[n.output[0]] = list(numpy_helper.to_array(a.t).shape)
            continue
        if all_known(shapes.get(n.output[0])):
            if n.op_type == "Shape" and all_known(shapes.get(n.input[0])) and \
                    len(n.attribute) == 0:
                shape_of[n.output[0]] = shapes[n.input[0]]
            continue
        ins = [shapes.get(x) for x in n.input]
        out = None
        if n.op_type in unary:
            out = ins[0]
        elif n.op_type in ("Add", "Sub", "Mul", "Div", "Pow"):
            out = _broadcast(ins[0], ins[1])
        elif n.op_type == "Gemm" and all_known(ins[0]) and all_known(ins[1]):
            attrs = {a.name: a.i for a in n.attribute}
            out = [ins[0][1 if attrs.get("transA") else 0],
                   ins[1][0 if attrs.get("transB") else 1]]
        elif n.op_type == "Shape" and all_known(ins[0]) and len(n.attribute) == 0:
            shape_of[n.output[0]] = ins[0]
            out = [len(ins[0])]
        elif n.op_type == "ConstantOfShape" and n.input[0] in shape_of:
            out = shape_of[n.input[0]]
        elif n.op_type == "Expand" and n.input[1] in shape_of:
            out = _broadcast(ins[0], shape_of[n.input[1]])
        if all_known(out):
            shapes[n.output[0]] = list(out)
            if n.op_type == "Shape":
                shapes[n.output[0]] = [len(ins[0])]
