"""Stable-Baselines3 policies (the .zip of `model.save`) as quarl-edge run directories.

Read without torch and without running anything from the file (a zip from the internet is
untrusted): `data` is SB3's JSON (only its plain fields are read, never the base64 pickles in
it), `policy.pth` is read by safe_pickle.load_torch_archive (tensors and containers only).

The network written is what SB3's `predict(obs, deterministic=True)` computes, as a plain MLP:

    DQN            q_net                               -> Q-values      (action: argmax)
    PPO, A2C       policy_net, action_net              -> logits (argmax) or the Gaussian mean,
                                                          clipped to the bounds as SB3 does
    SAC            latent_pi, mu, tanh, unscale_action -> the action
    TD3            mu (ends in tanh), unscale_action   -> the action

after SB3's NatureCNN for a CnnPolicy (DQN, PPO, A2C on uint8 HWC images: the Keras network
takes the env's images as they are; SB3's channel-first transpose becomes the layout of the
convolution weights and of the Linear after the Flatten, and its /255 is folded into the first
convolution), and with VecNormalize's observation normalisation (a vecnormalize.pkl, read as
inert data) folded into the first layer: W' = W / s, b' = b - (mean / s) W, s = sqrt(var + epsilon). SB3 also clips
the normalised observation to +-clip_obs: where the env's observation bounds let a normalised
value pass it (clip_reachable), the clip is a Dense layer with relu before the first layer
(_fold_clipped); elsewhere the plain fold is exact, which the import checks on its
fidelity observations (and refuses a policy where one reaches the clip all the same).

`reference` re-does SB3's forward in numpy (float64) from the same tensors, the way SB3's
policy classes compute it, without torch; the tests check it and the imported network against
predictions that real SB3 made (tests/fixtures/sb3/).
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import zipfile
from pathlib import Path

import numpy as np

from ..errors import QuarlError
from ..nets import keras_mlp
from .common import (RETIRED_IDS, VECNORM_CLIP_LAYER, VECNORM_PLAIN_FOLD, Imported,
                     PolicyImportError, check_spaces, current_env_id, diagonal_scale, env_spaces,
                     sha256)
from .safe_pickle import UnsafePickle, load_symbolic, load_torch_archive

ALGOS = ("dqn", "ppo", "a2c", "sac", "td3", "qrdqn", "tqc", "trpo", "ars", "recurrentppo")
CONTRIB = ("qrdqn", "tqc", "ars")          # sb3-contrib's own policy modules (TRPO uses SB3's)
DEFAULT_ACTIVATION = {"dqn": "relu", "ppo": "tanh", "a2c": "tanh", "sac": "relu", "td3": "relu",
                      "qrdqn": "relu", "tqc": "relu", "trpo": "tanh", "ars": "relu",
                      "recurrentppo": "tanh"}
TORCH_ACTIVATIONS = {"ReLU": "relu", "Tanh": "tanh"}


def _read_zip(path: Path) -> tuple[dict, dict[str, np.ndarray], str]:
    try:
        z = zipfile.ZipFile(path)
        names = set(z.namelist())
        if "data" not in names or "policy.pth" not in names:
            raise PolicyImportError(f"{path}: a zip, but not a Stable-Baselines3 model (no data and "
                               "policy.pth in it)")
        data = json.loads(z.read("data"))
        policy = z.read("policy.pth")
        version = z.read("_stable_baselines3_version").decode().strip() \
            if "_stable_baselines3_version" in names else "unknown"
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise PolicyImportError(f"{path}: not a readable zip ({e}); truncated download?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PolicyImportError(f"{path}: SB3's data entry is not JSON ({e})") from None
    except zipfile.error as e:   # CRC errors of a corrupted member
        raise PolicyImportError(f"{path}: a corrupted zip ({e})") from None
    return data, load_torch_archive(policy, f"{path}:policy.pth"), version


def _algo(data: dict, sd: dict, path: Path) -> str:
    """Which algorithm's policy this is: SB3's and sb3-contrib's policy modules name DQN, SAC,
    TD3, QR-DQN, TQC and ARS; PPO, A2C and TRPO share ActorCriticPolicy (and compute the same
    greedy action), told apart by their hyperparameters in the data."""
    module = (data.get("policy_class") or {}).get("__module__", "")
    m = re.fullmatch(r"stable_baselines3\.(dqn|sac|td3)\.policies", module) or \
        re.fullmatch(rf"sb3_contrib\.({'|'.join(CONTRIB)})\.policies", module)
    if m:
        return m.group(1)
    if module == "stable_baselines3.common.policies" and "action_net.weight" in sd:
        if "cg_max_steps" in data:          # TRPO's conjugate-gradient steps
            return "trpo"
        return "ppo" if "clip_range" in data else "a2c"
    if module == "sb3_contrib.common.recurrent.policies":     # RecurrentPPO's MlpLstmPolicy
        return "recurrentppo"
    hint = ""
    if "maskable" in module:    # MaskablePPO: argmax over the actions the env allows now
        hint = (" (MaskablePPO: its greedy action is the argmax over the actions the env's mask "
                "allows at each step, which the board is not given)")
    raise PolicyImportError(f"{path}: a policy from {module or 'an unknown module'} is not "
                       f"supported{hint}; supported: Stable-Baselines3 "
                       f"{', '.join(a.upper() for a in ALGOS)} with MlpPolicy")


def _space(entry, what: str, path: Path) -> dict | None:
    """A space from SB3's plain JSON fields (2.x writes `_shape`, 1.x `shape`; Discrete's `n`),
    or None when the entry has none of them (only the serialized pickle, which is never
    unpickled): the env's space is used then, as SB3's `custom_objects` does."""
    if not isinstance(entry, dict) or not entry.get(":type:"):
        return None
    kind = str(entry[":type:"])
    raw = entry.get("_shape", entry.get("shape"))
    try:
        shape = tuple(json.loads(raw)) if isinstance(raw, str) else \
            None if raw is None else tuple(int(d) for d in raw)
    except (json.JSONDecodeError, TypeError, ValueError):
        shape = None
    if kind.endswith("discrete.Discrete'>"):
        if "n" not in entry:
            return None
        return {"type": "discrete", "n": int(entry["n"]), "start": int(entry.get("start", 0))}
    if kind.endswith("box.Box'>"):
        if shape is None:
            return None
        return {"type": "box", "shape": shape, "dtype": entry.get("dtype", "float32")}
    raise PolicyImportError(f"{path}: {what} {kind} is not supported (Box observations; "
                       "Discrete or Box actions)")


# What a serialized (cloudpickle) space of SB3 1.x/2.x names: gym's or gymnasium's space
# classes and numpy's array, dtype and random-state reconstructors. The serialized part is read
# as inert data only to refuse a file whose pickle asks for anything else (never to use it).
# (a seeded space also holds its numpy Generator: its bit generators by name, e.g. PCG64)
SPACE_GLOBALS = ("gym.spaces.", "gymnasium.spaces.", "numpy.core.", "numpy._core.",
                 "numpy.dtype", "numpy.ndarray", "numpy.random._pickle.",
                 "numpy.random._pcg64.", "numpy.random._philox.", "numpy.random._sfc64.",
                 "numpy.random._mt19937.", "numpy.random._generator.",
                 "numpy.random.bit_generator.", "collections.OrderedDict")


def _check_serialized_spaces(data: dict, path: Path) -> None:
    """Refuse a zip whose serialized spaces name a global beyond SPACE_GLOBALS (a tampered
    file: SB3 itself would run it on load). A serialized part that is not a readable pickle
    at all is ignored, as SB3 does when the spaces come from custom_objects."""
    for key in ("observation_space", "action_space"):
        entry = data.get(key)
        blob = entry.get(":serialized:") if isinstance(entry, dict) else None
        if not isinstance(blob, str):
            continue
        try:
            raw = base64.b64decode(blob)
        except (binascii.Error, ValueError):
            continue
        try:
            load_symbolic(raw, f"{path}: the serialized {key}", allowed=SPACE_GLOBALS)
        except UnsafePickle:
            raise
        except QuarlError:
            continue


def _activation(data: dict, algo: str, path: Path) -> str:
    kwargs = data.get("policy_kwargs") or {}
    fn = kwargs.get("activation_fn") if isinstance(kwargs, dict) else None
    if fn is None:
        return DEFAULT_ACTIVATION[algo]
    m = re.search(r"torch\.nn\.modules\.activation\.(\w+)", str(fn))
    if not m or m.group(1) not in TORCH_ACTIVATIONS:
        raise PolicyImportError(f"{path}: activation {fn} is not supported (ReLU, Tanh)")
    return TORCH_ACTIVATIONS[m.group(1)]


def _sequential(sd: dict, prefix: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The Linear layers of an nn.Sequential under `prefix` (prefix.<i>.weight/bias), in order,
    as (kernel [in, out], bias)."""
    idx = sorted({int(m.group(1)) for k in sd
                  if (m := re.fullmatch(re.escape(prefix) + r"\.(\d+)\.weight", k))})
    return [(sd[f"{prefix}.{i}.weight"].T, sd[f"{prefix}.{i}.bias"]) for i in idx]


