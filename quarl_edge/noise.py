"""Third-party noise: what TensorFlow, absl, TF-Agents and gym print on their own.

`quiet_third_party()` is what the CLI does by default (`-v` skips it) and what a study's
workers do: TensorFlow's C++ info and warning lines, its Python logger and absl's below
ERROR, Python warnings raised inside those packages (deprecations, "is not supported"
notes), and gym's import-time "Gym has been unmaintained" banner (gym is imported by
TF-Agents 0.19; the banner comes from the gym_notices package, whose table is emptied
here). Errors still show. Python API users call it themselves if they want it: a library
does not change the process's warning filters unasked.
"""
from __future__ import annotations

import logging
import os
import warnings

NOISY = ("tensorflow", "tf_agents", "tensorflow_probability", "tensorflow_model_optimization",
         "keras", "absl", "gym", "gymnasium", "flatbuffers", "tflite_runtime")


def quiet_third_party() -> None:
    """Silence the packages in NOISY below errors, for this process and its children."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")   # C++: no INFO/WARNING (also children)
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", module=name + r"(\.|$)")
    # DeprecationWarnings these packages trigger are attributed to the stdlib module that
    # raises them (distutils, imp, ...), not to the package: not shown to CLI users either.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    try:
        import gym_notices.notices as notices   # read by gym's __init__ when it is imported
        notices.notices.clear()
    except ImportError:
        pass
    try:
        import absl.logging
        absl.logging.set_verbosity(absl.logging.ERROR)
    except ImportError:
        pass
