"""An ONNX policy's folded nodes (onnx_fold.py) mapped, node by node, onto a chain of Dense
layers, after the convolutional front of a small CNN policy (see onnx_policy.py's docstring
for the ops and how each maps)."""
from __future__ import annotations

import numpy as np

from .bounded import MAX_LAYERS, MAX_WEIGHTS_BYTES, check_finite
from .common import PolicyImportError
from .onnx_fold import checked_model, fold

ACTIVATIONS = {"Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid", "Softmax": "softmax"}


class Layer:
    """A Dense layer being assembled: kernel [in, out], bias, activation."""

    def __init__(self, kernel, bias):
        self.kernel, self.bias, self.act = kernel.astype(np.float64), bias.astype(np.float64), \
            "linear"


def graph_to_layers(model, where: str) -> tuple[list[Layer], int, str, dict | None, object]:
    """The nodes as a chain of Dense layers (see onnx_policy.py's docstring); returns (layers,
    input size, the graph's output name, the CNN front or None, the model onnxruntime may
    run)."""
    g = model.graph
    nodes, raw, out_name, live = fold(model, where)
    for _, n in nodes:          # the weights the network is made of: finite
        for x in n.input:
            if x in raw and raw[x].dtype != object:
                check_finite(x, raw[x], where, PolicyImportError)
    consts = {}
    for name, value in raw.items():   # the numeric constants, as the mapping uses them
        if value.dtype != object:
            consts[name] = value.astype(np.float64)
    cur, dims, size = _observation_input(g, consts, where)
    uses = _uses(nodes, out_name)
    front = None
    if any(n.op_type == "Conv" for _, n in nodes):
        front, nodes, cur, size = _conv_front(nodes, consts, cur, dims, where)
    chain = _Chain(size, uses, where)
    for i, n in nodes:
        cur = chain.map(i, n, cur, consts, where)
    if cur != out_name:
        raise PolicyImportError(f"{where}: the chain ends at {cur}, not at the output {out_name}")
    layers = chain.layers
    if not layers:
        raise PolicyImportError(f"{where}: no layer with weights")
    if front is not None:    # the first Dense reads torch's [C, H, W] flatten order; ours is HWC
        c, h, w_ = front["chw"]
        k = layers[0].kernel
        layers[0].kernel = k.reshape(c, h, w_, -1).transpose(1, 2, 0, 3).reshape(c * h * w_, -1)
    return layers, size or layers[0].kernel.shape[0], g.output[0].name, front, \
        checked_model(model, live, raw)


def _observation_input(g, consts: dict, where: str):
    """The graph's one input that is not a constant: its name, its dimensions (0 where the file
    names one, as the batch) and its values per observation (0 when it has no dimension past
    the batch)."""
    inputs = [i for i in g.input if i.name not in consts]
    if len(inputs) != 1:
        raise PolicyImportError(f"{where}: {len(inputs)} inputs ({', '.join(i.name for i in inputs)});"
                           " one observation input is supported")
    dims = [d.dim_value for d in inputs[0].type.tensor_type.shape.dim]
    size = int(np.prod([d for d in dims[1:] if d])) if len(dims) > 1 else 0
    return inputs[0].name, dims, size


def _uses(nodes, out_name: str) -> dict[str, int]:
    """How many nodes (and the graph's output) read each tensor: a Dense layer takes an
    elementwise op or an activation into itself only when nothing else reads its output."""
    uses: dict[str, int] = {}
    for _, n in nodes:
        for x in n.input:
            uses[x] = uses.get(x, 0) + 1
    uses[out_name] = uses.get(out_name, 0) + 1
    return uses


