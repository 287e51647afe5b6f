"""The run directory: what training writes and every later stage reads.

This module is the only thing the stages after training (quant, measure, study) know of it; none
of them imports an algorithm. A run directory RUN holds:

    RUN/run.json            what was trained, how, how well (`load_run`); "model_file" names the
                            network file, "env" the Gymnasium id, "algo", "seed", "obs_shape",
                            "action_space", "network", "hyperparameters", "versions"
    RUN/qnet.keras          DQN: the Q-network as a plain tf.keras model (float32 obs -> Q-values)
    RUN/policy.keras        PPO, SAC, TD3, DDPG: the greedy actor as a plain tf.keras MLP (logits
                            for discrete PPO, the deterministic action for continuous actors)
    RUN/policy/             the greedy policy as a TF-Agents PolicySaver SavedModel (not for
                            recurrent runs trained by rl/rppo.py, which has no TF-Agents policy)
    RUN/recurrent.npz       a recurrent run (network "type": "lstm", "recurrent": true): the
                            greedy actor's arrays (rl/recurrent.py); its policy.keras is then a
                            one-step model, [1, 1, *obs] -> logits, with a stateful LSTM
    RUN/train_curve.csv     step, running train episode return, greedy validation return, loss
    RUN/models/<scheme>.tflite   the quantized models (quarl_edge.quant)
    RUN/calibration.npy     the observations the integer schemes were calibrated on

Seeds: training selects its best checkpoint on the validation seeds VALIDATION_SEED_BASE + k,
never on the test seeds 0..N that evaluation uses.

The network files hold plain MLPs (Dense layers, relu / tanh / linear), so they can also be run
in numpy (`mlp_layers`, `mlp_forward`) without a TensorFlow call per step, or sequential CNNs
(DQN on pixel tasks: Conv2D, Flatten, Dense; `weighted_layers` gives the kernels of either).
"""
from __future__ import annotations

import json
import os
import platform
import re
from importlib import metadata
from pathlib import Path

import numpy as np

from .errors import QuarlError
from .schema import Key, check

