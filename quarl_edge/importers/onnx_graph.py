"""What an ONNX file may ask of the importer, checked before anything of it is evaluated
(bounded.py has the limits): every node's op in the standard domain (an op of another domain,
com.evil's Relu, is not ONNX's Relu), at most MAX_GRAPH_NODES nodes, external data only from
files inside the model's folder (after symlinks) and within MAX_WEIGHTS_BYTES, checked before
onnx reads any of it; and each folded node's output size before numpy makes it."""
from __future__ import annotations

from pathlib import Path

import numpy as np

# onnx is optional (quarl-edge[onnx]): onnx_policy.load imports this module only after
# _modules() found it, or said how to install it
import onnx
from onnx import external_data_helper

from .bounded import MAX_FOLD_ELEMENTS, MAX_GRAPH_NODES, MAX_WEIGHTS_BYTES, text
from .common import PolicyImportError

STANDARD_DOMAINS = ("", "ai.onnx")


def _graphs(model):
    """The model's graph and every subgraph in its nodes' attributes (an If's branches, a
    Loop's body), without recursion."""
    todo = [model.graph]
    while todo:
        g = todo.pop()
        yield g
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    todo.append(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    todo.extend(a.graphs)


def _tensors(model):
    """Every TensorProto of the model: initializers and tensors in node attributes."""
    for g in _graphs(model):
        yield from g.initializer
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    yield a.t
                elif a.type == onnx.AttributeProto.TENSORS:
                    yield from a.tensors


def check_domains(model, where: str) -> None:
    """Refuse a graph of more than MAX_GRAPH_NODES nodes, or with a node whose op is of another
    domain than ONNX's own (or a model's local functions), naming them."""
    count = sum(len(g.node) for g in _graphs(model))
    if count > MAX_GRAPH_NODES:
        raise PolicyImportError(f"{where}: refused: a graph of {count:,} nodes (the limit is "
                                f"{MAX_GRAPH_NODES:,})")
    foreign = [f"#{i} {text(n.domain, 40)}.{text(n.op_type, 40)}"
               for i, n in enumerate(model.graph.node) if n.domain not in STANDARD_DOMAINS]
    foreign += [f"{text(n.domain, 40)}.{text(n.op_type, 40)} (in a subgraph)"
                for g in list(_graphs(model))[1:] for n in g.node
                if n.domain not in STANDARD_DOMAINS]
    if model.functions:
        names = ", ".join(text(f.name, 40) for f in model.functions[:5])
        foreign.append(f"the local functions {names}")
    if foreign:
        raise PolicyImportError(f"{where}: refused: ops outside ONNX's own domain: "
                                f"{', '.join(foreign[:10])}{' ...' if len(foreign) > 10 else ''}")


def load_external_data(model, path: Path) -> None:
    """Read the tensors a model keeps in files beside it, after checking that each file is a
    regular file inside the model's folder once symlinks are resolved (an absolute path,
    ../, or a symlink out is refused before anything reads it), and that they sum to within
    MAX_WEIGHTS_BYTES."""
    external = [t for t in _tensors(model) if external_data_helper.uses_external_data(t)]
    if not external:
        return
    base = Path(path).parent
    folder = base.resolve()
    total = 0
    for t in external:
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        try:
            target = (base / location).resolve()
        except (ValueError, OSError, RuntimeError):   # a NUL in it, a symlink loop
            target = folder
        if not location or folder not in target.parents or not target.is_file():
            raise PolicyImportError(f"{path}: refused: tensor {text(t.name)}'s external data "
                                    f"{text(location)} is not a file inside the model's folder "
                                    f"{folder}")
        try:
            length = int(info["length"]) if "length" in info else target.stat().st_size
        except ValueError:
            length = -1
        if length < 0:
            raise PolicyImportError(f"{path}: tensor {text(t.name)}: a malformed external "
                                    "data length")
        total += length
        if total > MAX_WEIGHTS_BYTES:
            raise PolicyImportError(f"{path}: refused: external data of more than "
                                    f"{MAX_WEIGHTS_BYTES:,} bytes")
    try:
        external_data_helper.load_external_data_for_model(model, str(base))
    except (OSError, ValueError) as e:
        raise PolicyImportError(f"{path}: its external data cannot be read "
                                f"({type(e).__name__})") from None


def fold_size(op: str, vals: list, attrs: dict) -> int:
    """How many elements folding this node makes (0 for the ops that never make more than
    their inputs hold), computed from the inputs' shapes alone; ValueError when the shapes do
    not fit the op."""
    if op == "ConstantOfShape" or op == "Expand":
        dims = [int(d) for d in np.asarray(vals[-1]).reshape(-1)]
        if any(d < 0 for d in dims) or len(dims) > 32:
            raise ValueError("a negative dimension")
        shape = dims if op == "ConstantOfShape" else np.broadcast_shapes(np.shape(vals[0]),
                                                                         tuple(dims))
        return int(np.prod(shape, dtype=object))
    if op == "Concat":
        return sum(int(np.size(v)) for v in vals)
    if op == "Gather":
        data, axis = np.asarray(vals[0]), attrs["axis"].i if "axis" in attrs else 0
        rest = int(np.size(data)) // max(int(data.shape[axis % max(data.ndim, 1)]), 1) \
            if data.ndim else 1
        return int(np.size(vals[1])) * rest
    return 0


def check_fold_size(op: str, vals: list, attrs: dict, i: int, where: str) -> None:
    """Refuse (before numpy allocates it) a folded node that would make more than
    MAX_FOLD_ELEMENTS elements."""
    size = fold_size(op, vals, attrs)
    if size > MAX_FOLD_ELEMENTS:
        raise PolicyImportError(f"{where}: refused: node #{i} {op} would make a tensor of "
                                f"{size:,} elements (the limit is {MAX_FOLD_ELEMENTS:,})")
