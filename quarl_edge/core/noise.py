"""Third-party noise: what TensorFlow, absl, TF-Agents and gym print on their own.

`captured_stderr()` keeps what C++ code prints on file descriptor 2 out of the terminal (the
TFLite converter's MLIR statistics, TF Lite Micro's allocation attempts), for the caller to show
when the call failed.

`quiet_third_party()` is what the CLI does by default (`-v` skips it) and what a study's
workers do: TensorFlow's C++ info and warning lines, its Python logger and absl's below
ERROR, Python warnings raised inside those packages (deprecations, "is not supported"
notes), and gym's import-time "Gym has been unmaintained" banner (gym is imported by
TF-Agents 0.19; the banner comes from the gym_notices package, whose table is emptied
here). Errors still show. Python API users call it themselves if they want it: a library
does not change the process's warning filters unasked.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import os
import sys
import tempfile
import warnings

NOISY = ("tensorflow", "tf_agents", "tensorflow_probability", "tensorflow_model_optimization",
         "keras", "absl", "gym", "gymnasium", "flatbuffers", "tflite_runtime",
         "ai_edge_litert")


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
    if not any(isinstance(f, _QuietImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport())


class _QuietImport(importlib.abc.MetaPathFinder):
    """Imports TensorFlow with file descriptor 2 captured. The full `tensorflow` wheel (what the
    `tf` extra installs) prints absl's "All log messages before absl::InitializeLog()", its
    CUDA stub's "Could not find cuda drivers" and "failed call to cuInit" from C++ as it loads
    and finds its devices, before TF_CPP_MIN_LOG_LEVEL applies; what it printed is shown if
    the import fails."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)         # once: the real finders find the package
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader

        class Quiet(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                error, said = None, []
                with captured_stderr() as log:
                    try:
                        loader.exec_module(module)
                        # and its devices, whose CUDA probe logs "failed call to cuInit" as an
                        # error on a machine without a GPU
                        module.config.list_physical_devices()
                    except BaseException as e:   # shown with what TF printed, then raised
                        error, said = e, tail(log, 20)
                if error is not None:
                    if said:
                        print("\n".join(said), file=sys.stderr)
                    raise error

        spec.loader = Quiet()
        return spec


@contextlib.contextmanager
def captured_stderr():
    """What C++ code (the TFLite converter, TF Lite Micro) writes straight to file descriptor 2,
    into a temporary file instead of the terminal; yields the file, so that a caller shows its
    tail only when the call failed."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        try:
            yield log
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def tail(log, lines: int = 5) -> list[str]:
    """The last non-empty lines of a captured_stderr() file."""
    log.seek(0)
    return [ln for ln in log.read().decode(errors="replace").strip().splitlines() if ln.strip()][-lines:]
