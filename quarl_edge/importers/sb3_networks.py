"""The greedy network of an SB3 policy from its state dict, per algorithm (SB3's DQN, PPO, A2C,
SAC, TD3 and sb3-contrib's QR-DQN, TQC, TRPO, ARS; see sb3.py's table): the dense layers as
[(kernel [in, out], bias, activation)], NatureCNN's convolutions for a CnnPolicy, and the
check that the network's sizes fit the env."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .common import PolicyImportError, diagonal_scale


def sequential(sd: dict, prefix: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The Linear layers of an nn.Sequential under `prefix` (prefix.<i>.weight/bias), in order,
    as (kernel [in, out], bias)."""
    idx = sorted({int(m.group(1)) for k in sd
                  if (m := re.fullmatch(re.escape(prefix) + r"\.(\d+)\.weight", k))})
    return [(sd[f"{prefix}.{i}.weight"].T, sd[f"{prefix}.{i}.bias"]) for i in idx]


def linear(sd: dict, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """The nn.Linear under `prefix` as (kernel [in, out], bias)."""
    return sd[f"{prefix}.weight"].T, sd[f"{prefix}.bias"]


# SB3's NatureCNN (CnnPolicy): three convolutions (these strides, no padding), each with ReLU,
# then Flatten and a Linear + ReLU of features_dim; the kernel sizes are in the weights.
NATURE_CNN_STRIDES = (4, 2, 1)


def nature_cnn(sd: dict, prefix: str, path: Path):
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
    return conv, linear(sd, f"{prefix}linear.0")


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


def reference_layers(layers, sd: dict, algo: str, clip_mean: float):
    """The layers SB3's forward uses: ours, except that the gSDE actor's clip-and-tanh is one
    step there (see _hardtanh_tanh)."""
    if algo in ("sac", "tqc") and "actor.mu.0.weight" in sd:
        w, b = linear(sd, "actor.mu.0")
        return layers[:-3] + [(w, b, ("clip_tanh", clip_mean)), layers[-1]]
    return layers


def dense_layers(sd: dict, algo: str, act: str, action: dict, low, high, path: Path,
            clip_mean: float = 2.0, squash: bool = False):
    """The greedy network's dense part as [(kernel, bias, activation)] (see the module
    docstring), after a features extractor when the policy has one (see nature_cnn).
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
            body = sequential(sd, "q_net.q_net")
            return [(w, b, act) for w, b in body[:-1]] + [(*body[-1], "linear")]
        if algo == "qrdqn":
            return _qrdqn_layers(sd, act, action, path)
        if algo == "ars":
            return _ars_layers(sd, act, action, low, high, squash, path)
        if algo in ("ppo", "a2c", "trpo"):
            if any(k.startswith("mlp_extractor.shared_net") for k in sd):
                raise PolicyImportError(f"{path}: shared layers (net_arch with a shared part) are "
                                   "not supported")
            hidden = [(w, b, act) for w, b in sequential(sd, "mlp_extractor.policy_net")]
            return hidden + [(*linear(sd, "action_net"), "linear")]
        if algo in ("sac", "tqc"):       # TQC's actor is SAC's (its critics are distributional)
            hidden = [(w, b, act) for w, b in sequential(sd, "actor.latent_pi")]
            if "actor.mu.0.weight" in sd:   # gSDE: mu = Sequential(Linear, Hardtanh)
                return hidden + _hardtanh_tanh(*linear(sd, "actor.mu.0"), clip_mean) + \
                    [diagonal_scale(low, high)]
            return hidden + [(*linear(sd, "actor.mu"), "tanh"), diagonal_scale(low, high)]
        if algo == "td3":
            body = sequential(sd, "actor.mu")
            return [(w, b, act) for w, b in body[:-1]] + [(*body[-1], "tanh"),
                                                          diagonal_scale(low, high)]
    except KeyError as e:
        raise PolicyImportError(f"{path}: tensor {e} missing for an SB3 {algo.upper()} policy") \
            from None
    except (IndexError, ValueError):    # a 1-D weight, a head that does not split, ...
        raise PolicyImportError(f"{path}:policy.pth: the tensors' shapes do not make an SB3 "
                                f"{algo.upper()} network") from None
    raise AssertionError(algo)


def _qrdqn_layers(sd: dict, act: str, action: dict, path: Path):
    """QR-DQN (sb3-contrib): the quantile network outputs n_quantiles x n_actions values, viewed
    as [n_quantiles, n_actions]; the greedy action is the argmax of the quantiles' mean. The
    mean is linear, so it is folded into the last layer: its rows for action a are averaged over
    the quantiles (in float64), and the network then outputs the n_actions mean Q-values."""
    body = sequential(sd, "quantile_net.quantile_net")
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


def check_chain(layers, cnn, path: Path) -> None:
    """The tensors fit together as the network they are read as: 2-D kernels [in, out], each
    layer's input the previous one's output, biases of the layer's width (and a CNN's
    convolutions 4-D, each taking the previous one's channels); a policy.pth whose shapes do
    not is refused naming the layer, before any network is built."""
    where = f"{path}:policy.pth"
    prev = None
    for i, (kernel, bias, _act) in enumerate(layers):
        k, b = np.shape(kernel), np.shape(bias)
        if len(k) != 2 or b != (k[1],) or (prev is not None and k[0] != prev):
            raise PolicyImportError(f"{where}: dense layer {i} has a kernel of shape {k} and a "
                                    f"bias of shape {b}"
                                    + (f" after a layer of {prev} outputs" if prev else "")
                                    + ": the tensors do not make one network")
        prev = k[1]
    if cnn is not None:
        channels = None
        for i, (w, b, _stride) in enumerate(cnn[0]):
            shape = np.shape(w)
            if len(shape) != 4 or np.shape(b) != shape[:1] or \
                    (channels is not None and shape[1] != channels):
                raise PolicyImportError(f"{where}: convolution {i} has weights of shape {shape} "
                                        f"and a bias of shape {np.shape(b)}: the tensors do not "
                                        "make one network")
            channels = shape[0]
        k, b = np.shape(cnn[1][0]), np.shape(cnn[1][1])
        if len(k) != 2 or b != (k[1],) or k[1] != np.shape(layers[0][0])[0]:
            raise PolicyImportError(f"{where}: NatureCNN's linear layer has a kernel of shape "
                                    f"{k}: the tensors do not make one network")


def check_network_fits(layers, obs_space, action: dict, env_id: str, path: Path) -> None:
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
