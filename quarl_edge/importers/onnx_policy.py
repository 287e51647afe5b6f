"""ONNX policies (e.g. a CleanRL or Stable-Baselines3 actor exported by torch.onnx.export) as a
plain Keras MLP, checked against onnxruntime.

No maintained ONNX -> TensorFlow converter works with our TensorFlow 2.15 pin (onnx2tf needs a
newer TensorFlow, onnx-tf is unmaintained), and a policy network uses few ops, so the graph is
mapped here, node by node, onto Dense layers:

    Gemm, MatMul (constant weights)     a Dense layer (alpha, beta, transA/transB folded)
    Add / Sub / Mul / Div by a constant folded into the Dense layer before it when that layer
                                        feeds only this node, else a diagonal Dense layer
    Relu, Tanh, Sigmoid, Softmax        the activation of the Dense layer before it, else an
                                        Activation layer
    Clip (finite constant bounds)       relu6 between two scalings: the Dense layer before it
                                        scaled to [0, 6], then a diagonal one back to [lo, hi]
                                        (SB3's gSDE clips its mean with Hardtanh)
    Flatten, Identity, Dropout          nothing (the observations are a vector)

and for a small CNN policy, before those: an optional Transpose of NHWC images to NCHW at the
input (what a CleanRL/PyTorch actor does to the env's images: the Keras network then takes the
images as they are), an optional scalar Mul/Div of the input (x / 255, folded into the first
convolution), then Conv (group 1, dilation 1; padding as a ZeroPadding2D), each optionally
followed by Relu, and MaxPool, then Flatten (or a Reshape to [N, -1]): torch's C, H, W flatten
order is fixed in the Dense layer after it.

Before that mapping, what real exporters put around those ops is folded away (`_fold`): no-op
Casts (SB3's preprocessing casts float32 observations to float32), Identity and Constant nodes,
and the constant shape arithmetic torch writes for `x.reshape(x.shape[0], -1)` or `view(...)`
(Shape, Gather, Unsqueeze, Squeeze, Concat, ConstantOfShape, Cast of a constant), evaluated here
in numpy from the constants and the statically inferred shapes (the batch dimension stays a
symbol). A Reshape whose folded shape is [batch, -1] (or [-1, n], [batch, n] with n the values per
observation) then maps as a Flatten, and an Expand to the shape its input has is a no-op. Nodes
the output does not depend on (what only feeds a Shape whose value is static, as gSDE's unused
std does) are dead: neither mapped nor checked, and onnxruntime is given the graph without them
(`_checked_model`).

The first output is the network's output (Q-values, logits or the action). Every node outside
this list, or a listed shape op that does not fold (its inputs are not constant, a Cast to another
type such as float -> int64), is named at once, with its index, in one error, before onnxruntime
sees the file. Integer outputs (an ArgMax inside the graph) are refused: export the network
before the argmax.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import Imported, PolicyImportError, check_outputs, check_spaces, env_action, sha256

SUPPORTED = ("Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Relu", "Tanh", "Sigmoid", "Softmax",
             "Clip", "Flatten", "Identity", "Dropout", "Conv", "MaxPool", "Transpose", "Reshape")
# folded before the mapping (see _fold); a node of these that does not fold is refused by name
FOLDED = ("Constant", "Cast", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat",
          "ConstantOfShape", "Expand")
ACTIVATIONS = {"Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid", "Softmax": "softmax"}


class _Dim:
    """A dimension known only by the name the file gives it (the batch: "batch" in torch's
    dynamic_axes, "s0" or "batch" from the dynamo exporter). Two are the same dimension when
    their names are; a dimension without a name is None, unknown."""

    def __init__(self, name: str):
        self.name = name

    def __eq__(self, other):
        return isinstance(other, _Dim) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return self.name


def _shapes_and_types(model) -> tuple[dict, dict]:
    """Every tensor's static shape and element type. A dimension is an int, a _Dim (named in
    the file, as torch names the batch) or None (unknown). ONNX's shape inference first, then
    our own pass (_propagate) where it left a dimension unknown: it names the result of a
    broadcast against a Shape-built tensor (SB3's gSDE) with a fresh symbol, where the shape is
    in fact the batch's."""
    import onnx
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
                              _Dim(d.dim_param) if d.dim_param and
                              not d.dim_param.startswith("unk__") else None
                              for d in t.shape.dim]
    _propagate(model.graph, shapes)
    return shapes, types


