"""Import: the other way into a run directory. A policy trained elsewhere (Stable-Baselines3,
ONNX, Keras, a TF-Agents / TF SavedModel) becomes an ordinary run directory (run.py's contract:
run.json naming the source, the env id and the action head; policy.keras; calibration.npy
from the imported policy's own rollouts), so quantize, build, validate, hil, bench and study
work on it unchanged.

    import_policy("ppo-LunarLander-v3.zip", "runs/lunar")            # env from the file name
    import_policy("policy.onnx", "runs/p", env="Pendulum-v1")

An RL Baselines3 Zoo run folder (rl_zoo.py) is an SB3 zip with its VecNormalize statistics and
config. Each importer (sb3.py, onnx_policy.py, keras_policy.py, savedmodel.py; the first two put
together from their parts, sb3_*.py and vecnormalize.py, onnx_*.py) reads its format without
running code from the file, builds the network as a plain Keras model and says how the source
framework itself computes the same outputs; `common.fidelity` then checks the two on 1,000
observations from the env (exact argmax agreement for discrete actions, max abs error <= 1e-5
for continuous ones) and the result goes into run.json."""
from __future__ import annotations

from pathlib import Path

from ..core.names import IMPORT_KINDS as KINDS
from . import keras_policy, onnx_policy, rl_zoo, savedmodel, sb3
from .bounded import check_finite
from .common import PolicyImportError, fidelity, write_imported_run


def detect_kind(source: Path) -> str:
    """The importer for a path, from what the file is (its first bytes), not only its name."""
    if source.is_dir():
        if (source / "saved_model.pb").is_file():
            return "savedmodel"
        if rl_zoo.is_run(source):
            return "rl-zoo"
        raise PolicyImportError(f"{source}: a directory without saved_model.pb (not a SavedModel) "
                           "nor an RL Zoo run (an SB3 zip beside ENV/config.yml)")
    if not source.is_file():
        raise PolicyImportError(f"{source}: no such file")
    with open(source, "rb") as f:
        head = f.read(8)
    suffix = source.suffix.lower()
    if suffix == ".zip":
        return "sb3"
    if suffix == ".onnx":
        return "onnx"
    if suffix in (".keras", ".h5", ".hdf5"):
        return "keras"
    what = "a zip" if head.startswith(b"PK") else "an HDF5 file" if head.startswith(
        b"\x89HDF") else "an unknown file"
    raise PolicyImportError(f"{source}: unknown kind of policy file ({what} named *{suffix}); "
                       "import takes a Stable-Baselines3 .zip, an .onnx, a .keras/.h5 Keras "
                       "model or a TF-Agents / TF SavedModel directory")


def import_policy(source, out, env: str | None = None, vecnormalize=None,
                  kind: str | None = None) -> dict:
    """Import `source` into the run directory `out` (which must not exist or be empty); returns
    its run.json. Nothing is written at `out` unless the import succeeds."""
    source = Path(source)
    kind = kind or detect_kind(source)
    vecnorm = Path(vecnormalize) if vecnormalize else None
    if kind == "sb3":
        if rl_zoo.beside(source):   # ENV.zip of a zoo run: its ENV/ folder comes with it
            imp = rl_zoo.load(source.parent, env, vecnorm, zip_path=source)
        else:
            imp = sb3.load(source, env, vecnorm)
    elif kind == "rl-zoo":
        imp = rl_zoo.load(source, env, vecnorm)
    elif kind == "onnx":
        imp = onnx_policy.load(source, env)
    elif kind == "keras":
        imp = keras_policy.load(source, env)
    elif kind == "savedmodel":
        imp = savedmodel.load(source, env)
    else:
        raise PolicyImportError(f"unknown import kind {kind!r}; known: {', '.join(KINDS)}")
    if vecnormalize and kind not in ("sb3", "rl-zoo"):
        raise PolicyImportError("--vecnormalize applies to Stable-Baselines3 zips only")
    for w in imp.model.weights:    # every importer checks its source's tensors; this, ours
        check_finite(getattr(w, "path", None) or w.name, w.numpy(), str(source),
                     PolicyImportError)
    return write_imported_run(imp, Path(out), imp.checked or fidelity(imp))