class _Chain:
    """The Dense layers of the one chain of nodes, built node by node: `width` values flow
    along it, and `last_output_of` says which layer last wrote a tensor (the layer an op after
    it may fold into)."""

    def __init__(self, width: int, uses: dict[str, int], where: str):
        self.layers: list[Layer] = []
        self.width, self.uses, self.where = width, uses, where
        self.last_output_of: dict[str, Layer] = {}

    def fresh(self) -> Layer:
        """A new identity layer of the chain's width, appended."""
        self.count()
        if self.width * self.width * 8 > MAX_WEIGHTS_BYTES:
            raise PolicyImportError(f"{self.where}: refused: a layer of {self.width:,} x "
                                    f"{self.width:,} "
                                    "weights (past the limit on a policy's weights)")
        layer = Layer(np.eye(self.width), np.zeros(self.width))
        self.layers.append(layer)
        return layer

    def count(self) -> None:
        """Refuse a chain of more than MAX_LAYERS Dense layers before it grows one more."""
        if len(self.layers) >= MAX_LAYERS:
            raise PolicyImportError(f"{self.where}: refused: a network of more than "
                                    f"{MAX_LAYERS} Dense layers")

    def linear_layer(self, cur: str) -> Layer:
        """The linear layer that wrote `cur` when only this node reads it (an op folds into
        it), else a fresh one."""
        layer = self.last_output_of.get(cur)
        foldable = layer is not None and self.uses.get(cur, 0) == 1
        return layer if foldable and layer.act == "linear" else self.fresh()

    def map(self, i: int, n, cur: str, consts: dict, where: str) -> str:
        """Node #i onto the chain; returns the tensor the chain has reached."""
        ins = list(n.input)
        data = [x for x in ins if x and x not in consts]
        if len(data) != 1 or data[0] != cur:
            raise PolicyImportError(f"{where}: node #{i} {n.op_type} does not continue one chain "
                               "(branches and skip connections are not supported)")
        attrs = {a.name: a for a in n.attribute}
        if n.op_type in ("Gemm", "MatMul"):
            new = self._dense(i, n, ins, attrs, consts, where)
        elif n.op_type in ("Add", "Sub", "Mul", "Div"):
            new = self._elementwise(i, n, ins, cur, consts, where)
        elif n.op_type in ACTIVATIONS:
            new = self.linear_layer(cur)
            if n.op_type == "Softmax":
                axis = attrs["axis"].i if "axis" in attrs else -1
                if axis not in (-1, 1):
                    raise PolicyImportError(f"{where}: node #{i} Softmax over axis {axis}")
            new.act = ACTIVATIONS[n.op_type]
        elif n.op_type == "Clip":
            new = self._clip(i, ins, attrs, cur, consts, where)
        elif n.op_type in ("Flatten", "Identity", "Dropout"):
            new = self.last_output_of.get(cur)
        else:
            raise PolicyImportError(f"{where}: node #{i} {n.op_type} after the dense layers began "
                               "(convolutions, pooling and transposes come first)")
        cur = n.output[0]
        if new is not None:
            self.last_output_of[cur] = new
        return cur

    def _dense(self, i: int, n, ins: list, attrs: dict, consts: dict, where: str) -> Layer:
        """Gemm or MatMul by a constant matrix: a new Dense layer (alpha, beta, transB
        folded)."""
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
        if self.width and w.shape[0] != self.width:
            raise PolicyImportError(f"{where}: node #{i} {n.op_type} takes {w.shape[0]} values, "
                               f"gets {self.width}")
        self.count()
        new = Layer(w, b)
        self.layers.append(new)
        self.width = w.shape[1]
        return new

    def _elementwise(self, i: int, n, ins: list, cur: str, consts: dict, where: str) -> Layer:
        """Add, Sub, Mul or Div by a constant, folded into the linear layer before it (or a
        diagonal one)."""
        c = np.broadcast_to(consts[[x for x in ins if x in consts][0]], (self.width,)) \
            .astype(np.float64)
        const_first = ins[0] in consts
        new = self.linear_layer(cur)
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
        return new

    def _clip(self, i: int, ins: list, attrs: dict, cur: str, consts: dict, where: str) -> Layer:
        """clip(x, lo, hi) = lo + (hi - lo) / 6 * relu6(6 (x - lo) / (hi - lo)): the scale into
        the Dense layer before it, relu6 its activation, then a diagonal layer back."""
        bounds = [consts.get(x) for x in ins[1:3]] if len(ins) > 1 else \
            [np.array(attrs["min"].f if "min" in attrs else -np.inf),
             np.array(attrs["max"].f if "max" in attrs else np.inf)]
        if len(bounds) < 2 or any(b is None or b.size != 1 for b in bounds) or \
                not np.all(np.isfinite(bounds)) or float(bounds[1]) <= float(bounds[0]):
            raise PolicyImportError(f"{where}: node #{i} Clip: only finite constant bounds "
                               "are supported")
        lo, hi = float(bounds[0]), float(bounds[1])
        scaled = self.linear_layer(cur)
        s_ = 6.0 / (hi - lo)
        scaled.kernel, scaled.bias = scaled.kernel * s_, (scaled.bias - lo) * s_
        scaled.act = "relu6"
        new = self.fresh()
        new.kernel, new.bias = new.kernel / s_, new.bias + lo
        return new


def _ints(attrs, name, default):
    """An ints attribute as a list, or `default` when the node has none."""
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