def _known(shape) -> bool:
    return shape is not None and all(d is not None for d in shape)


def _broadcast(a, b):
    """numpy's broadcast of two static shapes, or None when it cannot be told."""
    if not (_known(a) and _known(b)):
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
    from onnx import numpy_helper
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
        if _known(shapes.get(n.output[0])):
            if n.op_type == "Shape" and _known(shapes.get(n.input[0])) and \
                    len(n.attribute) == 0:
                shape_of[n.output[0]] = shapes[n.input[0]]
            continue
        ins = [shapes.get(x) for x in n.input]
        out = None
        if n.op_type in unary:
            out = ins[0]
        elif n.op_type in ("Add", "Sub", "Mul", "Div", "Pow"):
            out = _broadcast(ins[0], ins[1])
        elif n.op_type == "Gemm" and _known(ins[0]) and _known(ins[1]):
            attrs = {a.name: a.i for a in n.attribute}
            out = [ins[0][1 if attrs.get("transA") else 0],
                   ins[1][0 if attrs.get("transB") else 1]]
        elif n.op_type == "Shape" and _known(ins[0]) and len(n.attribute) == 0:
            shape_of[n.output[0]] = ins[0]
            out = [len(ins[0])]
        elif n.op_type == "ConstantOfShape" and n.input[0] in shape_of:
            out = shape_of[n.input[0]]
        elif n.op_type == "Expand" and n.input[1] in shape_of:
            out = _broadcast(ins[0], shape_of[n.input[1]])
        if _known(out):
            shapes[n.output[0]] = list(out)
            if n.op_type == "Shape":
                shapes[n.output[0]] = [len(ins[0])]


def _constant_attr(node):
    """A Constant node's value as numpy, or None for the kinds a policy has no use for."""
    from onnx import numpy_helper
    for a in node.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), np.float32)
        if a.name == "value_int":
            return np.array(a.i, np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), np.int64)
    return None


def _axes(node, consts, ins):
    """Unsqueeze/Squeeze axes: an attribute before opset 13, the second input since."""
    for a in node.attribute:
        if a.name == "axes":
            return list(a.ints)
    if len(ins) > 1 and ins[1]:
        return [int(x) for x in np.asarray(consts[ins[1]]).reshape(-1)]
    return None


def _array(value) -> np.ndarray:
    """A folded value as an array: integers where every dimension is known, else objects
    holding the _Dim names (numpy's indexing returns bare elements of an object array)."""
    value = np.asarray(value)
    if value.dtype == object and not any(isinstance(d, _Dim) for d in value.reshape(-1)):
        value = value.astype(np.int64)
    return value


