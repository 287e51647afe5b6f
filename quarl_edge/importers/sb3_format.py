"""What a Stable-Baselines3 zip holds, read as data (see sb3.py): the zip's entries, which
algorithm's policy it is, its spaces from SB3's plain JSON fields, the activation and policy
kwargs, and the env id its file name gives. The base64 pickles in the JSON are never used:
the serialized spaces are only read as inert data to refuse a tampered file
(safe_pickle.load_symbolic), policy.pth by safe_pickle.load_torch_archive."""
from __future__ import annotations

import base64
import binascii
import re
import zipfile
from pathlib import Path

import numpy as np

from ..core.errors import QuarlError
from ..core.files import loads_json
from .bounded import (MAX_JSON_BYTES, MAX_WEIGHTS_BYTES, check_finite, check_members, check_tree,
                      read_member, short, text)
from .common import RETIRED_IDS, PolicyImportError
from .safe_pickle import UnsafePickle, load_symbolic, load_torch_archive

ALGOS = ("dqn", "ppo", "a2c", "sac", "td3", "qrdqn", "tqc", "trpo", "ars", "recurrentppo")
CONTRIB = ("qrdqn", "tqc", "ars")          # sb3-contrib's own policy modules (TRPO uses SB3's)
DEFAULT_ACTIVATION = {"dqn": "relu", "ppo": "tanh", "a2c": "tanh", "sac": "relu", "td3": "relu",
                      "qrdqn": "relu", "tqc": "relu", "trpo": "tanh", "ars": "relu",
                      "recurrentppo": "tanh"}
TORCH_ACTIVATIONS = {"ReLU": "relu", "Tanh": "tanh"}


def read_zip(path: Path) -> tuple[dict, dict[str, np.ndarray], str]:
    """The zip's `data` JSON, policy.pth's tensors by name and SB3's version ("unknown" when the
    zip does not say); each member read within its limit (bounded.py) and the tensors checked
    to be finite."""
    try:
        z = zipfile.ZipFile(path)
        names = set(z.namelist())
        if "data" not in names or "policy.pth" not in names:
            raise PolicyImportError(f"{path}: a zip, but not a Stable-Baselines3 model (no data and "
                               "policy.pth in it)")
        check_members(z, 1 << 62, str(path), PolicyImportError)   # their number
        raw = read_member(z, "data", MAX_JSON_BYTES, str(path), PolicyImportError)
        policy = read_member(z, "policy.pth", MAX_WEIGHTS_BYTES, str(path), PolicyImportError)
        version = read_member(z, "_stable_baselines3_version", 64, str(path),
                              PolicyImportError) if "_stable_baselines3_version" in names else b""
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise PolicyImportError(f"{path}: not a readable zip ({short(str(e), 100)}); truncated "
                                "download?") from None
    data = check_tree(loads_json(raw, f"{path}: SB3's data entry", PolicyImportError),
                      f"{path}: SB3's data entry", error=PolicyImportError)
    if not isinstance(data, dict):
        raise PolicyImportError(f"{path}: SB3's data entry is {short(data)}, not a JSON object")
    for key in ("policy_class", "observation_space", "action_space"):
        if key in data and not isinstance(data[key], dict):
            raise PolicyImportError(f"{path}: SB3's data entry has {key} = {short(data[key])}, "
                                    "not an object")
    sd = load_torch_archive(policy, f"{path}:policy.pth")
    for name, tensor in sd.items():
        check_finite(name, tensor, f"{path}:policy.pth", PolicyImportError)
    version = re.sub(r"[^0-9A-Za-z.+_-]", "", version.decode("ascii", "replace")) or "unknown"
    return data, sd, version


def algo_of(data: dict, sd: dict, path: Path) -> str:
    """Which algorithm's policy this is: SB3's and sb3-contrib's policy modules name DQN, SAC,
    TD3, QR-DQN, TQC and ARS; PPO, A2C and TRPO share ActorCriticPolicy (and compute the same
    greedy action), told apart by their hyperparameters in the data."""
    module = (data.get("policy_class") or {}).get("__module__", "")
    module = module if isinstance(module, str) else ""
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
    raise PolicyImportError(f"{path}: a policy from "
                            f"{text(module) if module else 'an unknown module'} is not "
                            f"supported{hint}; supported: Stable-Baselines3 "
                            f"{', '.join(a.upper() for a in ALGOS)} with MlpPolicy")