VALIDATION_SEED_BASE = 10_000


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("tensorflow-cpu", "tensorflow", "tf-agents", "tensorflow-probability",
                 "tf-keras", "gymnasium", "numpy", "tflite-runtime", "ai-edge-litert",
                 "quarl-edge"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


# The plain Keras network each algorithm exports into the run directory (what gets converted).
MODEL_FILES = {"dqn": "qnet.keras", "ppo": "policy.keras", "sac": "policy.keras",
               "td3": "policy.keras", "ddpg": "policy.keras"}

# The "algo" of a run made by `quarl-edge import` (quarl_edge.importers): where it came from.
IMPORTED_ALGOS = ("sb3-dqn", "sb3-ppo", "sb3-a2c", "sb3-sac", "sb3-td3", "sb3-qrdqn", "sb3-tqc",
                  "sb3-trpo", "sb3-ars", "sb3-recurrentppo", "onnx", "keras", "tf-agents")

# What the later stages read of run.json (other keys are kept, unchecked: runs record more).
RUN_KEYS = {
    "env": Key(str, required=True, nonempty=True),
    "algo": Key(str, required=True, choices=(*MODEL_FILES, *IMPORTED_ALGOS)),
    "obs_shape": Key(list, required=True, items=int, min=1, nonempty=True),
    "seed": Key(int), "steps": Key(int, min=0), "n_actions": Key(int, min=1),
    "model_file": Key(str, nonempty=True), "action_space": Key(dict), "network": Key(dict),
    "hyperparameters": Key(dict), "train_seconds": Key(float), "best_greedy_return": Key(float),
    "action_head": Key(str, choices=("argmax", "identity", "scale")),
}

ACTIVATIONS = {"linear": lambda x: x, "relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh,
               "relu6": lambda x: np.clip(x, 0.0, 6.0)}   # relu6: an ONNX Clip, imported


def load_run(run_dir: Path) -> dict:
    """RUN/run.json as a dict, its keys checked (RUN_KEYS); a QuarlError naming the file and
    the key when RUN is not a run directory or its run.json lacks or mistypes one."""
    meta = Path(run_dir) / "run.json"
    if not meta.is_file():
        raise QuarlError(f"{run_dir} is not a run directory (no run.json); train one with "
                         "`quarl-edge train` or use examples/cartpole_dqn")
    try:
        info = json.loads(meta.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise QuarlError(f"{meta} is not valid JSON: {e}") from None
    if not isinstance(info, dict):
        raise QuarlError(f"{meta}: must be a JSON object of keys (env, algo, obs_shape, ...), "
                         f"got {type(info).__name__}")
    return check(info, RUN_KEYS, str(meta), allow_unknown=True)


def write_run(run_dir: Path, info: dict) -> None:
    """Write RUN/run.json through a temporary file, so a crash never leaves half a file."""
    path = Path(run_dir) / "run.json"
    tmp = path.with_name(f".run.json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(info, indent=2) + "\n")
    os.replace(tmp, path)


def keras_path(run_dir: Path) -> Path:
    """RUN/<model file>: run.json's "model_file" (qnet.keras for runs that predate it)."""
    meta = Path(run_dir) / "run.json"
    name = "qnet.keras"
    if meta.is_file():
        name = load_run(run_dir).get("model_file", name)
    return Path(run_dir) / name


def load_keras(run_dir: Path):
    """The run's policy network (RUN/qnet.keras for DQN, RUN/policy.keras for the actor of the
    other algorithms) as a tf.keras model: float32 observations -> Q-values, logits or actions.
    Loaded by safe_load_keras: a run directory from elsewhere never runs code."""
    path = keras_path(run_dir)
    if not path.is_file():
        raise QuarlError(f"no trained model at {path}: run `train` into {run_dir} first")
    model = safe_load_keras(path)
    meta = load_run(run_dir) if (Path(run_dir) / "run.json").is_file() else None
    # (a recurrent run's network also takes a time axis and its state)
    if meta and not (meta.get("network") or {}).get("recurrent") and isinstance(
            model.input_shape, tuple):
        want, has = tuple(meta["obs_shape"]), tuple(model.input_shape[1:])
        if len(has) != len(want) or any(h is not None and h != w for h, w in zip(has, want)):
            raise QuarlError(f"{Path(run_dir) / 'run.json'}: obs_shape {list(want)}, but "
                             f"{path.name} takes observations of shape {list(has)}")
    return model


ZIP_MAGIC, HDF5_MAGIC = b"PK\x03\x04", b"\x89HDF\r\n\x1a\n"


def safe_load_keras(path: Path):
    """A Keras model file that may come from anywhere, loaded without running code from it.

    A Lambda layer carries Python (marshalled bytecode in HDF5, a function in .keras files) that
    Keras runs when it rebuilds the model, and a custom class names code to import. So the
    file's format must match its name (.keras is a zip, .h5/.hdf5 is HDF5), and its model
    config is read first and refused if any layer is a Lambda or not one of Keras's own (a
    module outside keras, a registered custom name); only then does Keras load it, with
    safe_mode for .keras files."""
    import tensorflow as tf
    path = Path(path)
    head = path.read_bytes()[:8]
    suffix = path.suffix.lower()
    if suffix == ".keras":
        if not head.startswith(ZIP_MAGIC):
            what = "an HDF5 file" if head == HDF5_MAGIC else "not a zip"
            raise QuarlError(f"{path}: refused: named .keras but {what} (a .keras model is a "
                             "zip); an HDF5 model is loaded only as .h5, after its check")
        import zipfile
        try:
            with zipfile.ZipFile(path) as z:
                config = json.loads(z.read("config.json"))
        except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise QuarlError(f"{path}: not a Keras model ({type(e).__name__}: {e})") from None
    elif suffix in (".h5", ".hdf5"):
        if head != HDF5_MAGIC:
            raise QuarlError(f"{path}: refused: named {suffix} but not an HDF5 file")
        import h5py
        try:
            with h5py.File(path, "r") as f:
                raw = f.attrs.get("model_config")
        except OSError as e:
            raise QuarlError(f"{path}: not a readable HDF5 file ({e})") from None
        if raw is None:
            raise QuarlError(f"{path}: an HDF5 file without a Keras model config (weights only?)")
        try:
            config = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        except (ValueError, AttributeError) as e:    # JSONDecodeError, UnicodeDecodeError
            raise QuarlError(f"{path}: its model_config is not a Keras model config "
                             f"({type(e).__name__})") from None
    else:
        raise QuarlError(f"{path}: a Keras model is a .keras (or .h5) file")
    unsafe = sorted(set(_unsafe_layers(config)))
    if unsafe:
        raise QuarlError(f"{path}: refused: {', '.join(unsafe)} would run code from the file "
                         "when Keras loads it; only Keras's own layers are loaded")
    try:
        if suffix == ".keras":
            return tf.keras.models.load_model(path, compile=False, safe_mode=True)
        return tf.keras.models.load_model(path, compile=False)
    except (ValueError, TypeError, OSError) as e:
        raise QuarlError(f"{path}: Keras cannot load it: {str(e).splitlines()[0]}") from None


# Keras's own packages, as a config's "module" names them: keras (TF 2.15's built-in Keras 2, and
# Keras 3) and tf_keras (Keras 2 as its own package, for TensorFlow >= 2.16).
KERAS_PACKAGES = ("keras", "tf_keras")


def _unsafe_layers(node):
    """Names of the things in a Keras model config that would run or import code."""
    if isinstance(node, dict):
        name = node.get("class_name")
        if isinstance(name, str):
            module = node.get("module")
            registered = node.get("registered_name")
            if name == "Lambda":
                yield "a Lambda layer"
            elif module is not None and str(module).split(".")[0] not in KERAS_PACKAGES:
                yield f"class {name} from {module}"
            elif registered and not str(registered).startswith((*KERAS_PACKAGES, name)):
                yield f"the custom object {registered}"
        for v in node.values():
            yield from _unsafe_layers(v)
    elif isinstance(node, list):
        for v in node:
            yield from _unsafe_layers(v)


def tflite_path(run_dir: Path, scheme: str) -> Path:
    """RUN/models/<scheme>.tflite, which must exist (made by `quarl-edge quantize`)."""
    path = Path(run_dir) / "models" / f"{scheme}.tflite"
    if not path.is_file():
        raise QuarlError(f"no {scheme} model in {run_dir}/models; make it with "
                         f"`quarl-edge quantize {run_dir} --scheme {scheme}`")
    return path


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
