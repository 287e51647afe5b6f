"""Keras policies (.keras, or legacy .h5): the network itself, loaded without running code from
the file (run.safe_load_keras: no Lambda layers, no custom classes), checked against the env and
saved again as a .keras file. The outputs are taken as the env's action head says (argmax for
discrete actions, the action itself for Box actions; `hil --action scale` for a tanh actor)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..nets import keras_call
from ..run import safe_load_keras
from .common import Imported, PolicyImportError, check_outputs, check_spaces, env_action, sha256


def load(path: Path, env_id: str | None) -> Imported:
    import tensorflow as tf
    path = Path(path)
    if env_id is None:
        raise PolicyImportError(f"{path}: a Keras model does not say its environment: give --env ID")
    model = safe_load_keras(path)
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
