"""What every importer shares: the Keras network it writes, the checks against the env, the
fidelity check against the source framework, and writing the run directory atomically."""
from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..core.errors import QuarlError
from ..core.files import writing
from ..core.nets import ACTIVATIONS, keras_call, mlp_layers
from ..core.run import Run, package_versions
from ..core.envs import make_gym, outputs_to_actions, space_info
from ..quant.calibration import (CALIBRATION_EPSILON, collect_calibration, recurrent_calibration,
                                 rollout_observations)
from ..rl.recurrent import WEIGHTS_FILE

# Fidelity at import: the imported network against the source on this many env observations.
FIDELITY_OBSERVATIONS = 1000
# continuous heads: the action within MAX_ABS_ERROR of the source's, or, for a plain MLP checked
# against an exact (float64) reference, within what float32 rounding can explain when that is
# more (rounding_bound); discrete heads must agree exactly on the argmax
MAX_ABS_ERROR = 1e-5
UNIT_ROUNDOFF = 2.0 ** -24      # float32's
# how SB3's VecNormalize is in the network (run.json's source.vecnormalize.folded_into and the
# fidelity record's "vecnormalize"), see importers/vecnormalize.py
VECNORM_PLAIN_FOLD = ("the first layer (the env's bounds keep every normalised value within "
                      "clip_obs)")
VECNORM_CLIP_LAYER = ("a clip layer (relu) and the first layer (the env's bounds let a "
                      "normalised value pass clip_obs)")


class PolicyImportError(QuarlError):
    """A policy file that cannot be imported (the message says why)."""


