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
(vecnormalize.fold_clipped); elsewhere the plain fold is exact, which the import checks on its
fidelity observations (and refuses a policy where one reaches the clip all the same).

`reference` re-does SB3's forward in numpy (float64) from the same tensors, the way SB3's
policy classes compute it, without torch; the tests check it and the imported network against
predictions that real SB3 made (tests/fixtures/sb3/).

This module puts the import together; its parts: sb3_format.py (what the zip holds, read as
data), sb3_networks.py (the network per algorithm, SB3's and sb3-contrib's), vecnormalize.py
(the fold), sb3_forward.py (the numpy reference, NatureCNN as Keras) and sb3_recurrent.py
(RecurrentPPO).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.nets import keras_mlp
from .bounded import short
from .common import (VECNORM_CLIP_LAYER, VECNORM_PLAIN_FOLD, Imported, PolicyImportError,
                     check_spaces, current_env_id, env_spaces, sha256)
from .sb3_format import (activation_of, algo_of, ars_squashes, check_serialized_spaces,
                         clip_mean_of, guess_env, policy_kwargs, read_zip, space_of)
from .sb3_forward import keras_nature_cnn, numpy_reference
from .sb3_networks import (check_chain, check_network_fits, dense_layers, nature_cnn,
                           reference_layers)
from .sb3_recurrent import load_recurrent
from .vecnormalize import (clip_reachable, clipped_count, fold, fold_clipped, read_vecnormalize,
                           vecnormalize_file)


def load(path: Path, env_id: str | None, vecnormalize: Path | None = None) -> Imported:
    """An SB3 zip as an imported policy: the greedy network as Keras, VecNormalize folded in,
    and SB3's forward in numpy as the reference (a RecurrentPPO zip: sb3_recurrent.py)."""
    path = Path(path)
    data, sd, version = read_zip(path)
    algo = algo_of(data, sd, path)
    check_serialized_spaces(data, path)
    obs, action, env_id, renamed, spaces_from = _spaces(data, env_id, path)
    if algo == "recurrentppo":
        return load_recurrent(path, data, sd, version, obs, action, env_id, vecnormalize)
    kwargs = policy_kwargs(data)
    if algo in ("ppo", "a2c") and kwargs.get("squash_output"):
        raise PolicyImportError(f"{path}: a gSDE policy with squash_output=True is not supported")
    cnn, shape, obs_space, act_space = _features(sd, algo, obs, action, env_id, spaces_from,
                                                 path)
    act = activation_of(data, algo, path)
    low = getattr(act_space, "low", None)
    high = getattr(act_space, "high", None)
    clip_mean = clip_mean_of(kwargs, path)
    layers = dense_layers(sd, algo, act, action, low, high, path, clip_mean,
                          squash=ars_squashes(data))
    check_chain(layers, cnn, path)
    if cnn is None:
        check_network_fits(layers, obs_space, action, env_id, path)
    vecnormalize = vecnormalize_file(path, vecnormalize)
    norm, reach = _normalization(vecnormalize, obs, obs_space, cnn)
    folded = layers if not norm else fold_clipped(layers, norm, reach) if reach else \
        fold(layers, norm)
    # SB3 clips a Gaussian policy's action to the bounds in predict(); so does the head
    # ("identity": the output clipped), so the network itself, and the reference, end at the
    # mean.
    scale_images = bool(kwargs.get("normalize_images", True))
    try:
        if cnn is None:
            model = keras_mlp(obs["shape"], folded, name=f"sb3_{algo}")
        else:
            model = keras_nature_cnn(shape, cnn, folded, scale_images, name=f"sb3_{algo}_cnn")
    except (ValueError, IndexError) as e:   # a CNN's kernels that do not fit its images
        raise PolicyImportError(f"{path}:policy.pth: its tensors do not make a network on "
                                f"observations of shape {shape} ({short(str(e), 100)})") from None
    source = _source(path, data, version, algo, cnn, spaces_from, renamed, vecnormalize, norm,
                     reach)
    ref_layers = reference_layers(layers, sd, algo, clip_mean)
    return Imported(model=model, env_id=env_id, algo=f"sb3-{algo}", source=source,
                    reference=numpy_reference(ref_layers, norm, cnn, scale_images),
                    reference_name="SB3's forward in numpy float64 from the zip's tensors",
                    network=_network(layers, cnn, act, _head_size(algo, action, data, sd)),
                    unfolded=(lambda obs: clipped_count(norm, obs)) if norm else None,
                    normalization=(VECNORM_CLIP_LAYER if reach else VECNORM_PLAIN_FOLD) if norm else None,
                    rounding_bound=cnn is None)


