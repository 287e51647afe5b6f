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
    RUN/build/<board>/<scheme>/  a firmware build (targets/build.py: gen/, firmware.elf,
                            build.log, memory.json)
    RUN/results/            hil, bench and bench --per-op results (quarl_edge.measure)

`Run` names every one of these paths and writes into them (through quarl_edge/core/files.py); no
other module spells a path of the run directory. A bare MODEL.tflite's folder is laid out the
same way for its builds and results (`Run(MODEL.parent)`).

Seeds: training selects its best checkpoint on the validation seeds VALIDATION_SEED_BASE + k,
never on the test seeds 0..N that evaluation uses.

What the network files hold, and how to run them (in numpy or TensorFlow), is quarl_edge/core/nets.py.
"""
from __future__ import annotations

import json
import platform
import shutil
from importlib import metadata
from pathlib import Path

import numpy as np

from .errors import QuarlError
from .files import check_inside, loads_json, subdir, write_atomic, write_npy
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

RUN_JSON, MODELS, CALIBRATION, BUILD, RESULTS = (
    "run.json", "models", "calibration.npy", "build", "results")
POLICY_DIR, TRAIN_CURVE = "policy", "train_curve.csv"


class Run:
    """A run directory: every path in it, and the writes into it.

    Paths are only named (nothing is made) except by the methods that say "made": those create
    the folder, refusing a symlink there that leads out of the run (files.subdir). Writes go
    through files.write_atomic / write_npy: a temporary name, then a rename over the path (a
    symlink planted there is replaced, never written through)."""

    def __init__(self, path):
        self.dir = Path(path)

    @classmethod
    def of_policy(cls, policy) -> "Run":
        """The run a policy (hil's and bench's RUN_OR_MODEL) belongs to: a run directory itself,
        or a bare MODEL.tflite's folder, which holds its builds and results as a run's would."""
        path = Path(policy)
        return cls(path.parent if path.suffix == ".tflite" else path)

    def __repr__(self) -> str:
        return f"Run({str(self.dir)!r})"

    def __fspath__(self) -> str:
        return str(self.dir)

    # -------------------------------------------------------------------- run.json, networks
    @property
    def meta_path(self) -> Path:
        """RUN/run.json."""
        return self.dir / RUN_JSON

    def is_run(self) -> bool:
        return self.meta_path.is_file()

    def load(self) -> dict:
        return load_run(self.dir)

    def write_meta(self, info: dict) -> None:
        write_run(self.dir, info)

    def network_path(self) -> Path:
        """RUN/<model file> (run.json's "model_file"), refused when it leads outside RUN."""
        return keras_path(self.dir)

    def network_file(self, name: str) -> Path:
        """RUN/NAME for a network file a trainer or importer writes (qnet.keras, policy.keras,
        recurrent.npz), NAME a plain file name."""
        if Path(name).name != name or name in ("", ".", ".."):
            raise QuarlError(f"{name!r} is not a file name in a run directory")
        return self.dir / name

    @property
    def policy_dir(self) -> Path:
        """RUN/policy/: the TF-Agents SavedModel of the greedy policy."""
        return self.dir / POLICY_DIR

    @property
    def train_curve(self) -> Path:
        """RUN/train_curve.csv."""
        return self.dir / TRAIN_CURVE

    def load_keras(self):
        return load_keras(self.dir)

    # ------------------------------------------------------------------------------- models
    @property
    def models_dir(self) -> Path:
        """RUN/models (named, not made)."""
        return self.dir / MODELS

    def check_models_dir(self) -> None:
        """A symlink at RUN/models leading out of the run: refused (said before a conversion)."""
        if self.models_dir.is_symlink():
            check_inside(self.models_dir, self.dir, "a folder quarl-edge writes in")

    def model_path(self, scheme: str) -> Path:
        """RUN/models/<scheme>.tflite, named whether or not it exists."""
        return self.models_dir / f"{scheme}.tflite"

    def tflite(self, scheme: str) -> Path:
        """RUN/models/<scheme>.tflite, which must exist and stay in the run."""
        return tflite_path(self.dir, scheme)

    def has_model(self, scheme: str) -> bool:
        return self.model_path(scheme).is_file()

    def write_model(self, scheme: str, flatbuffer: bytes) -> Path:
        """RUN/models/<scheme>.tflite written whole (RUN/models made)."""
        out = subdir(self.dir, MODELS) / f"{scheme}.tflite"
        write_atomic(out, flatbuffer)
        return out

    # -------------------------------------------------------------------------- calibration
    @property
    def calibration_path(self) -> Path:
        return self.dir / CALIBRATION

    def save_calibration(self, calibration) -> Path:
        """RUN/calibration.npy, written whole (a full disk keeps the previous one)."""
        write_npy(self.calibration_path, np.asarray(calibration))
        return self.calibration_path

    def load_calibration(self) -> np.ndarray | None:
        """RUN/calibration.npy as an array (None when the run has none); refused when it leads
        out of the run."""
        path = self.calibration_path
        if not path.is_file():
            return None
        check_inside(path, self.dir, "the run's calibration observations")
        return np.load(path)

    # ----------------------------------------------------------------------- builds, results
    def build_dir(self, board_id: str, label: str, make: bool = True) -> Path:
        """RUN/build/<board>/<label> (label: the scheme, or scheme-perop, ...); made unless
        `make` is False."""
        if make:
            return subdir(self.dir, BUILD, board_id, label)
        return self.dir / BUILD / board_id / label

    def gen_dir(self, board_id: str, label: str) -> Path:
        """RUN/build/<board>/<label>/gen: the generated C of that build (targets/build.py)."""
        return self.build_dir(board_id, label, make=False) / "gen"

    def results_dir(self, make: bool = True) -> Path:
        """RUN/results (made unless `make` is False)."""
        return subdir(self.dir, RESULTS) if make else self.dir / RESULTS

    def copy_to(self, dest: Path) -> "Run":
        """A copy of the run at `dest` (new) without its builds and results."""
        shutil.copytree(self.dir, dest, ignore=shutil.ignore_patterns(BUILD, RESULTS))
        return Run(dest)

    def write(self, name: str, data: str | bytes) -> Path:
        """RUN/NAME written whole (a file of the run's own: study-train.json, ...)."""
        path = self.network_file(name)
        write_atomic(path, data)
        return path


def load_run(run_dir: Path) -> dict:
    """RUN/run.json as a dict, its keys checked (RUN_KEYS); a QuarlError naming the file and
    the key when RUN is not a run directory or its run.json lacks or mistypes one."""
    meta = Path(run_dir) / RUN_JSON
    if not meta.is_file():
        raise QuarlError(f"{run_dir} is not a run directory (no run.json); train one with "
                         "`quarl-edge train` or use examples/cartpole_dqn")
    info = loads_json(meta.read_bytes(), str(meta))
    if not isinstance(info, dict):
        raise QuarlError(f"{meta}: must be a JSON object of keys (env, algo, obs_shape, ...), "
                         f"got {type(info).__name__}")
    return check(info, RUN_KEYS, str(meta), allow_unknown=True)


def write_run(run_dir: Path, info: dict) -> None:
    """Write RUN/run.json through a temporary file, so a crash never leaves half a file."""
    write_atomic(Path(run_dir) / RUN_JSON, json.dumps(info, indent=2) + "\n")


def keras_path(run_dir: Path) -> Path:
    """RUN/<model file>: run.json's "model_file" (qnet.keras for runs that predate it), which
    must stay in RUN (after symlinks): a run directory from elsewhere names no file outside."""
    meta = Path(run_dir) / RUN_JSON
    name = "qnet.keras"
    if meta.is_file():
        name = load_run(run_dir).get("model_file", name)
    return check_inside(Path(run_dir) / name, run_dir, f"{meta}: model_file {name!r}")


def load_keras(run_dir: Path):
    """The run's policy network (RUN/qnet.keras for DQN, RUN/policy.keras for the actor of the
    other algorithms) as a tf.keras model: float32 observations -> Q-values, logits or actions.
    Loaded by safe_load_keras: a run directory from elsewhere never runs code."""
    path = keras_path(run_dir)
    if not path.is_file():
        raise QuarlError(f"no trained model at {path}: run `train` into {run_dir} first")
    model = safe_load_keras(path)
    meta = load_run(run_dir) if (Path(run_dir) / RUN_JSON).is_file() else None
    # (a recurrent run's network also takes a time axis and its state)
    if meta and not (meta.get("network") or {}).get("recurrent") and isinstance(
            model.input_shape, tuple):
        want, has = tuple(meta["obs_shape"]), tuple(model.input_shape[1:])
        if len(has) != len(want) or any(h is not None and h != w for h, w in zip(has, want)):
            raise QuarlError(f"{Path(run_dir) / RUN_JSON}: obs_shape {list(want)}, but "
                             f"{path.name} takes observations of shape {list(has)}")
    return model


ZIP_MAGIC, HDF5_MAGIC = b"PK\x03\x04", b"\x89HDF\r\n\x1a\n"


# A .keras file's config.json is a few kB; the importers' limit for it (docs/import.md), kept here
# too since a run folder's own model file is read without going through an importer.
CONFIG_LIMIT = 16 << 20


def _read_config_member(z, path: Path) -> bytes:
    """config.json of a .keras zip, refused past CONFIG_LIMIT before and while it inflates (the
    declared size may lie), and when compressed other than stored or deflated (zipfile inflates
    a bzip2 or lzma member whole whatever is asked of it)."""
    import zipfile
    info = z.getinfo("config.json")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise QuarlError(f"{path}: refused: config.json is compressed other than stored or "
                         "deflated")
    if info.file_size > CONFIG_LIMIT:
        raise QuarlError(f"{path}: refused: config.json inflates to {info.file_size:,} bytes, "
                         f"more than the limit of {CONFIG_LIMIT:,}")
    with z.open(info) as f:
        raw = f.read(CONFIG_LIMIT + 1)
    if len(raw) > CONFIG_LIMIT:
        raise QuarlError(f"{path}: refused: config.json inflates past the limit of "
                         f"{CONFIG_LIMIT:,} bytes")
    return raw


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
    with open(path, "rb") as f:
        head = f.read(8)
    suffix = path.suffix.lower()
    if suffix == ".keras":
        if not head.startswith(ZIP_MAGIC):
            what = "an HDF5 file" if head == HDF5_MAGIC else "not a zip"
            raise QuarlError(f"{path}: refused: named .keras but {what} (a .keras model is a "
                             "zip); an HDF5 model is loaded only as .h5, after its check")
        import zipfile
        try:
            with zipfile.ZipFile(path) as z:
                raw = _read_config_member(z, path)
        except (zipfile.BadZipFile, KeyError) as e:
            raise QuarlError(f"{path}: not a Keras model ({type(e).__name__}: {e})") from None
        config = loads_json(raw, f"{path}: its config.json")
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
        if not isinstance(raw, (str, bytes)):
            raise QuarlError(f"{path}: its model_config is not a Keras model config "
                             f"({type(raw).__name__})")
        config = loads_json(raw, f"{path}: its model_config")
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


def _unsafe_layers(config):
    """Names of the things in a Keras model config that would run or import code (walked
    without recursion: a config nested thousands deep is read, not a RecursionError)."""
    stack = [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            name = node.get("class_name")
            if isinstance(name, str):
                module = node.get("module")
                registered = node.get("registered_name")
                if name == "Lambda":
                    yield "a Lambda layer"
                elif module is not None and str(module).split(".")[0] not in KERAS_PACKAGES:
                    yield f"class {name} from {str(module)[:80]}"
                elif registered and not str(registered).startswith((*KERAS_PACKAGES, name)):
                    yield f"the custom object {str(registered)[:80]}"
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))


def tflite_path(run_dir: Path, scheme: str) -> Path:
    """RUN/models/<scheme>.tflite, which must exist (made by `quarl-edge quantize`)."""
    path = Path(run_dir) / MODELS / f"{scheme}.tflite"
    if not path.is_file():
        raise QuarlError(f"no {scheme} model in {run_dir}/models; make it with "
                         f"`quarl-edge quantize {run_dir} --scheme {scheme}`")
    return check_inside(path, run_dir, f"the {scheme} model of {run_dir}")