def _evaluate(node, ins, consts, shapes):
    """The value of a shape-arithmetic node whose inputs are all known (see _fold); None when
    this node cannot be evaluated here."""
    import onnx
    op, attrs = node.op_type, {a.name: a for a in node.attribute}
    vals = [consts.get(x) if x else None for x in ins]
    if op == "Shape":
        shape = list(np.shape(vals[0])) if ins[0] in consts else shapes.get(ins[0])
        if not _known(shape):
            return None
        start = attrs["start"].i if "start" in attrs else 0
        end = attrs["end"].i if "end" in attrs else len(shape)
        return np.array(shape[start:end], dtype=object if any(isinstance(d, _Dim) for d in
                                                              shape[start:end]) else np.int64)
    if op == "Identity":
        return vals[0]
    if op == "Cast":
        to = onnx.helper.tensor_dtype_to_np_dtype(attrs["to"].i)
        if vals[0].dtype == object:    # a shape with a named dimension: only as integers
            return vals[0] if np.issubdtype(to, np.integer) else None
        return vals[0].astype(to)
    if op == "Gather":
        return np.take(vals[0], np.asarray(vals[1], np.int64),
                       axis=attrs["axis"].i if "axis" in attrs else 0)
    if op in ("Unsqueeze", "Squeeze"):
        axes, x = _axes(node, consts, ins), np.asarray(vals[0])
        if op == "Squeeze":
            if axes is None:
                axes = [k for k, d in enumerate(x.shape) if d == 1]
            return np.squeeze(x, axis=tuple(a % x.ndim for a in axes)) if axes else x
        rank = x.ndim + len(axes)
        for a in sorted(a % rank for a in axes):
            x = np.expand_dims(x, a)
        return x
    if op == "Concat":
        return np.concatenate([np.asarray(v).reshape(-1) if np.ndim(v) == 0 else v
                               for v in vals], axis=attrs["axis"].i)
    if op == "ConstantOfShape":
        if vals[0].dtype == object:
            return None
        value = _constant_attr(node)
        value = np.zeros(1, np.float32) if value is None else value.reshape(-1)
        return np.full([int(d) for d in vals[0]], value[0], dtype=value.dtype)
    if op == "Expand":
        if vals[1].dtype == object:
            return None
        return vals[0] * np.ones([int(d) for d in vals[1]], dtype=vals[0].dtype)
    if op == "Reshape":
        if vals[1].dtype == object:
            return None
        want = [int(d) for d in vals[1]]
        want = [vals[0].shape[k] if d == 0 else d for k, d in enumerate(want)]
        return np.reshape(vals[0], want)
    return None


def _flattens(want, shape) -> bool:
    """Whether a Reshape to `want` (the folded shape) of a tensor of static `shape` is a
    Flatten to [batch, values per observation]."""
    if shape is None or len(want) != 2 or len(shape) < 1:
        return False
    batch, rest = shape[0], shape[1:]
    per_obs = None if any(d is None or isinstance(d, _Dim) or d == 0 for d in rest) else \
        int(np.prod(rest, dtype=np.int64))
    first, second = want
    if isinstance(first, _Dim):
        first_is_batch = first == batch
    else:   # 0 copies the input's dimension; a static batch may be written out
        first_is_batch = first == 0 or (isinstance(batch, int) and batch > 0 and first == batch)
    if isinstance(second, _Dim):
        return False
    if second == -1:
        return first_is_batch
    return per_obs is not None and second == per_obs and (first_is_batch or first == -1)


def _fold(model, where: str):
    """The graph with what exporters add around a policy's ops folded away (see the module
    docstring): returns (nodes [(original index, node)] left to map, constants as numpy, the
    tensor the graph's output is). Nothing here runs the model: shape ops are evaluated in numpy
    only when all their inputs are constants or static shapes, and every op that is neither
    mapped nor folded is named in one error, so only listed ops ever reach onnxruntime."""
    import onnx
    from onnx import numpy_helper
    g = model.graph
    shapes, types = _shapes_and_types(model)
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    alias: dict[str, str] = {}            # a folded no-op's output -> the tensor it passes on
    nodes, bad = [], []
    live = _live(g, shapes)
    for i, n in enumerate(g.node):
        if i not in live:
            continue
        ins = [alias.get(x, x) for x in n.input]
        op = n.op_type
        if op not in SUPPORTED and op not in FOLDED:
            bad.append(f"#{i} {op}")
            continue
        if op == "Constant":
            value = _constant_attr(n)
            if value is None:
                bad.append(f"#{i} Constant (not a tensor)")
            else:
                consts[n.output[0]] = value
            continue
        known = all(not x or x in consts for x in ins)
        if op in FOLDED or op == "Identity" or (op == "Reshape" and known):
            value = _evaluate(n, ins, consts, shapes) if known or op == "Shape" else None
            if value is not None:
                consts[n.output[0]] = _array(value)
            elif op == "Expand" and ins[1] in consts and \
                    _same_shape(consts[ins[1]], shapes.get(n.input[0])):
                alias[n.output[0]] = ins[0]        # a no-op: Expand to the shape it has
            elif op in ("Identity", "Cast") and not known:
                to = {a.name: a.i for a in n.attribute}.get("to")
                src = types.get(n.input[0])
                if op == "Identity" or (src and to == src and
                                        to in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE,
                                               onnx.TensorProto.FLOAT16)):
                    alias[n.output[0]] = ins[0]    # a no-op: Identity, Cast to the same float
                else:
                    name = onnx.TensorProto.DataType.Name
                    bad.append(f"#{i} Cast ({name(src) if src else 'unknown type'} to "
                               f"{name(to)})")
            else:
                bad.append(f"#{i} {op} (" + ("does not fold" if known or op == "Shape" else
                                             "of a tensor that is not constant") + ")")
            continue
        if op == "Reshape":
            want = consts.get(ins[1]) if len(ins) > 1 else None
            want = None if want is None else want.reshape(-1).tolist()   # ints, not np.int64s
            if want is None or not _flattens(want, shapes.get(n.input[0])):
                to = "a shape that is not constant" if want is None else want
                bad.append(f"#{i} Reshape (to {to}: not a flatten)")
                continue
            flat = onnx.helper.make_node("Flatten", [ins[0]], list(n.output), name=n.name,
                                         axis=1)
            nodes.append((i, flat))
            continue
        if ins != list(n.input):
            renamed = onnx.NodeProto()
            renamed.CopyFrom(n)
            del renamed.input[:]
            renamed.input.extend(ins)
            n = renamed
        nodes.append((i, n))
    if bad:
        raise PolicyImportError(f"{where}: unsupported ONNX ops: {', '.join(bad)}; supported: "
                           f"{', '.join(SUPPORTED)}, and folded when constant: "
                           f"{', '.join(FOLDED)}")
    out = g.output[0].name
    return nodes, consts, alias.get(out, out), sorted(live)


