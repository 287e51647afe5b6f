"""VecNormalize's observation normalisation (a vecnormalize.pkl, read as inert data by
safe_pickle) folded into a policy's first layer: W' = W / s, b' = b - (mean / s) W,
s = sqrt(var + epsilon); where the env's bounds let a normalised value reach +-clip_obs, the
clip as a Dense layer with relu before it (fold_clipped). See sb3.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .bounded import MAX_WEIGHTS_BYTES, check_finite, read_file, short
from .common import PolicyImportError
from .safe_pickle import load_symbolic


def read_vecnormalize(path: Path) -> dict:
    """mean, var, epsilon, clip_obs of a VecNormalize pickle, read as inert data; each checked
    for its type and range (statistics of finite numbers, var >= 0, epsilon and clip_obs > 0)
    before any is used."""
    raw = read_file(path, MAX_WEIGHTS_BYTES, "a VecNormalize file", PolicyImportError)
    obj = load_symbolic(raw, str(path))
    if not hasattr(obj, "attrs") or not obj.type_name.endswith("VecNormalize"):
        raise PolicyImportError(f"{path}: not a VecNormalize file (it holds {short(obj)})")
    a = obj.attrs()
    if not a.get("norm_obs", True):
        return {}
    if a.get("norm_obs_keys"):
        raise PolicyImportError(f"{path}: VecNormalize of dict observations is not supported")
    rms = a.get("obs_rms")
    r = rms.attrs() if hasattr(rms, "attrs") else {}
    if "mean" not in r or "var" not in r or "epsilon" not in a or "clip_obs" not in a:
        raise PolicyImportError(f"{path}: VecNormalize without obs_rms mean/var, epsilon and "
                                "clip_obs")
    out = {"mean": _array(r["mean"], "obs_rms.mean", path),
           "var": _array(r["var"], "obs_rms.var", path),
           "epsilon": _number(a["epsilon"], "epsilon", path, 0.0),
           "clip_obs": _number(a["clip_obs"], "clip_obs", path)}
    if out["mean"].shape != out["var"].shape or np.any(out["var"] + out["epsilon"] <= 0):
        raise PolicyImportError(f"{path}: VecNormalize's obs_rms.var (shape {out['var'].shape})"
                                f" must be > 0 with epsilon, of obs_rms.mean's shape "
                                f"{out['mean'].shape}")
    return out


def _array(value, name: str, path: Path) -> np.ndarray:
    """A statistic: an array of finite numbers (or one number), nothing else (a list is not
    walked: a pickle can share one list along 2^60 paths)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = np.asarray(value, np.float64)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf" or value.size > 1 << 20:
        raise PolicyImportError(f"{path}: VecNormalize's {name} is {short(value)}, not an "
                                "array of numbers")
    check_finite(name, value, str(path), PolicyImportError)
    return value.astype(np.float64)


def _number(value, name: str, path: Path, least: float | None = None) -> float:
    """epsilon or clip_obs: a finite number > 0 (or >= `least`)."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0].item()
    if not isinstance(value, (int, float)) or isinstance(value, bool) or \
            not np.isfinite(value) or (value <= 0 if least is None else value < least):
        raise PolicyImportError(f"{path}: VecNormalize's {name} is {short(value)}, not a "
                                f"finite number {'> 0' if least is None else f'>= {least:g}'}")
    return float(value)


def fold(layers, norm: dict):
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
    (fold_clipped); where there is none, the clip never acts and the plain fold is exact."""
    s = np.sqrt(norm["var"] + norm["epsilon"]).reshape(-1)
    mean, c = norm["mean"].reshape(-1), norm["clip_obs"]
    low = np.broadcast_to(np.asarray(low, np.float64).reshape(-1), mean.shape)
    high = np.broadcast_to(np.asarray(high, np.float64).reshape(-1), mean.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        reach = ~np.isfinite(low) | ~np.isfinite(high) | ((low - mean) / s < -c) | \
            ((high - mean) / s > c)
    return [int(i) for i in np.flatnonzero(reach)]


def fold_clipped(layers, norm: dict, reach: list[int]):
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


def clipped_count(norm: dict, obs: np.ndarray) -> int:
    """How many observations VecNormalize clips (the fold is exact only while it clips none)."""
    z = (np.asarray(obs, np.float64).reshape(len(obs), -1) - norm["mean"].reshape(-1)) / \
        np.sqrt(norm["var"].reshape(-1) + norm["epsilon"])
    return int(np.sum(np.any(np.abs(z) > norm["clip_obs"], axis=1)))


def vecnormalize_file(path: Path, given: Path | None) -> Path | None:
    """--vecnormalize, else NAME.vecnormalize.pkl, else vecnormalize.pkl beside the zip, else
    None: the one search of every SB3 import. A given path is used as it is: a missing one is
    an error when it is read, never replaced by another file."""
    if given is None and path.with_suffix(".vecnormalize.pkl").is_file():
        given = path.with_suffix(".vecnormalize.pkl")
    if given is None and (path.parent / "vecnormalize.pkl").is_file():
        given = path.parent / "vecnormalize.pkl"
    return given