def space_of(entry, what: str, path: Path) -> dict | None:
    """A space from SB3's plain JSON fields (2.x writes `_shape`, 1.x `shape`; Discrete's `n`),
    or None when the entry has none of them (only the serialized pickle, which is never
    unpickled): the env's space is used then, as SB3's `custom_objects` does."""
    if not isinstance(entry, dict) or not entry.get(":type:"):
        return None
    kind = entry[":type:"]
    if not isinstance(kind, str):
        raise PolicyImportError(f"{path}: {what} of :type: {short(kind)}")
    raw = entry.get("_shape", entry.get("shape"))
    if isinstance(raw, str):
        raw = loads_json(raw[:1000], f"{path}: {what}'s shape", PolicyImportError) \
            if raw.strip() else None
    if raw is not None and not (isinstance(raw, list) and len(raw) <= 8 and all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 31 for d in raw)):
        raise PolicyImportError(f"{path}: {what} of shape {short(raw)}, not a list of sizes")
    shape = None if raw is None else tuple(raw)
    if kind.endswith("discrete.Discrete'>"):
        if "n" not in entry:
            return None
        return {"type": "discrete", "n": _count(entry["n"], f"{what}'s n", 1, path),
                "start": _count(entry.get("start", 0), f"{what}'s start", -(1 << 31), path)}
    if kind.endswith("box.Box'>"):
        if shape is None:
            return None
        dtype = entry.get("dtype", "float32")
        return {"type": "box", "shape": shape,
                "dtype": dtype if isinstance(dtype, str) else short(dtype)}
    raise PolicyImportError(f"{path}: {what} {short(kind, 80)} is not supported (Box "
                            "observations; Discrete or Box actions)")


def _count(value, what: str, least: int, path: Path) -> int:
    """An integer field of a space (Discrete's n, start: SB3 writes numpy's integers as
    strings, "2"), within [least, 2^31)."""
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,10}", value.strip()):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value < 1 << 31:
        raise PolicyImportError(f"{path}: {what} is {short(value)}, not an integer >= {least}")
    return value


# What a serialized (cloudpickle) space of SB3 1.x/2.x names: gym's or gymnasium's space
# classes and numpy's array, dtype and random-state reconstructors. The serialized part is read
# as inert data only to refuse a file whose pickle asks for anything else (never to use it).
# (a seeded space also holds its numpy Generator: its bit generators by name, e.g. PCG64)
SPACE_GLOBALS = ("gym.spaces.", "gymnasium.spaces.", "numpy.core.", "numpy._core.",
                 "numpy.dtype", "numpy.ndarray", "numpy.random._pickle.",
                 "numpy.random._pcg64.", "numpy.random._philox.", "numpy.random._sfc64.",
                 "numpy.random._mt19937.", "numpy.random._generator.",
                 "numpy.random.bit_generator.", "collections.OrderedDict")


def check_serialized_spaces(data: dict, path: Path) -> None:
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


def activation_of(data: dict, algo: str, path: Path) -> str:
    """The hidden layers' activation: policy_kwargs' activation_fn, else the algorithm's
    default."""
    kwargs = data.get("policy_kwargs") or {}
    fn = kwargs.get("activation_fn") if isinstance(kwargs, dict) else None
    if fn is None:
        return DEFAULT_ACTIVATION[algo]
    m = re.search(r"torch\.nn\.modules\.activation\.(\w+)", fn) if isinstance(fn, str) else None
    if not m or m.group(1) not in TORCH_ACTIVATIONS:
        raise PolicyImportError(f"{path}: activation {short(fn, 80)} is not supported (ReLU, "
                                "Tanh)")
    return TORCH_ACTIVATIONS[m.group(1)]


def policy_kwargs(data: dict) -> dict:
    """The policy_kwargs in the JSON ({} when there are none or they are not a dict)."""
    kwargs = data.get("policy_kwargs")
    return kwargs if isinstance(kwargs, dict) else {}


def clip_mean_of(kwargs: dict, path: Path) -> float:
    """policy_kwargs' clip_mean (SAC's gSDE clip of the mean), default 2: a finite number > 0."""
    value = kwargs.get("clip_mean", 2.0)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or \
            not np.isfinite(value) or value <= 0:
        raise PolicyImportError(f"{path}: policy_kwargs' clip_mean is {short(value)}, not a "
                                "finite number > 0")
    return float(value)


def ars_squashes(data: dict) -> bool:
    """Whether an ARS policy squashes Box actions with tanh: its squash_output argument, else
    the class's default (ARSPolicy True, ARSLinearPolicy False). The class is told by the name
    in the JSON's plain `__init__` string (the pickled class itself is never loaded)."""
    kwargs = data.get("policy_kwargs") if isinstance(data.get("policy_kwargs"), dict) else {}
    if "squash_output" in kwargs:
        return bool(kwargs["squash_output"])
    init = (data.get("policy_class") or {}).get("__init__", "")
    return "ARSLinearPolicy" not in (init if isinstance(init, str) else "")


def guess_env(path: Path) -> str:
    """The env id from the file name (RL Zoo and the Hub name files after it, e.g.
    ppo-LunarLander-v3.zip) when it names a registered Gymnasium id (or a retired one that
    current_env_id maps, as the zoo's LunarLander-v2.zip); else an error asking for
    --env."""
    import gymnasium as gym   # heavy: only to guess the env
    stem = path.stem
    ids = [*gym.envs.registry, *(e for e in RETIRED_IDS if e not in gym.envs.registry)]
    found = [e for e in ids if re.search(rf"(^|[-_/]){re.escape(e)}$", stem)]
    if len(found) == 1:
        return found[0]
    raise PolicyImportError(f"{path}: which environment? give --env ID (the file name names "
                       f"{'none' if not found else ' and '.join(found)} of Gymnasium's ids)")