def _live(g, shapes) -> set[int]:
    """The indices of the nodes the graph's output depends on. A Shape of a tensor whose shape
    is static does not depend on that tensor's values: what only feeds such Shapes (SB3's gSDE
    distribution computes a std that only broadcasts the mean) is dead, is not mapped, and is
    not given to onnxruntime."""
    producer = {o: i for i, n in enumerate(g.node) for o in n.output}
    live, todo = set(), [g.output[0].name]
    while todo:
        i = producer.get(todo.pop())
        if i is None or i in live:
            continue
        live.add(i)
        n = g.node[i]
        if n.op_type == "Shape" and _known(shapes.get(n.input[0])):
            continue
        todo.extend(x for x in n.input if x)
    return live


def _checked_model(model, live, consts):
    """The model with only its live nodes (see _live), for onnxruntime. A Shape whose tensor is
    dead is rebuilt from the observation input's shape (its value is known: ints and dims the
    input names), so that nothing outside the checked nodes is given to onnxruntime."""
    import onnx
    from onnx import helper, numpy_helper
    g = model.graph
    made = {o for i in live for o in g.node[i].output} | {t.name for t in g.initializer} | \
        {x.name for x in g.input}
    obs = [x for x in g.input if x.name not in {t.name for t in g.initializer}][0]
    obs_dims = [d.dim_param or d.dim_value for d in obs.type.tensor_type.shape.dim]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    for i in live:
        n = g.node[i]
        if n.op_type != "Shape" or n.input[0] in made:
            out.graph.node.append(n)
            continue
        parts = []
        for k, d in enumerate(consts[n.output[0]].reshape(-1)):
            name = f"{n.output[0]}__dim{k}"
            if isinstance(d, _Dim):      # the input's dimension of that name
                out.graph.initializer.append(numpy_helper.from_array(
                    np.array([obs_dims.index(d.name)], np.int64), name + "_axis"))
                out.graph.node.extend([
                    helper.make_node("Shape", [obs.name], [name + "_all"]),
                    helper.make_node("Gather", [name + "_all", name + "_axis"], [name])])
            else:
                out.graph.initializer.append(numpy_helper.from_array(
                    np.array([int(d)], np.int64), name))
            parts.append(name)
        out.graph.node.append(helper.make_node("Concat", parts, list(n.output), axis=0))
    used = {x for n in out.graph.node for x in n.input}
    kept = [t for t in out.graph.initializer if t.name in used]   # the dead nodes' weights go
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    return out