@dataclass
class Imported:
    """What an importer found: the network as a Keras model and how it maps to the env.

    `reference(obs_batch) -> outputs` is the source framework's own computation of the same
    outputs (Q-values, logits or actions), used for the fidelity check."""
    model: object                       # tf.keras.Model: float32 observations -> outputs
    env_id: str
    algo: str                           # run.json "algo", e.g. "sb3-ppo", "onnx", "keras"
    source: dict                        # run.json "source": kind, file, sha256, version, ...
    reference: Callable[[np.ndarray], np.ndarray]
    reference_name: str                 # who computed `reference` (e.g. "stable-baselines3 2.9.2")
    network: dict = field(default_factory=dict)
    # "outputs": reference gives the network's outputs; "actions": the source's actions (a
    # TF-Agents policy's `action` signature), compared with the actions of our outputs
    reference_gives: str = "outputs"
    checked: dict | None = None      # the fidelity result, when the importer already ran it
    # observations -> how many of them a folded preprocessing stage would not reproduce (SB3's
    # VecNormalize clip); the import refuses a policy where any does
    unfolded: Callable[[np.ndarray], int] | None = None
    # how that preprocessing is in the network (said in the fidelity record), e.g. SB3's
    # VecNormalize folded into the first layer, or with a clip layer before it
    normalization: str | None = None
    # `reference` is exact (float64) and `model` a plain Keras MLP: a continuous action is
    # accepted within what float32 rounding of this network can explain (rounding_bound)
    rounding_bound: bool = False
    # a recurrent policy (rl.recurrent.RecurrentLayers of `model`, a one-step Keras model):
    # written as RUN/recurrent.npz, and calibrated on ordered episodes with its state
    recurrent: object | None = None


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    p = Path(path)
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    for f in files:
        with open(f, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def diagonal_scale(low, high) -> tuple[np.ndarray, np.ndarray, str]:
    """A Dense layer mapping tanh's [-1, 1] to [low, high] (SB3's unscale_action), linear."""
    low, high = np.asarray(low, np.float64).reshape(-1), np.asarray(high, np.float64).reshape(-1)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise PolicyImportError("a squashed (tanh) policy needs finite action bounds")
    half = 0.5 * (high - low)
    return np.diag(half).astype(np.float32), (low + half).astype(np.float32), "linear"


# Retired ids -> the version that replaced them. Policies trained on the old one (most of the
# RL Zoo's LunarLander agents) are played on the new one; the import says so, since the
# dynamics may differ (LunarLander-v3 fixed bugs in -v2's physics). Gymnasium 1.x no longer
# registers LunarLander-v2; it still registers MuJoCo -v3, but those need mujoco-py, which it
# no longer supports, so they always go to -v4 (the mujoco bindings' version of the same task).
MUJOCO_PY_IDS = {f"{name}-v3": f"{name}-v4" for name in (
    "Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup", "InvertedDoublePendulum",
    "InvertedPendulum", "Reacher", "Swimmer", "Walker2d", "Pusher")}
RETIRED_IDS = {"LunarLander-v2": "LunarLander-v3",
               "LunarLanderContinuous-v2": "LunarLanderContinuous-v3",
               "BipedalWalker-v2": "BipedalWalker-v3",
               "BipedalWalkerHardcore-v2": "BipedalWalkerHardcore-v3", **MUJOCO_PY_IDS}


def current_env_id(env_id: str) -> tuple[str, dict | None]:
    """The id to play `env_id` on, and a note when it is a retired id mapped to its successor
    (an id Gymnasium still registers and runs, like BipedalWalker-v3, stays as it is)."""
    import gymnasium as gym
    if env_id not in RETIRED_IDS or (env_id in gym.envs.registry and
                                     env_id not in MUJOCO_PY_IDS):
        return env_id, None
    new = RETIRED_IDS[env_id]
    why = "needs mujoco-py, which Gymnasium " if env_id in MUJOCO_PY_IDS else "is retired in "
    why += f"{gym.__version__} no longer supports" if env_id in MUJOCO_PY_IDS else \
        f"Gymnasium {gym.__version__}"
    return new, {"from": env_id, "to": new,
                 "note": f"{env_id} {why}; the policy is played on {new}, whose dynamics may "
                         "differ from those it was trained on"}


def env_spaces(env_id: str) -> tuple[dict, dict]:
    """The env's observation and action spaces in the importers' terms (for SB3 zips whose
    spaces are only serialized: SB3 takes them from the env then, via custom_objects)."""
    env = make_gym(env_id)
    obs, act = env.observation_space, env.action_space
    env.close()
    obs_info = {"type": "discrete"} if hasattr(obs, "n") else \
        {"type": "box", "shape": tuple(obs.shape or ()), "dtype": str(obs.dtype)}
    act_info = space_info(act)
    if act_info["type"] == "box":
        act_info["shape"] = tuple(act_info["shape"])
    return obs_info, act_info


def env_action(env_id: str) -> dict:
    """The env's action space in check_spaces' terms (for importers whose file does not say)."""
    env = make_gym(env_id)
    info = space_info(env.action_space)
    env.close()
    return info


def check_outputs(env_id: str, n_out: int, where: str) -> None:
    """A network's output count against the env's actions (one per discrete action, one per
    action dimension)."""
    action = env_action(env_id)
    want = action["n"] if action["type"] == "discrete" else int(np.prod(action["shape"]))
    if n_out != want:
        kind = f"{want} discrete actions" if action["type"] == "discrete" else \
            f"actions of shape {tuple(action['shape'])}"
        raise PolicyImportError(f"{where}: the network gives {n_out} outputs, {env_id} has {kind}")


def check_spaces(env_id: str, obs_shape, action: dict, where: str):
    """The env's spaces against what the policy file says; a mismatch names both. Returns the
    env's (observation_space, action_space)."""
    env = make_gym(env_id)
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    if tuple(obs_space.shape or ()) != tuple(obs_shape):
        raise PolicyImportError(f"{where}: the policy takes observations of shape {tuple(obs_shape)}, "
                           f"{env_id} gives {tuple(obs_space.shape or ())}")
    if action["type"] == "discrete":
        if not hasattr(act_space, "n"):
            raise PolicyImportError(f"{where}: the policy has {action['n']} discrete actions, "
                               f"{env_id} has a Box action space of shape {act_space.shape}")
        if int(act_space.n) != int(action["n"]):
            raise PolicyImportError(f"{where}: the policy has {action['n']} actions, {env_id} has "
                               f"{int(act_space.n)}")
    else:
        if hasattr(act_space, "n"):
            raise PolicyImportError(f"{where}: the policy has continuous actions of shape "
                               f"{tuple(action['shape'])}, {env_id} has {int(act_space.n)} "
                               "discrete actions")
        if tuple(act_space.shape) != tuple(action["shape"]):
            raise PolicyImportError(f"{where}: the policy's actions have shape "
                               f"{tuple(action['shape'])}, {env_id}'s {tuple(act_space.shape)}")
    return obs_space, act_space


def rounding_bound(layers, obs: np.ndarray, chunk: int = 100) -> np.ndarray | None:
    """A bound on |float32 network - exact network| for each observation's outputs [N, n_out],
    or None for an activation it does not model. `layers` are the network's (kernel, bias,
    activation) in float32, `obs` float32 observations (exact inputs on both sides).

    Each float32 dot product y = W^T x + b errs by at most (n + 2) u (|W|^T |x| + |b|) (the
    standard bound, whatever the order of the sums: n the products that can be nonzero,
    their products and additions and the bias, plus one rounding of each weight, which may be
    a float32 rounding of a folded float64 value; u = 2^-24; |x| including the error that x
    already carries). These rounding errors are carried through the network in affine form,
    as signed combinations of independent errors in [-1, 1] (affine arithmetic): a layer maps
    them by W with their signs, so that errors that cancel in W^T x are not added up as
    |W|^T e would. An activation keeps the form with its slope at the exact value: relu and
    relu6 where the interval of the value stays on one side of a kink (0 on a flat part: the
    clip layer's pre-activations of a value far beyond the clip come out exact), else their
    error becomes a fresh one of its size (they are 1-Lipschitz); tanh its slope, plus a fresh
    error for its curvature (|tanh''| <= 0.77, so 0.385 r^2 for an error of size r) and 4 u
    for its own float32 evaluation. The bound is the sum of the magnitudes at the output."""
    if any(act not in ("linear", "relu", "relu6", "tanh") for _, _, act in layers):
        return None
    obs = np.asarray(obs, np.float64).reshape(len(obs), -1)
    return np.concatenate([_affine_bound(layers, obs[i:i + chunk], ACTIVATIONS)
                           for i in range(0, len(obs), chunk)])


def _affine_bound(layers, x: np.ndarray, activations) -> np.ndarray:
    a = np.zeros((*x.shape, 0))                   # [N, units, errors]
    for kernel, bias, act in layers:
        k, b = np.asarray(kernel, np.float64), np.asarray(bias, np.float64)
        radius = np.abs(a).sum(axis=2)
        # the products that can be nonzero: an input that is exactly 0 (a relu's flat part)
        # and a weight 0 add nothing, and no rounding
        nonzero = ((np.abs(x) + radius) > 0).astype(np.float64) @ (k != 0)
        fresh = (nonzero + 2) * UNIT_ROUNDOFF * ((np.abs(x) + radius) @ np.abs(k) + np.abs(b))
        a = np.einsum("nds,dm->nms", a, k)
        y = x @ k + b
        x = activations[act](y)
        r = np.abs(a).sum(axis=2) + fresh            # the error's size before the activation
        if act in ("relu", "relu6"):
            top = 6.0 if act == "relu6" else np.inf
            flat = (y + r <= 0) | (y - r >= top)
            straight = (y - r >= 0) & (y + r <= top)
            bent = ~flat & ~straight
            a = np.where(straight[..., None], a, 0.0)
            fresh = np.where(straight, fresh, np.where(bent, r, 0.0))
        elif act == "tanh":
            slope = 1.0 - np.tanh(y) ** 2
            a = a * slope[..., None]
            fresh = fresh * slope + 0.385 * r ** 2 + 4 * UNIT_ROUNDOFF
        n, m = y.shape
        new = np.zeros((n, m, m))
        new[:, np.arange(m), np.arange(m)] = fresh
        a = np.concatenate([a, new], axis=2)
    return np.abs(a).sum(axis=2)


def fidelity(imp: Imported, seed: int = 0) -> dict:
    """The imported network against the source on FIDELITY_OBSERVATIONS observations from
    rollouts of the imported policy in the env (epsilon-greedy, off the test seeds): exact argmax
    agreement for discrete heads, max abs error of the actions for continuous ones."""

    ours = keras_call(imp.model)
    obs = rollout_observations(imp.env_id, ours, size=FIDELITY_OBSERVATIONS, seed=seed)
    space = make_gym(imp.env_id).action_space
    out, ref = ours(obs), np.asarray(imp.reference(obs), np.float64)
    a = outputs_to_actions(out, space)
    result = {"observations": len(obs), "reference": imp.reference_name}
    if imp.reference_gives == "actions":
        a_ref = ref.reshape(a.shape)
    else:
        if out.shape != ref.shape:
            raise PolicyImportError(f"the imported network gives outputs of shape {out.shape[1:]}, "
                               f"the source {ref.shape[1:]}")
        a_ref = outputs_to_actions(ref, space)
        result["max_abs_error_outputs"] = float(np.max(np.abs(out - ref)))
    if hasattr(space, "n"):
        result["argmax_agreement"] = float(np.mean(a == a_ref))
        ok = result["argmax_agreement"] == 1.0
    else:
        err = np.abs(a.astype(np.float64) - a_ref)
        result["max_abs_error_actions"] = float(np.max(err))
        tol = _tolerance(imp, obs, err.shape)
        if np.ndim(tol):
            result["tolerance"] = (f"max({MAX_ABS_ERROR:g}, the float32 rounding bound of each "
                                   "action on its observation)")
            result["max_rounding_bound"] = float(np.max(tol))
            result["median_rounding_bound"] = float(np.median(tol))
            result["max_error_over_tolerance"] = float(np.max(err / tol))
        else:
            result["tolerance"] = MAX_ABS_ERROR
        ok = bool(np.all(err <= tol))
    if imp.normalization is not None:
        result["vecnormalize"] = imp.normalization
    if imp.unfolded is not None:
        result["clipped_observations"] = imp.unfolded(obs)
        if result["clipped_observations"] and imp.normalization != VECNORM_CLIP_LAYER:
            raise PolicyImportError(f"{result['clipped_observations']} of {len(obs)} observations "
                               "reach VecNormalize's clip_obs, which the env's observation "
                               "bounds say none can; the folded first layer does not "
                               "reproduce the clip")
    result["ok"] = bool(ok)
    if not ok:
        raise PolicyImportError(f"the imported network does not act as the source does on "
                           f"{len(obs)} observations of {imp.env_id}: {result}")
    return result


def _tolerance(imp: Imported, obs: np.ndarray, shape) -> np.ndarray | float:
    """MAX_ABS_ERROR, or per action max(MAX_ABS_ERROR, rounding_bound) for a plain MLP checked
    against an exact reference (the action head clips to the bounds, which is 1-Lipschitz)."""
    if not imp.rounding_bound:
        return MAX_ABS_ERROR
    try:
        layers = mlp_layers(imp.model)
    except QuarlError:
        return MAX_ABS_ERROR
    bound = rounding_bound(layers, obs)
    if bound is None or bound.size != int(np.prod(shape)):
        return MAX_ABS_ERROR
    return np.maximum(MAX_ABS_ERROR, bound.reshape(shape))


def write_imported_run(imp: Imported, out: Path, fid: dict, extra: dict | None = None) -> dict:
    """RUN = out: run.json, policy.keras and calibration.npy, made in a temporary folder beside
    it and renamed into place at the end (nothing is left at `out` on an error)."""

    out = Path(out)
    if out.is_symlink():        # the run is renamed into place: it must not land elsewhere
        raise PolicyImportError(f"{out} is a symlink; choose a plain folder for --out")
    if out.exists() and any(out.iterdir()):
        raise PolicyImportError(f"{out} exists and is not empty; choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.import-{os.getpid()}")
    if tmp.is_symlink():        # a link planted at the temporary name is removed, not followed
        tmp.unlink()
    shutil.rmtree(tmp, ignore_errors=True)
    with writing(tmp):
        tmp.mkdir()
    try:
        run = Run(tmp)
        imp.model.save(run.network_file("policy.keras"))
        env = make_gym(imp.env_id)
        space = env.action_space
        info = {
            "env": imp.env_id, "algo": imp.algo,
            "obs_shape": list(env.observation_space.shape),
            "action_space": space_info(space),
            "action_head": "argmax" if hasattr(space, "n") else "identity",
            "network": imp.network, "model_file": "policy.keras",
            "source": imp.source, "fidelity": fid,
            "versions": package_versions(),
            **(extra or {}),
        }
        env.close()
        if hasattr(space, "n"):
            info["n_actions"] = int(space.n)
        run.write_meta(info)
        if imp.recurrent is not None:
            imp.recurrent.save(run.network_file(WEIGHTS_FILE))
            calibration = recurrent_calibration(imp.env_id, imp.recurrent, 1000, 10, 0,
                                                CALIBRATION_EPSILON)
        else:
            calibration = collect_calibration(tmp)
        run.save_calibration(calibration)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info
