"""Recurrent (LSTM) policies: the greedy actor of a TF-Agents ActorDistributionRnnNetwork as
plain arrays, stepped in numpy, played episode by episode with its state reset at each start,
and exported as a one-step Keras model whose LSTM state is what a board keeps.

The network (what `ppo --net lstm` trains, TF-Agents' LSTMEncodingNetwork inside):

    observation -> Dense(relu) ... -> LSTMCell -> Dense(relu) ... -> logits (Dense)

`RecurrentLayers` holds it: `dense_in` and `dense_out` as (kernel, bias, activation) like
nets.mlp_layers, the LSTM as Keras's (kernel [in, 4u], recurrent_kernel [u, 4u], bias [4u]) with
the gates in Keras order i, f, c, o, sigmoid gates and tanh cell. Its state is (h, c), zero at
an episode's start: TF-Agents' dynamic unroll zeroes it at every FIRST step, the one-step model
is reset (tflite: Interpreter.reset_all_variables, a board: RESET, qe_model_reset_state()).

The one-step model (RUN/policy.keras) is a Keras model of batch 1 and one time step:
float32 [1, 1, *obs] -> Dense... -> LSTM(stateful=True) -> Dense... -> logits [1, n_actions].
Converted from a concrete function of that fixed shape, the LSTM becomes one
UNIDIRECTIONAL_SEQUENCE_LSTM whose hidden and cell state inputs are TFLite variable tensors:
state the interpreter (and the generated C, in its arena) keeps from one invoke to the next."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import QuarlError
from ..core.files import write_npy
from ..core.nets import ACTIVATIONS
from ..core.tfcompat import configure_converter
from ..core.envs import make_gym, outputs_to_actions

WEIGHTS_FILE = "recurrent.npz"   # RUN/recurrent.npz: the greedy actor's arrays (RecurrentLayers)
# The cell clip of the converted LSTM: TFLite's converter fuses a Keras LSTM into a
# UNIDIRECTIONAL_SEQUENCE_LSTM with cell_clip 10 (c = clip(f * c + i * g, -10, 10)), which Keras
# itself does not have. A trained policy's cell reaches |c| ~ 150 on CartPoleNoVel: unclipped
# numpy and TFLite then chose different actions at 5% of the steps. So the recurrence we train,
# validate and compare with (RecurrentLayers.step, rppo.py's unroll) clips as TFLite does,
# and the converted model computes exactly the policy that was trained; the stateful Keras
# policy.keras (no clip) equals it while |c| stays below the clip.
CELL_CLIP = 10.0


@dataclass
class RecurrentLayers:
    dense_in: list      # [(kernel, bias, activation)] before the LSTM
    lstm: tuple         # (kernel [in, 4u], recurrent_kernel [u, 4u], bias [4u])
    dense_out: list     # [(kernel, bias, activation)] after it, the last one the logits

    @property
    def units(self) -> int:
        return int(self.lstm[1].shape[0])

    def zero_state(self, k: int = 1):
        return (np.zeros((k, self.units), np.float32), np.zeros((k, self.units), np.float32))

    def step(self, obs: np.ndarray, state):
        """One time step for a batch [k, *obs]: (outputs [k, n_out], new state)."""
        x = np.asarray(obs, np.float32).reshape(len(obs), -1)
        for kernel, bias, act in self.dense_in:
            x = ACTIVATIONS[act](x @ kernel + bias)
        kernel, rec, bias = self.lstm
        h, c = state
        z = x @ kernel + h @ rec + bias
        u = self.units
        sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
        i, f, g, o = sig(z[:, :u]), sig(z[:, u:2 * u]), np.tanh(z[:, 2 * u:3 * u]), sig(z[:, 3 * u:])
        c = np.clip(f * c + i * g, -CELL_CLIP, CELL_CLIP)
        h = o * np.tanh(c)
        x = h
        for kernel, bias, act in self.dense_out:
            x = ACTIVATIONS[act](x @ kernel + bias)
        return x.astype(np.float32), (h.astype(np.float32), c.astype(np.float32))

    # -- RUN/recurrent.npz
    def save(self, path: Path) -> None:
        arrays = {}
        for name, layers in (("in", self.dense_in), ("out", self.dense_out)):
            for k, (kernel, bias, act) in enumerate(layers):
                arrays[f"{name}{k}_kernel"], arrays[f"{name}{k}_bias"] = kernel, bias
                arrays[f"{name}{k}_act"] = np.array(act)
        arrays["lstm_kernel"], arrays["lstm_recurrent"], arrays["lstm_bias"] = self.lstm
        write_npy(path, **arrays)

    @classmethod
    def load(cls, path: Path) -> "RecurrentLayers":
        try:
            z = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise QuarlError(f"{path}: not a recurrent policy's arrays ({e})") from None

        def dense(name):
            out, k = [], 0
            while f"{name}{k}_kernel" in z:
                out.append((z[f"{name}{k}_kernel"], z[f"{name}{k}_bias"], str(z[f"{name}{k}_act"])))
                k += 1
            return out
        return cls(dense("in"), (z["lstm_kernel"], z["lstm_recurrent"], z["lstm_bias"]),
                   dense("out"))


def observation_statistics(env_id: str, seed: int, episodes: int = 20):
    """Mean and standard deviation per observation component over `episodes` episodes of
    uniformly random actions (seeds seed * 1000 + k): the fixed input normalization of a
    recurrent policy (`ppo --net lstm`). CartPoleNoVel's pole angle varies by ~0.1 rad, its
    change per step by ~0.01: unscaled, the LSTM has to grow large weights before it can tell
    a velocity from two observations."""
    env = make_gym(env_id)
    env.action_space.seed(seed)
    seen = []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed * 1000 + k)
            done = False
            while not done:
                seen.append(np.asarray(obs, np.float64).reshape(-1))
                obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
                done = terminated or truncated
    finally:
        env.close()
    seen = np.stack(seen)
    return seen.mean(0).astype(np.float32), np.maximum(seen.std(0), 1e-3).astype(np.float32)


def normalization_layer(mean: np.ndarray, std: np.ndarray):
    """A fixed Keras Normalization layer, (x - mean) / std (a network's preprocessing layer)."""
    import tensorflow as tf
    return tf.keras.layers.Normalization(mean=mean, variance=np.square(std))


def rnn_actor_layers(actor_net, mean: np.ndarray | None = None,
                     std: np.ndarray | None = None) -> RecurrentLayers:
    """The greedy (logits) path of a TF-Agents ActorDistributionRnnNetwork with a categorical
    head and one LSTM cell, as RecurrentLayers. `mean`, `std`: the network's input
    normalization (its preprocessing layer, normalization_layer), folded into the first Dense
    layer (kernel / std, bias - (mean / std) @ kernel), so the arrays take raw observations."""
    import tensorflow as tf
    enc = actor_net._lstm_encoder

    def dense(layers):
        out = []
        for d in layers:
            if not isinstance(d, tf.keras.layers.Dense):
                raise QuarlError(f"unsupported layer {type(d).__name__} in the recurrent actor")
            kernel, bias = (w.astype(np.float32) for w in d.get_weights())
            out.append((kernel, bias, d.get_config()["activation"]))
        return out
    dense_in = dense([l for l in enc._input_encoder._postprocessing_layers
                      if not isinstance(l, tf.keras.layers.Flatten)])
    cell = enc._lstm_network.cell
    if not isinstance(cell, tf.keras.layers.LSTMCell):
        raise QuarlError(f"only one LSTM cell is supported, got {type(cell).__name__}")
    lstm = tuple(w.astype(np.float32) for w in cell.get_weights())
    proj = tf.nest.flatten(actor_net._projection_networks)[0]
    if type(proj).__name__ != "CategoricalProjectionNetwork":
        raise QuarlError("recurrent policies need a discrete action space (categorical head)")
    dense_out = dense(list(enc._output_encoder) + [proj._projection_layer])
    layers = RecurrentLayers(dense_in, lstm, dense_out)
    return layers if mean is None else fold_normalization(layers, mean, std)


def fold_normalization(layers: RecurrentLayers, mean: np.ndarray,
                       std: np.ndarray) -> RecurrentLayers:
    """`layers` that take (x - mean) / std, as layers that take x: the normalization folded
    into the first layer (kernel / std, bias - (mean / std) @ kernel)."""
    dense_in, lstm = list(layers.dense_in), layers.lstm
    kernel, bias, act = dense_in[0] if dense_in else (lstm[0], lstm[2], None)
    scale = (1.0 / np.asarray(std, np.float64)).reshape(-1)
    folded_k = (kernel.astype(np.float64) * scale[:, None]).astype(np.float32)
    folded_b = (bias.astype(np.float64) - (np.asarray(mean, np.float64).reshape(-1) * scale)
                @ kernel.astype(np.float64)).astype(np.float32)
    if dense_in:
        dense_in[0] = (folded_k, folded_b, act)
    else:
        lstm = (folded_k, lstm[1], folded_b)
    return RecurrentLayers(dense_in, lstm, list(layers.dense_out))


def play_recurrent(env_id: str, layers: RecurrentLayers, seeds, record: bool = False,
                   max_steps: int = 100_000):
    """envs.play_batched for a recurrent policy: one greedy episode per seed, in lockstep, each
    episode's LSTM state zero at its start. Returns (returns [len(seeds)], visited
    observations [n, *obs] or None), observations episode after episode in seed order."""
    seeds = list(seeds)
    envs = [make_gym(env_id) for _ in seeds]
    space = envs[0].action_space
    obs = np.stack([np.asarray(e.reset(seed=int(s))[0], np.float32) for e, s in zip(envs, seeds)])
    h, c = layers.zero_state(len(seeds))
    returns = np.zeros(len(seeds))
    alive = np.arange(len(seeds))
    visited: list[list[np.ndarray]] = [[] for _ in seeds]
    try:
        for _ in range(max_steps):
            if not len(alive):
                break
            out, (h_a, c_a) = layers.step(obs[alive], (h[alive], c[alive]))
            h[alive], c[alive] = h_a, c_a
            still = []
            for i, a in zip(alive, outputs_to_actions(out, space)):
                if record:
                    visited[i].append(obs[i].copy())
                o, r, terminated, truncated, _ = envs[i].step(int(a))
                returns[i] += float(r)
                obs[i] = np.asarray(o, np.float32)
                if not (terminated or truncated):
                    still.append(i)
            alive = np.asarray(still, dtype=int)
    finally:
        for e in envs:
            e.close()
    if not record:
        return returns, None
    return returns, np.stack([o for v in visited for o in v]).astype(np.float32)


# ------------------------------------------------------------------ the one-step Keras model
def one_step_keras(obs_shape: tuple[int, ...], layers: RecurrentLayers, name: str = "policy",
                   stateful: bool = True):
    """The greedy actor as a Keras model of batch 1 and one time step, its LSTM stateful:
    float32 [1, 1, *obs] -> logits [1, n_actions]. Each call continues from the state the
    previous call left (`model.reset_states()` zeroes it, as at an episode's start)."""
    import tensorflow as tf
    n_obs = int(np.prod(obs_shape))
    inp = tf.keras.Input(shape=(1, n_obs), batch_size=1, dtype=tf.float32, name="observation")
    x, dense = inp, []
    for k, (kernel, _, act) in enumerate(layers.dense_in):
        dense.append(tf.keras.layers.Dense(kernel.shape[1], activation=act, name=f"dense_{k}"))
        x = dense[-1](x)
    lstm = tf.keras.layers.LSTM(layers.units, stateful=stateful, name="lstm")
    x = lstm(x)
    for k, (kernel, _, act) in enumerate(layers.dense_out):
        last = k == len(layers.dense_out) - 1
        dense.append(tf.keras.layers.Dense(kernel.shape[1], activation=act,
                                           name="output" if last else f"dense_out_{k}"))
        x = dense[-1](x)
    model = tf.keras.Model(inp, x, name=name)
    for layer, (kernel, bias, _) in zip(dense, layers.dense_in + layers.dense_out):
        layer.set_weights([kernel, bias])
    lstm.set_weights(list(layers.lstm))
    return model


def is_one_step(model) -> bool:
    """A Keras model with a stateful LSTM (the one-step recurrent model) rather than an MLP."""
    return any(getattr(l, "stateful", False) for l in model.layers)


def layers_from_keras(model) -> RecurrentLayers:
    """RecurrentLayers back from a one_step_keras model."""
    import tensorflow as tf
    dense_in, dense_out, lstm = [], [], None
    for l in model.layers:
        if isinstance(l, tf.keras.layers.InputLayer):
            continue
        if isinstance(l, tf.keras.layers.LSTM):
            lstm = tuple(w.astype(np.float32) for w in l.get_weights())
        elif isinstance(l, tf.keras.layers.Dense):
            kernel, bias = l.get_weights()
            (dense_out if lstm is not None else dense_in).append(
                (kernel, bias, l.get_config()["activation"]))
        else:
            raise QuarlError(f"layer {l.name} ({type(l).__name__}) is not Dense or LSTM")
    if lstm is None:
        raise QuarlError(f"{model.name}: no LSTM layer")
    return RecurrentLayers(dense_in, lstm, dense_out)


def convert_one_step(model, configure=None) -> bytes:
    """A one_step_keras model -> .tflite bytes, from a concrete function of the fixed shape
    [1, 1, *obs]. `configure(converter)` sets a scheme's options (quant.schemes).

    What is converted is the model's stateless twin (the same weights, stateful=False): the
    converter fuses that LSTM into one UNIDIRECTIONAL_SEQUENCE_LSTM whose h and c inputs are
    variable tensors (isVariable), which TFLite keeps from invoke to invoke and
    reset_all_variables() zeroes. The stateful Keras LSTM itself would become resource
    variables (VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE) around a WHILE loop instead."""
    import tensorflow as tf
    model = one_step_keras(tuple(model.inputs[0].shape[2:]), layers_from_keras(model),
                           name=model.name, stateful=False)
    spec = tf.TensorSpec(model.inputs[0].shape, tf.float32, name="observation")
    fn = tf.function(lambda v: model(v, training=False), input_signature=[spec])
    converter = configure_converter(
        tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], model))
    if configure is not None:
        configure(converter)
    return converter.convert()