def _same_shape(target, shape) -> bool:
    """Whether an Expand to `target` leaves a tensor of static `shape` as it is."""
    target = list(np.asarray(target).reshape(-1))
    if not _known(shape) or len(target) > len(shape):
        return False
    return all(t == 1 or t == d for t, d in zip(target[::-1], shape[::-1]))


def _modules():
    try:
        import onnx
        import onnxruntime
    except ImportError:
        raise PolicyImportError("ONNX import needs the onnx and onnxruntime packages: "
                           "pip install 'quarl-edge[onnx]' (or `make setup`)") from None
    return onnx, onnxruntime


class _Layer:
    """A Dense layer being assembled: kernel [in, out], bias, activation."""

    def __init__(self, kernel, bias):
        self.kernel, self.bias, self.act = kernel.astype(np.float64), bias.astype(np.float64), \
            "linear"


def _graph_to_layers(model, where: str) -> tuple[list[_Layer], int, str]:
    """The nodes as a chain of Dense layers (see the module docstring); returns (layers, input
    size, the graph's output name, the CNN front or None, the model onnxruntime may run)."""
    g = model.graph
    nodes, raw, out_name, live = _fold(model, where)
    consts = {}
    for name, value in raw.items():   # the numeric constants, as the mapping uses them
        if value.dtype != object:
            consts[name] = value.astype(np.float64)
    inputs = [i for i in g.input if i.name not in consts]
    if len(inputs) != 1:
        raise PolicyImportError(f"{where}: {len(inputs)} inputs ({', '.join(i.name for i in inputs)});"
                           " one observation input is supported")
    dims = [d.dim_value for d in inputs[0].type.tensor_type.shape.dim]
    size = int(np.prod([d for d in dims[1:] if d])) if len(dims) > 1 else 0
    uses: dict[str, int] = {}
    for _, n in nodes:
        for x in n.input:
            uses[x] = uses.get(x, 0) + 1
    uses[out_name] = uses.get(out_name, 0) + 1

    cur, layers = inputs[0].name, []     # the tensor the chain has reached; its Dense layers
    last_output_of: dict[str, _Layer] = {}
    front = None
    if any(n.op_type == "Conv" for _, n in nodes):
        front, nodes, cur, size = _conv_front(nodes, consts, cur, dims, where)

    def fresh(n_in):
        layer = _Layer(np.eye(n_in), np.zeros(n_in))
        layers.append(layer)
        return layer

    width = size
    for i, n in nodes:
        ins = list(n.input)
        data = [x for x in ins if x and x not in consts]
        if len(data) != 1 or data[0] != cur:
            raise PolicyImportError(f"{where}: node #{i} {n.op_type} does not continue one chain "
                               "(branches and skip connections are not supported)")
        attrs = {a.name: a for a in n.attribute}
        layer = last_output_of.get(cur)
        foldable = layer is not None and uses.get(cur, 0) == 1
        if n.op_type in ("Gemm", "MatMul"):
            w = consts.get(ins[1])
            if w is None or w.ndim != 2:
                raise PolicyImportError(f"{where}: node #{i} {n.op_type}: the weights must be a "
                                   "constant matrix")
            if n.op_type == "Gemm":
                if attrs.get("transA") and attrs["transA"].i:
                    raise PolicyImportError(f"{where}: node #{i} Gemm with transA is not supported")
                if attrs.get("transB") and attrs["transB"].i:
                    w = w.T
                w = w * (attrs["alpha"].f if "alpha" in attrs else 1.0)
                c = consts.get(ins[2]) if len(ins) > 2 and ins[2] else None
                b = np.zeros(w.shape[1]) if c is None else \
                    np.broadcast_to(c * (attrs["beta"].f if "beta" in attrs else 1.0),
                                    (w.shape[1],)).astype(np.float64)
            else:
                b = np.zeros(w.shape[1])
            if width and w.shape[0] != width:
                raise PolicyImportError(f"{where}: node #{i} {n.op_type} takes {w.shape[0]} values, "
                                   f"gets {width}")
            new = _Layer(w, b)
            layers.append(new)
            width = w.shape[1]
        elif n.op_type in ("Add", "Sub", "Mul", "Div"):
            c = np.broadcast_to(consts[[x for x in ins if x in consts][0]], (width,)) \
                .astype(np.float64)
            const_first = ins[0] in consts
            new = layer if foldable and layer.act == "linear" else fresh(width)
            if n.op_type == "Add":
                new.bias = new.bias + c
            elif n.op_type == "Sub":
                if const_first:     # c - x
                    new.kernel, new.bias = -new.kernel, c - new.bias
                else:
                    new.bias = new.bias - c
            elif n.op_type == "Mul":
                new.kernel, new.bias = new.kernel * c, new.bias * c
            else:
                if const_first:
                    raise PolicyImportError(f"{where}: node #{i} Div of a constant by the input is "
                                       "not supported")
                new.kernel, new.bias = new.kernel / c, new.bias / c
        elif n.op_type in ACTIVATIONS:
            new = layer if foldable and layer.act == "linear" else fresh(width)
            if n.op_type == "Softmax":
                axis = attrs["axis"].i if "axis" in attrs else -1
                if axis not in (-1, 1):
                    raise PolicyImportError(f"{where}: node #{i} Softmax over axis {axis}")
            new.act = ACTIVATIONS[n.op_type]
        elif n.op_type == "Clip":
            # clip(x, lo, hi) = lo + (hi - lo) / 6 * relu6(6 (x - lo) / (hi - lo)): the scale
            # into the Dense layer before it, relu6 its activation, then a diagonal layer
            bounds = [consts.get(x) for x in ins[1:3]] if len(ins) > 1 else \
                [np.array(attrs["min"].f if "min" in attrs else -np.inf),
                 np.array(attrs["max"].f if "max" in attrs else np.inf)]
            if len(bounds) < 2 or any(b is None or b.size != 1 for b in bounds) or \
                    not np.all(np.isfinite(bounds)) or float(bounds[1]) <= float(bounds[0]):
                raise PolicyImportError(f"{where}: node #{i} Clip: only finite constant bounds "
                                   "are supported")
            lo, hi = float(bounds[0]), float(bounds[1])
            scaled = layer if foldable and layer.act == "linear" else fresh(width)
            s_ = 6.0 / (hi - lo)
            scaled.kernel, scaled.bias = scaled.kernel * s_, (scaled.bias - lo) * s_
            scaled.act = "relu6"
            new = fresh(width)
            new.kernel, new.bias = new.kernel / s_, new.bias + lo
        elif n.op_type in ("Flatten", "Identity", "Dropout"):
            new = layer
        else:
            raise PolicyImportError(f"{where}: node #{i} {n.op_type} after the dense layers began "
                               "(convolutions, pooling and transposes come first)")
        cur = n.output[0]
        if new is not None:
            last_output_of[cur] = new
    if cur != out_name:
        raise PolicyImportError(f"{where}: the chain ends at {cur}, not at the output {out_name}")
    if not layers:
        raise PolicyImportError(f"{where}: no layer with weights")
    if front is not None:    # the first Dense reads torch's [C, H, W] flatten order; ours is HWC
        c, h, w_ = front["chw"]
        k = layers[0].kernel
        layers[0].kernel = k.reshape(c, h, w_, -1).transpose(1, 2, 0, 3).reshape(c * h * w_, -1)
    return layers, size or layers[0].kernel.shape[0], g.output[0].name, front, \
        _checked_model(model, live, raw)


