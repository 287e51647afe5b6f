"""What exporters put around a policy's ops, folded away before the mapping (onnx_policy.py's
docstring lists it): no-op Casts, Identity and Constant nodes, and constant shape arithmetic
evaluated in numpy from the constants and the static shapes; a Reshape to [batch, -1] becomes a
Flatten, and the nodes the output does not depend on are dead (not mapped, not given to
onnxruntime). Every op neither mapped nor folded is named in one error."""
from __future__ import annotations

import numpy as np

# onnx is optional (quarl-edge[onnx]): onnx_policy.load imports this module only after
# _modules() found it, or said how to install it
import onnx
from onnx import helper, numpy_helper

from .bounded import text
from .common import PolicyImportError
from .onnx_graph import check_fold_size
from .onnx_shapes import Dim, all_known, shapes_and_types

SUPPORTED = ("Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Relu", "Tanh", "Sigmoid", "Softmax",
             "Clip", "Flatten", "Identity", "Dropout", "Conv", "MaxPool", "Transpose", "Reshape")
# folded before the mapping (see fold); a node of these that does not fold is refused by name
FOLDED = ("Constant", "Cast", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat",
          "ConstantOfShape", "Expand")


def _constant_attr(node):
    """A Constant node's value as numpy, or None for the kinds a policy has no use for."""
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
    holding the Dim names (numpy's indexing returns bare elements of an object array)."""
    value = np.asarray(value)
    if value.dtype == object and not any(isinstance(d, Dim) for d in value.reshape(-1)):
        value = value.astype(np.int64)
    return value


def _evaluate(node, ins, consts, shapes):
    """The value of a shape-arithmetic node whose inputs are all known (see fold); None when
    this node cannot be evaluated here."""
    op, attrs = node.op_type, {a.name: a for a in node.attribute}
    vals = [consts.get(x) if x else None for x in ins]
    if op == "Shape":
        shape = list(np.shape(vals[0])) if ins[0] in consts else shapes.get(ins[0])
        if not all_known(shape):
            return None
        start = attrs["start"].i if "start" in attrs else 0
        end = attrs["end"].i if "end" in attrs else len(shape)
        return np.array(shape[start:end], dtype=object if any(isinstance(d, Dim) for d in
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


def _initializers(g, where: str) -> dict:
    """The graph's initializers as numpy (each within MAX_WEIGHTS_BYTES by its declared
    shape, the file's size having bounded the data)."""
    consts = {}
    for t in g.initializer:
        try:
            consts[t.name] = numpy_helper.to_array(t)
        except (ValueError, TypeError) as e:   # dims that the data does not fill, ...
            raise PolicyImportError(f"{where}: initializer {text(t.name)} is malformed "
                                    f"({type(e).__name__})") from None
    return consts


def _fold(i: int, node, ins, consts, shapes, where: str):
    """_evaluate, after check_fold_size; None where the inputs do not fit the op (refused
    then as a node that does not fold)."""
    attrs = {a.name: a for a in node.attribute}
    vals = [consts.get(x) if x else None for x in ins]
    try:
        if node.op_type in ("ConstantOfShape", "Expand", "Concat", "Gather") and \
                all(v is not None for v in vals):
            check_fold_size(node.op_type, vals, attrs, i, where)
        return _evaluate(node, ins, consts, shapes)
    # numpy's AxisError is a ValueError and an IndexError (and numpy 2 no longer has
    # np.AxisError: naming it here turned every refusal into a traceback on numpy 2).
    except (ValueError, IndexError, TypeError):
        return None


def _flattens(want, shape) -> bool:
    """Whether a Reshape to `want` (the folded shape) of a tensor of static `shape` is a
    Flatten to [batch, values per observation]."""
    if shape is None or len(want) != 2 or len(shape) < 1:
        return False
    batch, rest = shape[0], shape[1:]
    per_obs = None if any(d is None or isinstance(d, Dim) or d == 0 for d in rest) else \
        int(np.prod(rest, dtype=np.int64))
    first, second = want
    if isinstance(first, Dim):
        first_is_batch = first == batch
    else:   # 0 copies the input's dimension; a static batch may be written out
        first_is_batch = first == 0 or (isinstance(batch, int) and batch > 0 and first == batch)
    if isinstance(second, Dim):
        return False
    if second == -1:
        return first_is_batch
    return per_obs is not None and second == per_obs and (first_is_batch or first == -1)


def fold(model, where: str):
    """The graph with what exporters add around a policy's ops folded away (see the module
    docstring): returns (nodes [(original index, node)] left to map, constants as numpy, the
    tensor the graph's output is). Nothing here runs the model: shape ops are evaluated in numpy
    only when all their inputs are constants or static shapes, and every op that is neither
    mapped nor folded is named in one error, so only listed ops ever reach onnxruntime."""
    g = model.graph
    shapes, types = shapes_and_types(model)
    consts = _initializers(g, where)
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
            value = _fold(i, n, ins, consts, shapes, where) if known or op == "Shape" else None
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
        if n.op_type == "Shape" and all_known(shapes.get(n.input[0])):
            continue
        todo.extend(x for x in n.input if x)
    return live


def checked_model(model, live, consts):
    """The model with only its live nodes (see _live), for onnxruntime. A Shape whose tensor is
    dead is rebuilt from the observation input's shape (its value is known: ints and dims the
    input names), so that nothing outside the checked nodes is given to onnxruntime."""
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
            if isinstance(d, Dim):      # the input's dimension of that name
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
    if not all_known(shape) or len(target) > len(shape):
        return False
    return all(t == 1 or t == d for t, d in zip(target[::-1], shape[::-1]))
