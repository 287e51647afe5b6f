"""quarl-edge: quantized RL policies from training to a microcontroller, measured on the board.

    import quarl_edge as qe
    res = qe.validate("policy.tflite", "mps2-an386")     # bit-exact with TF Lite Micro?
    print(res.bit_exact, res.latency.median, res.latency.unit)

The functions (train, import_policy, quantize, sweep, build, validate, hil, bench, study,
study_status, report, boards, ports, session) and their result dataclasses are quarl_edge.api's;
errors a user can cause are `qe.QuarlError` and its subclasses (quarl_edge.core.errors). Nothing is
imported until it is used, so `import quarl_edge` is cheap and this package also runs on a board
that has only the protocol (the linux agent, quarl_edge/link/agent.py).
"""

import os as _os

__version__ = "0.1.0"



def _tensorflow_version() -> tuple[int, int] | None:
    """(major, minor) of the installed TensorFlow, from its metadata (TensorFlow not imported)."""
    from importlib import metadata
    for dist in ("tensorflow", "tensorflow-cpu"):
        try:
            return tuple(int(p) for p in metadata.version(dist).split(".")[:2])
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return None


# Every network here is a Keras 2 model (TF-Agents' networks, tfmot's QAT wrappers, the run's
# qnet.keras / policy.keras). TensorFlow >= 2.16 makes `tf.keras` Keras 3 unless this is set
# before TensorFlow is imported, and then takes it from the tf-keras package (the `tf` extra).
# TensorFlow 2.15 has Keras 2 built in, and with it set would look for tf-keras too: so only
# for >= 2.16 (or none installed yet). A user who set it already keeps theirs.
if (_tensorflow_version() or (2, 16)) >= (2, 16):
    _os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# TensorFlow's oneDNN kernels off: float results that do not depend on the CPU's instruction set
# (TF says they "may differ slightly" with them on), and no oneDNN notice on stderr, which
# TF >= 2.16 prints from C++ before TF_CPP_MIN_LOG_LEVEL applies. The networks here are far too
# small for oneDNN to matter to speed.
_os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

_ERRORS = ("QuarlError", "ModelError", "UnsupportedOpError", "BoardError", "ToolchainError",
           "ProtocolError")

__all__ = ["__version__", *_ERRORS, "train", "import_policy", "quantize", "sweep", "build", "validate", "hil",
           "export", "bench", "bench_per_op", "study", "report", "boards", "ports", "session",
           "farm_node"]


def __getattr__(name: str):
    """The API on first use (PEP 562): `qe.validate` imports quarl_edge.api then. A name that
    is only a submodule's (`from .. import tflite_host` inside the package) is not the API's:
    the import system then loads that module, without loading the API (which imports every
    stage, maybe the very module being imported). `study` is both the API's function and the
    stage's package: the API answers it (the API loads the package only when a study runs, so
    the package's import does not shadow the function before)."""
    from importlib import import_module     # not `from . import`: that asks __getattr__ again
    from importlib.util import find_spec
    if name in _ERRORS:
        return getattr(import_module("quarl_edge.core.errors"), name)
    submodule = not name.startswith("__") and find_spec(f"{__name__}.{name}") is not None
    if name.startswith("__") or (submodule and name not in __all__):
        raise AttributeError(f"module 'quarl_edge' has no attribute {name!r}")
    api = import_module("quarl_edge.api")
    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'quarl_edge' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
