"""Keras policies (.keras, or legacy .h5): the network itself, loaded without running code from
the file (run.safe_load_keras: no Lambda layers, no custom classes), checked against the env and
saved again as a .keras file. The outputs are taken as the env's action head says (argmax for
discrete actions, the action itself for Box actions; `hil --action scale` for a tanh actor).

Before Keras or safe_load_keras reads anything of it, the file is checked within the limits of
bounded.py (check_file): a .keras zip's members inflate within MAX_WEIGHTS_BYTES together (their
declared sizes first, then each stream, which also checks its CRC), its config.json within
MAX_JSON_BYTES and nested at most MAX_NESTING deep; an .h5 file's datasets within
MAX_WEIGHTS_BYTES by their declared shapes, its model_config nested as deep. The weights Keras
loads must be finite."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ..core.nets import keras_call
from ..core.run import HDF5_MAGIC, safe_load_keras
from ..core.files import loads_json
from .bounded import (MAX_JSON_BYTES, MAX_WEIGHTS_BYTES, check_finite, check_members, check_tree,
                      read_member, short)
from .common import Imported, PolicyImportError, check_outputs, check_spaces, env_action, sha256


def check_file(path: Path) -> None:
    """A Keras file within the limits (the module docstring), before anything loads it; a file
    of another kind is left to safe_load_keras, which says what is wrong with it."""
    import zipfile
    where = str(path)
    if path.suffix.lower() == ".keras" and zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as z:
                names = sorted(z.namelist(), key=lambda n: n != "config.json")   # it first
                if "config.json" in names:
                    read_member(z, "config.json", MAX_JSON_BYTES, where, PolicyImportError)
                check_members(z, MAX_WEIGHTS_BYTES, where, PolicyImportError)
                for name in names:
                    raw = read_member(z, name, MAX_JSON_BYTES if name == "config.json" else
                                      MAX_WEIGHTS_BYTES, where, PolicyImportError)
                    if name == "config.json":
                        check_tree(loads_json(raw, f"{where}: config.json", PolicyImportError),
                                   f"{where}: config.json", error=PolicyImportError)
                    elif name.endswith(".h5"):      # the weights: their datasets' sizes
                        _check_h5(io.BytesIO(raw), f"{where}:{short(name)[1:-1]}")
        except (zipfile.BadZipFile, OSError) as e:
            raise PolicyImportError(f"{where}: not a readable zip ({short(str(e), 100)})") \
                from None
    elif path.suffix.lower() in (".h5", ".hdf5") and path.is_file():
        with open(path, "rb") as f:
            if f.read(8) == HDF5_MAGIC:
                _check_h5(path, where)


def _check_h5(source, where: str) -> None:
    """An HDF5 Keras file: its model_config's nesting, its datasets' declared sizes (a dataset
    may be compressed: its shape says what it inflates to)."""
    import h5py
    sizes = []
    try:
        with h5py.File(source, "r") as f:
            raw = f.attrs.get("model_config")
            if isinstance(raw, (bytes, str)):
                if len(raw) > MAX_JSON_BYTES:
                    raise PolicyImportError(f"{where}: refused: a model_config larger than "
                                            f"{MAX_JSON_BYTES:,} bytes")
                check_tree(loads_json(raw, f"{where}: model_config", PolicyImportError),
                           f"{where}: model_config", error=PolicyImportError)
            f.visititems(lambda _name, obj: sizes.append(
                int(obj.size) * obj.dtype.itemsize) if isinstance(obj, h5py.Dataset) else None)
    except (OSError, ValueError, TypeError) as e:
        raise PolicyImportError(f"{where}: not a readable HDF5 file ({short(str(e), 100)})") \
            from None
    if sum(sizes) > MAX_WEIGHTS_BYTES:
        raise PolicyImportError(f"{where}: refused: datasets of {sum(sizes):,} bytes, more than "
                                f"the limit of {MAX_WEIGHTS_BYTES:,}")


def load(path: Path, env_id: str | None) -> Imported:
    import tensorflow as tf
    path = Path(path)
    if env_id is None:
        raise PolicyImportError(f"{path}: a Keras model does not say its environment: give --env ID")
    check_file(path)
    model = safe_load_keras(path)
    for w in model.weights:
        check_finite(getattr(w, "path", None) or w.name, w.numpy(), str(path), PolicyImportError)
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise PolicyImportError(f"{path}: the model has {len(model.inputs)} inputs and "
                           f"{len(model.outputs)} outputs; one of each is supported")
    obs_shape = tuple(int(d) for d in model.inputs[0].shape[1:])
    check_spaces(env_id, obs_shape, env_action(env_id), str(path))
    check_outputs(env_id, int(np.prod(model.outputs[0].shape[1:])), str(path))
    # a copy with float32 input (what the converter and the board take), the same weights
    copy = tf.keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    return Imported(model=copy, env_id=env_id, algo="keras",
                    source={"kind": "keras", "file": path.name, "sha256": sha256(path),
                            "format": path.suffix.lstrip(".")},
                    reference=keras_call(model), reference_name=f"the source model in TensorFlow {tf.__version__}'s Keras",
                    network={"type": "keras", "layers": [layer.__class__.__name__
                                                         for layer in model.layers]})