def _linear(sd: dict, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    return sd[f"{prefix}.weight"].T, sd[f"{prefix}.bias"]


# SB3's NatureCNN (CnnPolicy): three convolutions (these strides, no padding), each with ReLU,
# then Flatten and a Linear + ReLU of features_dim; the kernel sizes are in the weights.
NATURE_CNN_STRIDES = (4, 2, 1)


def _nature_cnn(sd: dict, prefix: str, path: Path):
    """The convolutions [(weight [out, in, kh, kw], bias, stride)] and the Linear (kernel
    [in, out], bias) of a NatureCNN features extractor under `prefix`, or None if there is no
    features extractor with weights there."""
    convs = [k for k in sd if k.startswith(prefix + "cnn.") and k.endswith(".weight")]
    if not convs and not any(k.startswith(prefix) for k in sd):
        return None
    idx = sorted(int(k[len(prefix) + 4:].split(".")[0]) for k in convs)
    if idx != [0, 2, 4] or f"{prefix}linear.0.weight" not in sd:
        raise PolicyImportError(f"{path}: a features extractor that is not SB3's NatureCNN "
                           f"({', '.join(sorted(k for k in sd if k.startswith(prefix)))[:200]}); "
                           "MlpPolicy and CnnPolicy with NatureCNN are supported")
    conv = [(sd[f"{prefix}cnn.{i}.weight"], sd[f"{prefix}cnn.{i}.bias"], s)
            for i, s in zip(idx, NATURE_CNN_STRIDES)]
    return conv, _linear(sd, f"{prefix}linear.0")


def _hardtanh_tanh(w: np.ndarray, b: np.ndarray, c: float):
    """SAC's gSDE actor clips the mean to [-c, c] (nn.Hardtanh, SB3's clip_mean) before the
    tanh. The board has ReLU and tanh, so the clip is made of them:
    clip(x, -c, c) = relu(x + c) - relu(x - c) - c, as two Dense layers (the second ends in
    the tanh); exact but for float32 rounding x + c - c (an ulp of c, ~2e-7 for c = 2). What SB3
    computes, tanh(clip(x)), is the reference's `("clip_tanh", c)`, checked at import."""
    n = w.shape[1]
    both = (np.concatenate([w, w], axis=1), np.concatenate([b + c, b - c]).astype(np.float32),
            "relu")
    eye = np.eye(n, dtype=np.float32)
    return [both, (np.concatenate([eye, -eye], axis=0), np.full(n, -c, np.float32), "tanh")]


def _reference_layers(layers, sd: dict, algo: str, clip_mean: float):
    """The layers SB3's forward uses: ours, except that the gSDE actor's clip-and-tanh is one
    step there (see _hardtanh_tanh)."""
    if algo in ("sac", "tqc") and "actor.mu.0.weight" in sd:
        w, b = _linear(sd, "actor.mu.0")
        return layers[:-3] + [(w, b, ("clip_tanh", clip_mean)), layers[-1]]
    return layers


def _layers(sd: dict, algo: str, act: str, action: dict, low, high, path: Path,
            clip_mean: float = 2.0, squash: bool = False):
    """The greedy network's dense part as [(kernel, bias, activation)] (see the module
    docstring), after a features extractor when the policy has one (see _nature_cnn).
    gSDE policies (use_sde=True) act with the mean, as SB3's predict(deterministic=True):
    their log_std (and any SDE features) are not part of it."""
    try:
        if any(".extractors." in k for k in sd):
            raise PolicyImportError(f"{path}: a MultiInputPolicy (dict observations) is not "
                               "supported yet")
        if any("lstm" in k for k in sd):
            raise PolicyImportError(f"{path}: a recurrent (LSTM) policy is not supported yet")
        if algo in ("sac", "td3") and any("features_extractor.cnn" in k for k in sd):
            raise PolicyImportError(f"{path}: a CnnPolicy for {algo.upper()} is not supported yet")
        if algo == "dqn":
            body = _sequential(sd, "q_net.q_net")
            return [(w, b, act) for w, b in body[:-1]] + [(*body[-1], "linear")]
        if algo == "qrdqn":
            return _qrdqn_layers(sd, act, action, path)
        if algo == "ars":
            return _ars_layers(sd, act, action, low, high, squash, path)
        if algo in ("ppo", "a2c", "trpo"):
            if any(k.startswith("mlp_extractor.shared_net") for k in sd):
                raise PolicyImportError(f"{path}: shared layers (net_arch with a shared part) are "
                                   "not supported")
            hidden = [(w, b, act) for w, b in _sequential(sd, "mlp_extractor.policy_net")]
            return hidden + [(*_linear(sd, "action_net"), "linear")]
        if algo in ("sac", "tqc"):       # TQC's actor is SAC's (its critics are distributional)
            hidden = [(w, b, act) for w, b in _sequential(sd, "actor.latent_pi")]
            if "actor.mu.0.weight" in sd:   # gSDE: mu = Sequential(Linear, Hardtanh)
                return hidden + _hardtanh_tanh(*_linear(sd, "actor.mu.0"), clip_mean) + \
                    [diagonal_scale(low, high)]
            return hidden + [(*_linear(sd, "actor.mu"), "tanh"), diagonal_scale(low, high)]
        if algo == "td3":
            body = _sequential(sd, "actor.mu")
            return [(w, b, act) for w, b in body[:-1]] + [(*body[-1], "tanh"),
                                                          diagonal_scale(low, high)]
    except KeyError as e:
        raise PolicyImportError(f"{path}: tensor {e} missing for an SB3 {algo.upper()} policy") \
            from None
    raise AssertionError(algo)


def _qrdqn_layers(sd: dict, act: str, action: dict, path: Path):
    """QR-DQN (sb3-contrib): the quantile network outputs n_quantiles x n_actions values, viewed
    as [n_quantiles, n_actions]; the greedy action is the argmax of the quantiles' mean. The
    mean is linear, so it is folded into the last layer: its rows for action a are averaged over
    the quantiles (in float64), and the network then outputs the n_actions mean Q-values."""
    body = _sequential(sd, "quantile_net.quantile_net")
    kernel, bias = body[-1]                          # [in, n_quantiles * n_actions]
    n = int(action.get("n", 0))
    if n <= 0 or kernel.shape[1] % n:
        raise PolicyImportError(f"{path}: a QR-DQN head of {kernel.shape[1]} outputs does not split "
                           f"into {n} actions")
    q = kernel.shape[1] // n
    k = kernel.astype(np.float64).reshape(-1, q, n).mean(axis=1)
    b = bias.astype(np.float64).reshape(q, n).mean(axis=0)
    return [(w, b_, act) for w, b_ in body[:-1]] + [(k.astype(np.float32), b.astype(np.float32),
                                                     "linear")]


def _ars_layers(sd: dict, act: str, action: dict, low, high, squash: bool, path: Path):
    """ARS (sb3-contrib): `action_net`, a Linear (ARSLinearPolicy, often without bias; an
    nn.Linear of its own in sb3-contrib < 1.4, the first of an nn.Sequential after) or an MLP
    (ARSPolicy). Discrete actions: the argmax of its outputs. Box actions with squash_output
    (ARSPolicy's default): tanh, then predict() rescales to the bounds; without it (the linear
    policy's default) the output is the action, clipped to the bounds."""
    if "action_net.weight" in sd:
        w = sd["action_net.weight"]
        body = [(w.T, sd.get("action_net.bias", np.zeros(w.shape[0], w.dtype)))]
    else:
        idx = sorted({int(m.group(1)) for k in sd
                      if (m := re.fullmatch(r"action_net\.(\d+)\.weight", k))})
        body = [(sd[f"action_net.{i}.weight"].T,
                 sd.get(f"action_net.{i}.bias",
                        np.zeros(sd[f"action_net.{i}.weight"].shape[0], np.float32)))
                for i in idx]
    if not body:
        raise PolicyImportError(f"{path}: an ARS policy without action_net weights")
    hidden = [(w, b, act) for w, b in body[:-1]]
    if action["type"] == "box" and squash:
        return hidden + [(*body[-1], "tanh"), diagonal_scale(low, high)]
    return hidden + [(*body[-1], "linear")]


def _ars_squashes(data: dict) -> bool:
    """Whether an ARS policy squashes Box actions with tanh: its squash_output argument, else
    the class's default (ARSPolicy True, ARSLinearPolicy False). The class is told by the name
    in the JSON's plain `__init__` string (the pickled class itself is never loaded)."""
    kwargs = data.get("policy_kwargs") if isinstance(data.get("policy_kwargs"), dict) else {}
    if "squash_output" in kwargs:
        return bool(kwargs["squash_output"])
    return "ARSLinearPolicy" not in str((data.get("policy_class") or {}).get("__init__", ""))


def _vecnormalize(path: Path) -> dict:
    """mean, var, epsilon, clip_obs of a VecNormalize pickle, read as inert data."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise PolicyImportError(f"cannot read {path}: {e}") from None
    obj = load_symbolic(raw, str(path))
    if not hasattr(obj, "attrs") or not obj.type_name.endswith("VecNormalize"):
        raise PolicyImportError(f"{path}: not a VecNormalize file (it holds {obj!r:.60})")
    a = obj.attrs()
    if not a.get("norm_obs", True):
        return {}
    if a.get("norm_obs_keys"):
        raise PolicyImportError(f"{path}: VecNormalize of dict observations is not supported")
    rms = a.get("obs_rms")
    r = rms.attrs() if hasattr(rms, "attrs") else {}
    try:
        mean, var = np.asarray(r["mean"], np.float64), np.asarray(r["var"], np.float64)
        eps, clip = float(a["epsilon"]), float(a["clip_obs"])
    except (KeyError, TypeError, ValueError):
        raise PolicyImportError(f"{path}: VecNormalize without obs_rms mean/var, epsilon and "
                           "clip_obs") from None
    return {"mean": mean, "var": var, "epsilon": eps, "clip_obs": clip}


def _fold(layers, norm: dict):
    """VecNormalize's (obs - mean) / sqrt(var + eps) folded into the first Dense layer."""
    kernel, bias, act = layers[0]
    s = np.sqrt(norm["var"] + norm["epsilon"]).reshape(-1)
    mean = norm["mean"].reshape(-1)
    k64 = kernel.astype(np.float64)
    return [((k64 / s[:, None]).astype(np.float32),
             (bias - (mean / s) @ k64).astype(np.float32), act)] + layers[1:]


def clip_reachable(norm: dict, low, high) -> list[int]:
    """The observation values whose normalised value z = (x - mean) / s can pass VecNormalize's
    +-clip_obs for some x within the env's observation bounds [low, high] (an infinite bound
    always can): where there is one, the clip is part of the policy and the network has it
    (_fold_clipped); where there is none, the clip never acts and the plain fold is exact."""
    s = np.sqrt(norm["var"] + norm["epsilon"]).reshape(-1)
    mean, c = norm["mean"].reshape(-1), norm["clip_obs"]
    low = np.broadcast_to(np.asarray(low, np.float64).reshape(-1), mean.shape)
    high = np.broadcast_to(np.asarray(high, np.float64).reshape(-1), mean.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        reach = ~np.isfinite(low) | ~np.isfinite(high) | ((low - mean) / s < -c) | \
            ((high - mean) / s > c)
    return [int(i) for i in np.flatnonzero(reach)]


def _fold_clipped(layers, norm: dict, reach: list[int]):
    """VecNormalize with its clip, as a Dense layer with relu before the first layer: with
    z = (x - mean) / s and c = clip_obs,

        clip(z, -c, c) = relu(z) - relu(-z) - relu(z - c) + relu(-z - c)

    where the last two terms are needed only for the values `reach` whose clip the env's
    bounds can reach (clip_reachable). The clip layer's kernel is diagonal blocks of +-1/s,
    its biases -+mean/s and -+mean/s - c, and the first layer (K, b) takes [K; -K; -K_reach;
    K_reach] and b. (The one-unit form -c + (c/3) relu6(3 (z + c) / c) is exact too, but it
    carries z + c in [0, 2c] and the first layer then cancels c sum_rows(K): on the zoo's
    a2c/BipedalWalkerHardcore-v3 its float32 actions were 7e-5 from SB3's float64 forward,
    this form's 7e-6.)"""
    kernel, bias, act = layers[0]
    s = np.sqrt(norm["var"] + norm["epsilon"]).reshape(-1)
    mean, c = norm["mean"].reshape(-1), float(norm["clip_obs"])
    n = len(s)
    pick = np.eye(n)[:, reach]                                  # [n, len(reach)]
    inv = np.diag(1.0 / s)
    k0 = np.concatenate([inv, -inv, inv @ pick, -inv @ pick], axis=1)
    m = mean / s
    b0 = np.concatenate([-m, m, -m[reach] - c, m[reach] - c])
    k = kernel.astype(np.float64)
    k1 = np.concatenate([k, -k, -k[reach], k[reach]], axis=0)
    return [(k0.astype(np.float32), b0.astype(np.float32), "relu"),
            (k1.astype(np.float32), np.asarray(bias, np.float32), act)] + layers[1:]


_ACT = {"relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh, "linear": lambda x: x}


def _conv_nchw(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int) -> np.ndarray:
    """torch.nn.Conv2d (no padding) in numpy float64: x [n, c, h, w], w [o, c, kh, kw]."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    win = win[:, :, ::stride, ::stride][:, :, :oh, :ow]           # [n, c, oh, ow, kh, kw]
    return np.einsum("ncxykl,ockl->noxy", win, w.astype(np.float64)) + \
        b.astype(np.float64)[None, :, None, None]


def numpy_reference(layers, norm: dict | None, cnn=None, scale_images: bool = True):
    """SB3's forward in numpy float64 from the unfolded tensors: for a CnnPolicy the
    channel-first transpose SB3 applies to HWC images (VecTransposeImage), /255, NatureCNN in
    NCHW and its Flatten; VecNormalize (with the clip); the layers. It gives what the
    imported network gives, a Gaussian policy's mean unclipped: the clip to the bounds that
    predict() applies is the action head's, on both sides of the fidelity check (clipping
    here alone made run.json's max_abs_error_outputs the distance from the mean to the
    bounds)."""
    def run(obs):
        x = np.asarray(obs, np.float64)
        if cnn is not None:
            x = x.transpose(0, 3, 1, 2) / (255.0 if scale_images else 1.0)
            for w, b, stride in cnn[0]:
                x = np.maximum(_conv_nchw(x, w, b, stride), 0.0)
            k, b = cnn[1]
            x = np.maximum(x.reshape(len(x), -1) @ k.astype(np.float64) + b, 0.0)
        x = x.reshape(len(obs), -1)
        if norm:
            x = np.clip((x - norm["mean"].reshape(-1)) / np.sqrt(norm["var"].reshape(-1)
                                                                + norm["epsilon"]),
                        -norm["clip_obs"], norm["clip_obs"])
        for k, b, act in layers:
            x = x @ k.astype(np.float64) + b.astype(np.float64)
            x = np.tanh(np.clip(x, -act[1], act[1])) if isinstance(act, tuple) else _ACT[act](x)
        return x
    return run


def keras_nature_cnn(obs_shape, cnn, layers, scale_images: bool, name: str):
    """NatureCNN as Keras layers on the env's HWC images (what the board receives), then the
    dense layers. SB3's /255 is folded into the first convolution's weights, and the Flatten's
    order is fixed in the Linear layer after it: torch flattens [C, H, W], Keras [H, W, C]."""
    import tensorflow as tf
    inp = tf.keras.Input(shape=tuple(obs_shape), dtype=tf.float32, name="observation")
    x, shape = inp, None
    for i, (w, b, stride) in enumerate(cnn[0]):
        k = w.transpose(2, 3, 1, 0).astype(np.float64)           # [kh, kw, in, out]
        if i == 0 and scale_images:
            k = k / 255.0
        conv = tf.keras.layers.Conv2D(w.shape[0], w.shape[2:], strides=stride, padding="valid",
                                      activation="relu", name=f"conv_{i}")
        x = conv(x)
        conv.set_weights([k.astype(np.float32), b.astype(np.float32)])
        shape = tuple(int(d) for d in x.shape[1:])              # (H', W', C')
    x = tf.keras.layers.Flatten()(x)
    kernel, bias = cnn[1]                                       # rows in torch's C, H, W order
    h, w_, c = shape
    kernel = kernel.reshape(c, h, w_, -1).transpose(1, 2, 0, 3).reshape(h * w_ * c, -1)
    for i, (k, b, act) in enumerate([(kernel, bias, "relu"), *layers]):
        dense = tf.keras.layers.Dense(k.shape[1], activation=act, name=f"dense_{i}")
        x = dense(x)
        dense.set_weights([np.asarray(k, np.float32), np.asarray(b, np.float32)])
    return tf.keras.Model(inp, x, name=name)


def _policy_kwargs(data: dict) -> dict:
    kwargs = data.get("policy_kwargs")
    return kwargs if isinstance(kwargs, dict) else {}


def _check_network_fits(layers, obs_space, action: dict, env_id: str, path: Path) -> None:
    """With the spaces taken from the env, the network's own sizes are what ties the two: its
    inputs (the first Linear's) and outputs against the env's observations and actions."""
    n_in, n_out = int(layers[0][0].shape[0]), int(layers[-1][0].shape[1])
    want_in = int(np.prod(obs_space.shape))
    want_out = action["n"] if action["type"] == "discrete" else int(np.prod(action["shape"]))
    if (n_in, n_out) != (want_in, want_out):
        acts = f"{want_out} discrete actions" if action["type"] == "discrete" else \
            f"actions of shape {tuple(action['shape'])}"
        raise PolicyImportError(f"{path}: the network takes {n_in} inputs and gives {n_out} "
                           f"outputs; {env_id} has observations of shape "
                           f"{tuple(obs_space.shape)} and {acts}")


def load(path: Path, env_id: str | None, vecnormalize: Path | None = None) -> Imported:
    path = Path(path)
    data, sd, version = _read_zip(path)
    algo = _algo(data, sd, path)
    _check_serialized_spaces(data, path)
    obs = _space(data.get("observation_space"), "observation space", path)
    action = _space(data.get("action_space"), "action space", path)
    env_id, renamed = current_env_id(env_id or guess_env(path))
    spaces_from = "the zip's JSON fields"
    if obs is None or action is None:   # only serialized in the zip: the env's, as SB3 does
        spaces_from = f"the env {env_id} (the zip holds them only serialized)"
        env_obs, env_act = env_spaces(env_id)
        obs, action = obs or env_obs, action or env_act
    if obs["type"] != "box":
        raise PolicyImportError(f"{path}: discrete observations are not supported")
    if algo == "recurrentppo":
        return _load_recurrent(path, data, sd, version, obs, action, env_id, vecnormalize)
    kwargs = _policy_kwargs(data)
    if algo in ("ppo", "a2c") and kwargs.get("squash_output"):
        raise PolicyImportError(f"{path}: a gSDE policy with squash_output=True is not supported")
    prefix = {"dqn": "q_net.features_extractor."}.get(algo, "features_extractor.")
    cnn = _nature_cnn(sd, prefix, path)
    shape = tuple(obs["shape"])
    if cnn is not None:   # SB3 saved the channel-first space VecTransposeImage made of HWC images
        if len(shape) != 3 or obs.get("dtype") != "uint8":
            raise PolicyImportError(f"{path}: a CnnPolicy on observations of shape {shape}, dtype "
                               f"{obs.get('dtype')}: uint8 images are supported")
        if spaces_from == "the zip's JSON fields":
            shape = (shape[1], shape[2], shape[0])
    obs_space, act_space = check_spaces(env_id, shape, action, str(path))
    if cnn is not None and tuple(obs_space.shape) != shape:
        raise PolicyImportError(f"{path}: channel-first images from the env are not supported")
    act = _activation(data, algo, path)
    low = getattr(act_space, "low", None)
    high = getattr(act_space, "high", None)
    clip_mean = float(kwargs.get("clip_mean", 2.0))
    layers = _layers(sd, algo, act, action, low, high, path, clip_mean,
                     squash=_ars_squashes(data))
    if cnn is None:
        _check_network_fits(layers, obs_space, action, env_id, path)
    if vecnormalize is None and path.with_suffix(".vecnormalize.pkl").is_file():
        vecnormalize = path.with_suffix(".vecnormalize.pkl")
    if vecnormalize is None and (path.parent / "vecnormalize.pkl").is_file():
        vecnormalize = path.parent / "vecnormalize.pkl"
    norm = _vecnormalize(vecnormalize) if vecnormalize is not None else {}
    if norm and cnn is not None:
        raise PolicyImportError(f"{vecnormalize}: VecNormalize with a CnnPolicy is not supported")
    if norm and norm["mean"].size != int(np.prod(obs["shape"])):
        raise PolicyImportError(f"{vecnormalize}: statistics for {norm['mean'].size} observation "
                           f"values, the policy takes {int(np.prod(obs['shape']))}")
    reach = clip_reachable(norm, obs_space.low, obs_space.high) if norm and cnn is None else []
    folded = layers if not norm else _fold_clipped(layers, norm, reach) if reach else \
        _fold(layers, norm)
    # SB3 clips a Gaussian policy's action to the bounds in predict(); so does the head
    # ("identity": the output clipped), so the network itself, and the reference, end at the
    # mean.
    scale_images = bool(kwargs.get("normalize_images", True))
    if cnn is None:
        model = keras_mlp(obs["shape"], folded, name=f"sb3_{algo}")
    else:
        model = keras_nature_cnn(shape, cnn, folded, scale_images, name=f"sb3_{algo}_cnn")
    source = {"kind": "stable-baselines3", "file": path.name, "sha256": sha256(path),
              "version": version, "algo": algo.upper(),
              "policy": "MlpPolicy" if cnn is None else "CnnPolicy",
              "num_timesteps": data.get("num_timesteps"), "spaces_from": spaces_from}
    if data.get("use_sde"):
        source["gsde"] = "the deterministic action is the mean; log_std and SDE parameters unused"
    if renamed:
        source["env_renamed"] = renamed
    if norm:
        source["vecnormalize"] = {"file": Path(vecnormalize).name,
                                  "sha256": sha256(vecnormalize),
                                  "clip_obs": norm["clip_obs"], "epsilon": norm["epsilon"],
                                  "folded_into": VECNORM_CLIP_LAYER if reach else VECNORM_PLAIN_FOLD}
        if reach:
            source["vecnormalize"]["clip_reachable"] = reach
    # the output layer (and the rescale)
    n_head = 2 if algo in ("sac", "td3", "tqc") or (
        algo == "ars" and action["type"] == "box" and _ars_squashes(data)) else 1
    if algo in ("sac", "tqc") and "actor.mu.0.weight" in sd:
        n_head = 3                                  # the gSDE clip is two layers
    ref_layers = _reference_layers(layers, sd, algo, clip_mean)
    return Imported(model=model, env_id=env_id, algo=f"sb3-{algo}", source=source,
                    reference=numpy_reference(ref_layers, norm, cnn, scale_images),
                    reference_name="SB3's forward in numpy float64 from the zip's tensors",
                    network={"type": "mlp" if cnn is None else "cnn", "activation": act,
                             "hidden": [int(k.shape[1]) for k, _, _ in layers[:-n_head]],
                             **({} if cnn is None else {"convolutions": [
                                 [int(d) for d in w.shape] + [s] for w, _, s in cnn[0]],
                                 "features": int(cnn[1][0].shape[1])})},
                    unfolded=(lambda obs: _clipped(norm, obs)) if norm else None,
                    normalization=(VECNORM_CLIP_LAYER if reach else VECNORM_PLAIN_FOLD) if norm else None,
                    rounding_bound=cnn is None)


def _find_vecnormalize(path: Path, given: Path | None) -> Path | None:
    """--vecnormalize, else NAME.vecnormalize.pkl or vecnormalize.pkl beside the zip."""
    for candidate in (given, path.with_suffix(".vecnormalize.pkl"),
                      path.parent / "vecnormalize.pkl"):
        if candidate is not None and Path(candidate).is_file():
            return Path(candidate)
    return given


def recurrent_layers(sd: dict, act: str, path: Path):
    """RecurrentPPO's greedy actor (MlpLstmPolicy, one LSTM layer) as rl.recurrent's
    RecurrentLayers: observation -> lstm_actor -> mlp_extractor.policy_net -> action_net.
    torch's LSTM gates are in Keras's order (i, f, g=c, o); its two biases add up to Keras's
    one."""
    from ..rl.recurrent import RecurrentLayers
    if "lstm_actor.weight_ih_l1" in sd:
        raise PolicyImportError(f"{path}: an LSTM of more than one layer is not supported")
    if any(k.startswith("features_extractor.cnn") or ".cnn." in k for k in sd):
        raise PolicyImportError(f"{path}: a recurrent CnnLstmPolicy is not supported yet")
    try:
        lstm = (sd["lstm_actor.weight_ih_l0"].T.astype(np.float32),
                sd["lstm_actor.weight_hh_l0"].T.astype(np.float32),
                (sd["lstm_actor.bias_ih_l0"].astype(np.float64)
                 + sd["lstm_actor.bias_hh_l0"]).astype(np.float32))
        hidden = [(w, b, act) for w, b in _sequential(sd, "mlp_extractor.policy_net")]
        return RecurrentLayers([], lstm, hidden + [(*_linear(sd, "action_net"), "linear")])
    except KeyError as e:
        raise PolicyImportError(f"{path}: tensor {e} missing for a RecurrentPPO policy") from None


def _lstm_reference(layers, norm: dict):
    """SB3's RecurrentPPO actor stepped in numpy float64 from the unfolded arrays: VecNormalize
    (with its clip), torch's LSTM (no cell clip), the MLP and the logits. Returns step(obs [1,
    *obs], state | None) -> (logits, state), a None state starting an episode."""
    kernel, rec, bias = (a.astype(np.float64) for a in layers.lstm)
    u = rec.shape[0]
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731

    def step(obs, state):
        x = np.asarray(obs, np.float64).reshape(1, -1)
        if norm:
            x = np.clip((x - norm["mean"].reshape(-1)) / np.sqrt(norm["var"].reshape(-1)
                                                                + norm["epsilon"]),
                        -norm["clip_obs"], norm["clip_obs"])
        h, c = state if state is not None else (np.zeros((1, u)), np.zeros((1, u)))
        z = x @ kernel + h @ rec + bias
        i, f, g, o = sig(z[:, :u]), sig(z[:, u:2 * u]), np.tanh(z[:, 2 * u:3 * u]), sig(z[:, 3 * u:])
        c = f * c + i * g
        h = o * np.tanh(c)
        y = h
        for k, b, a in layers.dense_out:
            y = _ACT[a](y @ k.astype(np.float64) + b.astype(np.float64))
        return y, (h, c)
    return step


def _recurrent_fidelity(env_id: str, layers, folded, norm: dict, episodes: int = 5) -> dict:
    """The imported one-step policy (folded, with TFLite's cell clip) against SB3's recurrence
    in numpy (unfolded, unclipped) on greedy episodes of the imported policy, state reset at
    each start (seeds off the test seeds): the same argmax at every step, and how far the cell
    state got (past CELL_CLIP the converted LSTM clips where SB3's does not)."""
    from ..quant.calibration import CALIBRATION_SEED_BASE
    from ..rl.envs import make_gym
    from ..rl.recurrent import CELL_CLIP
    ref_step = _lstm_reference(layers, norm)
    env = make_gym(env_id)
    steps = agree = 0
    cell = 0.0
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=CALIBRATION_SEED_BASE + 777 + k)
            ours, theirs, done = folded.zero_state(), None, False
            while not done and steps < 20_000:
                o = np.asarray(obs, np.float32)[None]
                out, ours = folded.step(o, ours)
                ref, theirs = ref_step(o, theirs)
                cell = max(cell, float(np.max(np.abs(theirs[1]))))
                a = int(np.argmax(out[0]))
                agree += a == int(np.argmax(ref[0]))
                steps += 1
                obs, _, term, trunc, _ = env.step(a)
                done = term or trunc
    finally:
        env.close()
    result = {"observations": steps, "episodes": episodes,
              "reference": "sb3-contrib RecurrentPPO's LSTM in numpy float64 from the zip's "
                           "tensors, state reset per episode",
              "argmax_agreement": agree / max(steps, 1), "max_abs_cell_state": cell,
              "cell_clip": CELL_CLIP}
    result["ok"] = agree == steps
    if not result["ok"]:
        raise PolicyImportError(f"the imported recurrent policy does not act as SB3's does on "
                           f"{steps} steps of {env_id}: {result}")
    return result


def _load_recurrent(path: Path, data: dict, sd: dict, version: str, obs: dict, action: dict,
                    env_id: str, vecnormalize: Path | None) -> Imported:
    """A RecurrentPPO zip (MlpLstmPolicy, Discrete actions) as a recurrent run: the one-step
    Keras model (rl/recurrent.py) whose LSTM state the board keeps and resets per episode."""
    from ..rl.recurrent import fold_normalization, one_step_keras
    if obs["type"] != "box" or action["type"] != "discrete":
        raise PolicyImportError(f"{path}: RecurrentPPO with {action['type']} actions: recurrent "
                           "policies are supported with Discrete actions (the argmax head)")
    check_spaces(env_id, tuple(obs["shape"]), action, str(path))
    layers = recurrent_layers(sd, _activation(data, "recurrentppo", path), path)
    vecnormalize = _find_vecnormalize(path, vecnormalize)
    norm = _vecnormalize(vecnormalize) if vecnormalize is not None else {}
    folded = layers if not norm else fold_normalization(
        layers, norm["mean"], np.sqrt(norm["var"] + norm["epsilon"]))
    checked = _recurrent_fidelity(env_id, layers, folded, norm)
    model = one_step_keras(tuple(obs["shape"]), folded, name="sb3_recurrentppo")
    source = {"kind": "stable-baselines3", "file": path.name, "sha256": sha256(path),
              "version": version, "algo": "RecurrentPPO", "policy": "MlpLstmPolicy",
              "num_timesteps": data.get("num_timesteps")}
    if norm:
        source["vecnormalize"] = {"file": Path(vecnormalize).name,
                                  "sha256": sha256(vecnormalize), "clip_obs": norm["clip_obs"],
                                  "epsilon": norm["epsilon"], "folded_into": "the LSTM's input"}
    return Imported(model=model, env_id=env_id, algo="sb3-recurrentppo", source=source,
                    reference=lambda o: None, reference_name=checked["reference"],
                    network={"type": "lstm", "hidden": [int(k.shape[1]) for k, _, _ in
                                                        folded.dense_out[:-1]],
                             "lstm_units": folded.units, "activation": folded.dense_out[0][2]
                             if len(folded.dense_out) > 1 else "linear",
                             "head": "linear", "recurrent": True},
                    checked=checked, recurrent=folded)


def _clipped(norm: dict, obs: np.ndarray) -> int:
    """How many observations VecNormalize clips (the fold is exact only while it clips none)."""
    z = (np.asarray(obs, np.float64).reshape(len(obs), -1) - norm["mean"].reshape(-1)) / \
        np.sqrt(norm["var"].reshape(-1) + norm["epsilon"])
    return int(np.sum(np.any(np.abs(z) > norm["clip_obs"], axis=1)))


def guess_env(path: Path) -> str:
    """The env id from the file name (RL Zoo and the Hub name files after it, e.g.
    ppo-LunarLander-v3.zip) when it names a registered Gymnasium id (or a retired one that
    current_env_id maps, as the zoo's LunarLander-v2.zip); else an error asking for
    --env."""
    import gymnasium as gym
    stem = path.stem
    ids = [*gym.envs.registry, *(e for e in RETIRED_IDS if e not in gym.envs.registry)]
    found = [e for e in ids if re.search(rf"(^|[-_/]){re.escape(e)}$", stem)]
    if len(found) == 1:
        return found[0]
    raise PolicyImportError(f"{path}: which environment? give --env ID (the file name names "
                       f"{'none' if not found else ' and '.join(found)} of Gymnasium's ids)")
