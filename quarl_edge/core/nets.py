"""The networks of a run directory's files as arrays and runners.

The network files (quarl_edge/core/run.py) hold plain MLPs (Dense layers, relu / tanh / linear), so
they can also be run in numpy (`mlp_layers`, `mlp_forward`) without a TensorFlow call per step,
or sequential CNNs (DQN on pixel tasks: Conv2D, Flatten, Dense; `weighted_layers` gives the
kernels of either). `keras_runner` and `keras_call` make any of them a batch runner (numpy
observations in, numpy outputs out), `keras_mlp` builds the Keras MLP the files hold from
arrays (training and the importers write it), and `ppo_action_std` reads a continuous PPO run's
Gaussian std.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .errors import QuarlError
from .run import load_run

ACTIVATIONS = {"linear": lambda x: x, "relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh,
               "relu6": lambda x: np.clip(x, 0.0, 6.0)}   # relu6: an ONNX Clip, imported


def mlp_layers(model) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """The Dense layers of a plain Keras MLP as (kernel, bias, activation name)."""
    layers = []
    for layer in model.layers:
        if layer.__class__.__name__ in ("InputLayer", "Flatten"):
            continue
        if layer.__class__.__name__ != "Dense":
            raise QuarlError(f"layer {layer.name} ({layer.__class__.__name__}) is not Dense: "
                             "only MLPs are supported")
        act = layer.get_config()["activation"]
        if act not in ACTIVATIONS:
            raise QuarlError(f"layer {layer.name}: activation {act!r} is not supported")
        kernel, bias = layer.get_weights()
        layers.append((kernel, bias, act))
    return layers


# Layers of a sequential Keras network: those with a kernel (their (kernel, bias, activation) is
# what weighted_layers gives), and those without weights that a chain may hold.
KERNEL_LAYERS = ("Dense", "Conv2D", "DepthwiseConv2D")
WEIGHTLESS_LAYERS = ("InputLayer", "Flatten", "Reshape", "MaxPooling2D", "AveragePooling2D",
                     "GlobalAveragePooling2D", "Dropout")


def weighted_layers(model) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """(kernel, bias, activation name) of every layer with a kernel (Dense, Conv2D,
    DepthwiseConv2D) of a sequential Keras network, in order: the weight distribution QuaRL
    studies, for MLPs (then the same as mlp_layers) and CNNs alike. A layer of another kind
    that holds weights is refused by name."""
    layers = []
    for layer in model.layers:
        kind = layer.__class__.__name__
        if kind in WEIGHTLESS_LAYERS:
            continue
        if kind not in KERNEL_LAYERS:
            raise QuarlError(f"layer {layer.name} ({kind}): not a layer with a kernel "
                             f"({', '.join(KERNEL_LAYERS)}) nor one without weights "
                             f"({', '.join(WEIGHTLESS_LAYERS[1:])})")
        weights = layer.get_weights()
        kernel = weights[0]
        bias = weights[1] if len(weights) > 1 else np.zeros(kernel.shape[-1], np.float32)
        layers.append((kernel, bias, layer.get_config().get("activation") or "linear"))
    return layers


def keras_mlp(obs_shape: tuple[int, ...], layers: list[tuple[np.ndarray, np.ndarray, str]],
              name: str = "policy"):
    """A plain tf.keras MLP float32 [None, *obs_shape] -> [None, n_out] holding `layers`
    ((kernel [in, out], bias, activation) as from mlp_layers): what the network files hold."""
    import tensorflow as tf
    inp = tf.keras.Input(shape=obs_shape, dtype=tf.float32, name="observation")
    x = tf.keras.layers.Flatten()(inp) if len(obs_shape) != 1 else inp
    dense = []
    for i, (kernel, bias, act) in enumerate(layers):
        last = i == len(layers) - 1
        dense.append(tf.keras.layers.Dense(kernel.shape[1], activation=act,
                                           name="output" if last else f"dense_{i}"))
        x = dense[-1](x)
    model = tf.keras.Model(inp, x, name=name)
    for layer, (kernel, bias, _) in zip(dense, layers):
        layer.set_weights([kernel, bias])
    return model


def mlp_forward(layers: list[tuple[np.ndarray, np.ndarray, str]], obs: np.ndarray) -> np.ndarray:
    """Outputs of the MLP `layers` (from mlp_layers) for a batch of observations, in numpy."""
    x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
    for kernel, bias, act in layers:
        x = ACTIVATIONS[act](x @ kernel + bias)
    return x


def mlp_q_values(weights: list[np.ndarray], obs: np.ndarray) -> np.ndarray:
    """Q-values of an MLP given its [W1, b1, ..., Wout, bout] (relu hidden layers), in numpy."""
    x = obs.reshape(obs.shape[0], -1).astype(np.float32)
    for i in range(0, len(weights) - 2, 2):
        x = np.maximum(x @ weights[i] + weights[i + 1], 0.0)
    return x @ weights[-2] + weights[-1]


def keras_runner(model):
    """A Keras network as a batch runner (numpy observations in, numpy outputs out): a plain
    MLP in numpy (no TensorFlow call per batch), any other network (an imported CNN) through
    one traced tf.function."""
    try:
        layers = mlp_layers(model)
    except QuarlError:
        return keras_call(model)
    return lambda x: mlp_forward(layers, x)


def keras_call(model):
    """The Keras model itself as a batch runner, one traced tf.function (float32 numpy in and
    out): what TensorFlow computes, for comparisons with the converted models."""
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def call(x):
        return model(x, training=False)

    return lambda x: call(tf.convert_to_tensor(np.asarray(x, np.float32))).numpy()


def ppo_action_std(run_dir: Path) -> np.ndarray | None:
    """The std of a continuous PPO run's Gaussian policy (TF-Agents' NormalProjectionNetwork
    keeps it as a state-independent bias), or None for any other run.

    The run keeps the greedy policy (policy/, PolicySaver) with the agent's variables: a network
    of the run's shape is rebuilt, given the saved std bias (the only variable the std depends
    on), and asked for its distribution's stddev. (Newer runs also record it in run.json as
    "action_std"; reading it back here serves every run alike, and the recorded value checks it.)"""
    info = load_run(run_dir)
    if info.get("algo") != "ppo" or info["action_space"]["type"] != "box":
        return None
    import tensorflow as tf
    from tf_agents.networks import actor_distribution_network   # also registers the specs
    from tf_agents.specs import tensor_spec

    space = info["action_space"]
    obs_spec = tensor_spec.TensorSpec(tuple(info["obs_shape"]), tf.float32)
    act_spec = tensor_spec.BoundedTensorSpec(tuple(space["shape"]), tf.float32,
                                             np.float32(space["low"]), np.float32(space["high"]))
    net = actor_distribution_network.ActorDistributionNetwork(
        obs_spec, act_spec, fc_layer_params=tuple(info["network"]["hidden"]))
    net.create_variables()

    def std_bias(variables):
        # Keras numbers a layer name already used in the process: bias_layer, bias_layer_1, ...
        found = [v for v in variables if re.search(
            r"^ActorDistributionNetwork[^/]*/NormalProjectionNetwork[^/]*/bias_layer[^/]*/bias",
            v.name)]
        if len(found) != 1:
            raise QuarlError(f"{run_dir}/policy: no single NormalProjectionNetwork std bias "
                             f"(found {len(found)}); is it a continuous PPO run?")
        return found[0]

    saved = std_bias(tf.saved_model.load(str(Path(run_dir) / "policy")).model_variables)
    std_bias(net.variables).assign(saved)
    dist, _ = net(tf.zeros((1, *info["obs_shape"])), step_type=(), network_state=(),
                  training=False)
    return dist.stddev().numpy().reshape(-1)