def _spaces(data: dict, env_id: str | None, path: Path):
    """The observation and action spaces from the zip's JSON fields, else (when the zip holds
    them only serialized) the env's, as SB3 does; the env id to play on, its renaming note (or
    None) and where the spaces came from."""
    obs = space_of(data.get("observation_space"), "observation space", path)
    action = space_of(data.get("action_space"), "action space", path)
    env_id, renamed = current_env_id(env_id or guess_env(path))
    spaces_from = "the zip's JSON fields"
    if obs is None or action is None:   # only serialized in the zip: the env's, as SB3 does
        spaces_from = f"the env {env_id} (the zip holds them only serialized)"
        env_obs, env_act = env_spaces(env_id)
        obs, action = obs or env_obs, action or env_act
    if obs["type"] != "box":
        raise PolicyImportError(f"{path}: discrete observations are not supported")
    return obs, action, env_id, renamed, spaces_from


def _features(sd: dict, algo: str, obs: dict, action: dict, env_id: str, spaces_from: str,
              path: Path):
    """A CnnPolicy's NatureCNN (None for an MlpPolicy), the observation shape the Keras network
    takes (the env's HWC images for a CnnPolicy) and the env's spaces, checked against the
    policy's."""
    prefix = {"dqn": "q_net.features_extractor."}.get(algo, "features_extractor.")
    cnn = nature_cnn(sd, prefix, path)
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
    return cnn, shape, obs_space, act_space


def _normalization(vecnormalize: Path | None, obs: dict, obs_space, cnn) -> tuple[dict, list]:
    """VecNormalize's statistics ({} without a file, or when it does not normalise
    observations) and the observation values whose clip the env's bounds can reach."""
    norm = read_vecnormalize(vecnormalize) if vecnormalize is not None else {}
    if norm and cnn is not None:
        raise PolicyImportError(f"{vecnormalize}: VecNormalize with a CnnPolicy is not supported")
    if norm and norm["mean"].size != int(np.prod(obs["shape"])):
        raise PolicyImportError(f"{vecnormalize}: statistics for {norm['mean'].size} observation "
                           f"values, the policy takes {int(np.prod(obs['shape']))}")
    reach = clip_reachable(norm, obs_space.low, obs_space.high) if norm and cnn is None else []
    return norm, reach


def _source(path: Path, data: dict, version: str, algo: str, cnn, spaces_from: str,
            renamed: dict | None, vecnormalize: Path | None, norm: dict, reach: list) -> dict:
    """run.json's `source`: the zip, SB3's version, the algorithm and policy, where the spaces
    came from, and the VecNormalize file folded in."""
    source = {"kind": "stable-baselines3", "file": path.name, "sha256": sha256(path),
              "version": version, "algo": algo.upper(),
              "policy": "MlpPolicy" if cnn is None else "CnnPolicy",
              "num_timesteps": steps if isinstance(steps := data.get("num_timesteps"), int)
              else None, "spaces_from": spaces_from}
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
    return source


def _head_size(algo: str, action: dict, data: dict, sd: dict) -> int:
    """How many of the dense layers are the output layer (and the rescale), not hidden ones."""
    n_head = 2 if algo in ("sac", "td3", "tqc") or (
        algo == "ars" and action["type"] == "box" and ars_squashes(data)) else 1
    if algo in ("sac", "tqc") and "actor.mu.0.weight" in sd:
        n_head = 3                                  # the gSDE clip is two layers
    return n_head


def _network(layers, cnn, act: str, n_head: int) -> dict:
    """run.json's `network`: the type, activation and hidden widths (and a CNN's convolutions
    [out, in, kh, kw, stride] and its features)."""
    return {"type": "mlp" if cnn is None else "cnn", "activation": act,
            "hidden": [int(k.shape[1]) for k, _, _ in layers[:-n_head]],
            **({} if cnn is None else {"convolutions": [
                [int(d) for d in w.shape] + [s] for w, _, s in cnn[0]],
                "features": int(cnn[1][0].shape[1])})}