def _ints(attrs, name, default):
    return list(attrs[name].ints) if name in attrs else default


def _conv_front(nodes, consts, cur, dims, where):
    """The convolutional start of a CNN policy (see the module docstring): returns (front, the
    nodes left for the dense chain, the tensor they start from, its size). front: "hwc_input"
    (the graph takes NHWC images and transposes them itself), "stages" [("conv", weight
    [O, I, kh, kw], bias, strides, pads [t, l, b, r], activation) | ("maxpool", kernel, strides)]
    and "chw" the shape flattened."""
    if len(dims) != 4:
        raise PolicyImportError(f"{where}: a CNN takes 4-D image inputs, this one {dims}")
    hwc_input, scale, stages = False, 1.0, []
    c, h, w = dims[1:]
    k = 0
    while k < len(nodes):
        i, n = nodes[k]
        attrs = {a.name: a for a in n.attribute}
        data = [x for x in n.input if x and x not in consts]
        if len(data) != 1 or data[0] != cur:
            raise PolicyImportError(f"{where}: node #{i} {n.op_type} does not continue one chain")
        op = n.op_type
        if op == "Transpose" and not stages and not hwc_input and \
                _ints(attrs, "perm", []) == [0, 3, 1, 2]:
            hwc_input, (h, w, c) = True, (c, h, w)   # dims were N, H, W, C
        elif op in ("Mul", "Div") and not stages:
            const = consts[[x for x in n.input if x in consts][0]]
            if const.size != 1 or (op == "Div" and n.input[0] in consts):
                raise PolicyImportError(f"{where}: node #{i} {op} of the images by a non-scalar")
            scale = scale * float(const.reshape(-1)[0]) if op == "Mul" else \
                scale / float(const.reshape(-1)[0])
        elif op == "Conv":
            wt = consts.get(n.input[1])
            if wt is None or wt.ndim != 4 or wt.shape[1] != c:
                raise PolicyImportError(f"{where}: node #{i} Conv: constant weights for {c} channels "
                                   "are needed")
            if attrs.get("group") and attrs["group"].i != 1 or \
                    any(d != 1 for d in _ints(attrs, "dilations", [1, 1])):
                raise PolicyImportError(f"{where}: node #{i} Conv with groups or dilation is not "
                                   "supported")
            b = consts.get(n.input[2]) if len(n.input) > 2 and n.input[2] else None
            b = np.zeros(wt.shape[0]) if b is None else b
            strides = _ints(attrs, "strides", [1, 1])
            t, left, bottom, right = _ints(attrs, "pads", [0, 0, 0, 0])
            if not stages:
                wt = wt * scale
            kh, kw = wt.shape[2:]
            stages.append(["conv", wt, b, strides, [t, left, bottom, right], "linear"])
            c = wt.shape[0]
            h = (h + t + bottom - kh) // strides[0] + 1
            w = (w + left + right - kw) // strides[1] + 1
        elif op == "Relu" and stages and stages[-1][0] == "conv" and stages[-1][5] == "linear":
            stages[-1][5] = "relu"
        elif op == "MaxPool" and stages:
            ks, st = _ints(attrs, "kernel_shape", [1, 1]), _ints(attrs, "strides", [1, 1])
            if any(_ints(attrs, "pads", [0, 0, 0, 0])):
                raise PolicyImportError(f"{where}: node #{i} MaxPool with padding is not supported")
            stages.append(["maxpool", ks, st])
            h, w = (h - ks[0]) // st[0] + 1, (w - ks[1]) // st[1] + 1
        elif op in ("Flatten", "Reshape") and stages:
            cur = n.output[0]
            return ({"hwc_input": hwc_input, "stages": stages, "chw": (c, h, w),
                     "input_chw": dims[1:] if not hwc_input else (dims[3], dims[1], dims[2])},
                    nodes[k + 1:], cur, c * h * w)
        else:
            raise PolicyImportError(f"{where}: node #{i} {op} is not supported in a CNN's front "
                               "(Transpose at the input, scalar Mul/Div, Conv, Relu, MaxPool, "
                               "then Flatten)")
        cur = n.output[0]
        k += 1
    raise PolicyImportError(f"{where}: a CNN without a Flatten after its convolutions")


