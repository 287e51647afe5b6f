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

Before that mapping, what real exporters put around those ops is folded away (`onnx_fold.fold`): no-op
Casts (SB3's preprocessing casts float32 observations to float32), Identity and Constant nodes,
and the constant shape arithmetic torch writes for `x.reshape(x.shape[0], -1)` or `view(...)`
(Shape, Gather, Unsqueeze, Squeeze, Concat, ConstantOfShape, Cast of a constant), evaluated here
in numpy from the constants and the statically inferred shapes (the batch dimension stays a
symbol). A Reshape whose folded shape is [batch, -1] (or [-1, n], [batch, n] with n the values per
observation) then maps as a Flatten, and an Expand to the shape its input has is a no-op. Nodes
the output does not depend on (what only feeds a Shape whose value is static, as gSDE's unused
std does) are dead: neither mapped nor checked, and onnxruntime is given the graph without them
(`onnx_fold.checked_model`).

The first output is the network's output (Q-values, logits or the action). Every node outside
this list, or a listed shape op that does not fold (its inputs are not constant, a Cast to another
type such as float -> int64), is named at once, with its index, in one error, before onnxruntime
sees the file. Integer outputs (an ArgMax inside the graph) are refused: export the network
before the argmax.

The parts: onnx_shapes.py (static shapes), onnx_fold.py (the folding), onnx_layers.py (the
mapping onto Dense layers and the CNN front); here, the import and the Keras network.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.nets import keras_mlp
from .bounded import MAX_WEIGHTS_BYTES, read_file, short, text
from .common import Imported, PolicyImportError, check_outputs, check_spaces, env_action, sha256
from ..core.envs import make_gym


def _modules():
    """onnx and onnxruntime (optional: quarl-edge[onnx]), or an error saying how to install
    them."""
    try:
        import onnx
        import onnxruntime
    except ImportError:
        raise PolicyImportError("ONNX import needs the onnx and onnxruntime packages: "
                           "pip install 'quarl-edge[onnx]' (or `make setup`)") from None
    return onnx, onnxruntime


def _keras_cnn(obs_shape, front, mlp, name: str):
    """The front's convolutions on the env's images, then the dense layers, as Keras."""
    import tensorflow as tf   # heavy: only when a CNN policy is built
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


def read_model(path: Path):
    """The model, read within MAX_WEIGHTS_BYTES (with its external data), checked as ONNX and
    for its ops' domains, before anything evaluates any of it (onnx_graph.py)."""
    import onnx
    from .onnx_graph import check_domains, load_external_data  # lazy: imports onnx (optional)
    raw = read_file(path, MAX_WEIGHTS_BYTES, "an ONNX file", PolicyImportError)
    try:
        model = onnx.load_model_from_string(raw)
    except Exception as e:  # noqa: BLE001 (protobuf's DecodeError and the like)
        raise PolicyImportError(f"{path}: not a valid ONNX model ({type(e).__name__})") from None
    check_domains(model, str(path))
    load_external_data(model, path)
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # onnx raises ValidationError, ...: all "not valid"
        raise PolicyImportError(f"{path}: not a valid ONNX model ({type(e).__name__}: "
                                f"{short(str(e).splitlines()[0] if str(e) else '', 160)})") \
            from None
    return model


def load(path: Path, env_id: str | None) -> Imported:
    """An ONNX policy as an imported policy: its nodes mapped onto Keras layers, checked
    against onnxruntime running the graph's live nodes."""
    onnx, ort = _modules()
    from .onnx_layers import graph_to_layers  # lazy: imports onnx (optional), which _modules() found
    path = Path(path)
    if env_id is None:
        raise PolicyImportError(f"{path}: an ONNX model does not say its environment: give --env ID")
    model = read_model(path)
    out_type = model.graph.output[0].type.tensor_type.elem_type
    if out_type != onnx.TensorProto.FLOAT:
        raise PolicyImportError(f"{path}: the output {model.graph.output[0].name} is "
                           f"{onnx.TensorProto.DataType.Name(out_type)}, not FLOAT (an ArgMax in "
                           "the graph?): export the network before the argmax")
    layers, n_in, out_name, front, checked = graph_to_layers(model, str(path))
    env_act = env_action(env_id)
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
                            "producer": text(f"{model.producer_name} "
                                             f"{model.producer_version}".strip()),
                            "output": text(out_name)},
                    reference=reference, reference_name=f"onnxruntime {ort.__version__}",
                    network={"type": "mlp" if front is None else "cnn",
                             "hidden": [int(x.kernel.shape[1]) for x in layers[:-1]],
                             "activations": [x.act for x in layers],
                             **({} if front is None else {"convolutions": [
                                 [int(d) for d in st[1].shape] + list(st[3])
                                 for st in front["stages"] if st[0] == "conv"]})})