def _keras_cnn(obs_shape, front, mlp, name: str):
    """The front's convolutions on the env's images, then the dense layers, as Keras."""
    import tensorflow as tf
    inp = tf.keras.Input(shape=tuple(obs_shape), dtype=tf.float32, name="observation")
    x = inp if front["hwc_input"] else tf.keras.layers.Permute((2, 3, 1))(inp)   # CHW -> HWC
    for stage in front["stages"]:
        if stage[0] == "conv":
            _, wt, b, strides, (t, left, bottom, right), act = stage
            if t or left or bottom or right:
                x = tf.keras.layers.ZeroPadding2D(((t, bottom), (left, right)))(x)
            conv = tf.keras.layers.Conv2D(wt.shape[0], wt.shape[2:], strides=strides,
                                          padding="valid", activation=act)
            x = conv(x)
            conv.set_weights([wt.transpose(2, 3, 1, 0).astype(np.float32),
                              np.asarray(b, np.float32)])
        else:
            x = tf.keras.layers.MaxPooling2D(stage[1], stage[2], padding="valid")(x)
    x = tf.keras.layers.Flatten()(x)
    for k, b, act in mlp:
        dense = tf.keras.layers.Dense(k.shape[1], activation=act)
        x = dense(x)
        dense.set_weights([k, b])
    return tf.keras.Model(inp, x, name=name)


def load(path: Path, env_id: str | None) -> Imported:
    onnx, ort = _modules()
    from ..nets import keras_mlp
    path = Path(path)
    if env_id is None:
        raise PolicyImportError(f"{path}: an ONNX model does not say its environment: give --env ID")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as e:  # onnx raises DecodeError, ValidationError, ...: all "not valid"
        raise PolicyImportError(f"{path}: not a valid ONNX model ({type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''})") from None
    out_type = model.graph.output[0].type.tensor_type.elem_type
    if out_type != onnx.TensorProto.FLOAT:
        raise PolicyImportError(f"{path}: the output {model.graph.output[0].name} is "
                           f"{onnx.TensorProto.DataType.Name(out_type)}, not FLOAT (an ArgMax in "
                           "the graph?): export the network before the argmax")
    layers, n_in, out_name, front, checked = _graph_to_layers(model, str(path))
    env_act = env_action(env_id)
    from ..rl.envs import make_gym
    env = make_gym(env_id)
    obs_shape = tuple(env.observation_space.shape)
    env.close()
    if front is not None:
        c, h, w = front["input_chw"]
        want = (h, w, c) if front["hwc_input"] else (c, h, w)
        if obs_shape != want:
            check_spaces(env_id, want, env_act, str(path))   # raises, naming both shapes
    elif int(np.prod(obs_shape)) != n_in:
        check_spaces(env_id, (n_in,), env_act, str(path))   # raises, naming both shapes
    check_outputs(env_id, int(layers[-1].kernel.shape[1]), str(path))
    mlp = [(layer.kernel.astype(np.float32), layer.bias.astype(np.float32), layer.act)
           for layer in layers]
    # onnxruntime gets the nodes the output depends on, all of them checked above (the file's
    # dead nodes, e.g. gSDE's unused std, may hold ops we do not list)
    session = ort.InferenceSession(checked.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    in_name = session.get_inputs()[0].name
    in_shape = session.get_inputs()[0].shape

    def reference(obs):
        x = np.asarray(obs, np.float32).reshape(len(obs), *[d if isinstance(d, int) else -1
                                                            for d in in_shape[1:]])
        if isinstance(in_shape[0], int) and in_shape[0] == 1:   # a fixed batch of one
            return np.concatenate([session.run([out_name], {in_name: r[None]})[0] for r in x])
        return session.run([out_name], {in_name: x})[0].reshape(len(obs), -1)

    keras_model = keras_mlp(obs_shape, mlp, name="onnx_policy") if front is None else \
        _keras_cnn(obs_shape, front, mlp, name="onnx_cnn_policy")
    return Imported(model=keras_model, env_id=env_id,
                    algo="onnx",
                    source={"kind": "onnx", "file": path.name, "sha256": sha256(path),
                            "opset": max((o.version for o in model.opset_import), default=None),
                            "producer": f"{model.producer_name} {model.producer_version}".strip(),
                            "output": out_name},
                    reference=reference, reference_name=f"onnxruntime {ort.__version__}",
                    network={"type": "mlp" if front is None else "cnn",
                             "hidden": [int(x.kernel.shape[1]) for x in layers[:-1]],
                             "activations": [x.act for x in layers],
                             **({} if front is None else {"convolutions": [
                                 [int(d) for d in st[1].shape] + list(st[3])
                                 for st in front["stages"] if st[0] == "conv"]})})
