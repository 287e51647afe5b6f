"""The host's TFLite interpreter: tflite-runtime or LiteRT, one place that chooses.

tflite-runtime 2.14 (2023) is the interpreter the committed results were measured with; it has
wheels for Python <= 3.11 only and fails at run time under numpy 2. LiteRT (`ai-edge-litert`) is
its successor, with the same Interpreter API and wheels for Python 3.11-3.13, and is a core
dependency. The one used is:

  $QUARL_EDGE_TFLITE = "tflite-runtime" or "litert", when set (an error if it is not installed);
  else tflite-runtime where it imports (the Python 3.11 lock installs it), else LiteRT.

Both give the same numbers on this project's tests (tests/test_tflite_host.py); where their
arithmetic and TF Lite Micro's differ is said in quarl_edge/measure/reference.py.

A leaf module (it imports nothing of quarl_edge but errors), so quant/, measure/ and the linux
agent can all use it.
"""
from __future__ import annotations

import functools
import importlib
import os

from .errors import QuarlError

RUNTIMES = {"tflite-runtime": "tflite_runtime.interpreter",
            "litert": "ai_edge_litert.interpreter"}
ENV = "QUARL_EDGE_TFLITE"


@functools.lru_cache(maxsize=None)
def _load(name: str):
    return importlib.import_module(RUNTIMES[name])


def runtime_name() -> str:
    """Which host interpreter runs: "tflite-runtime" or "litert" (see the module docstring)."""
    wanted = os.environ.get(ENV, "").strip()
    if wanted:
        if wanted not in RUNTIMES:
            raise QuarlError(f"${ENV}={wanted!r}: must be one of {', '.join(RUNTIMES)}")
        try:
            _load(wanted)
        except ImportError as e:
            raise QuarlError(f"${ENV}={wanted}, but it does not import ({e}); install it "
                             f"(pip install {'ai-edge-litert' if wanted == 'litert' else wanted})"
                             ) from None
        return wanted
    for name in RUNTIMES:
        try:
            _load(name)
            return name
        except ImportError:
            continue
    raise QuarlError("no TFLite interpreter on the host: pip install ai-edge-litert "
                     "(a dependency of quarl-edge; was it installed with --no-deps?)")


def runtime_version() -> str:
    """The chosen interpreter's name and version, e.g. "litert 2.3.0" (for reports)."""
    from importlib.metadata import PackageNotFoundError, version
    name = runtime_name()
    dist = "ai-edge-litert" if name == "litert" else name
    try:
        return f"{name} {version(dist)}"
    except PackageNotFoundError:
        return name


def installed() -> list[str]:
    """The host interpreters that import here, in RUNTIMES' order."""
    out = []
    for name in RUNTIMES:
        try:
            _load(name)
            out.append(name)
        except ImportError:
            pass
    return out


def interpreter_module(name: str | None = None):
    """The module of interpreter `name` (default: the chosen one): `.Interpreter` and
    `.OpResolverType` as in tflite-runtime."""
    return _load(name or runtime_name())


def Interpreter(*args, runtime: str | None = None, **kwargs):   # noqa: N802 (reads like the class it makes)
    """An Interpreter of the chosen runtime (or of `runtime`), with tflite-runtime's keyword
    arguments."""
    return interpreter_module(runtime).Interpreter(*args, **kwargs)


def newer_runtime(error: Exception) -> str | None:
    """The newer interpreter to load a model with when the chosen one refused it for an op
    version it does not know ("Didn't find op for builtin opcode ... version N"): tflite-runtime
    2.14 predates the int4 FULLY_CONNECTED (version 10) that the TFLite converter's low-bit QAT
    writes (the qat-int8x4 scheme), which LiteRT runs. None when there is no such interpreter:
    another error, LiteRT already chosen or not installed, or ${ENV} naming the runtime."""
    if ("Didn't find op for builtin opcode" not in str(error) or os.environ.get(ENV, "").strip()
            or runtime_name() == "litert" or "litert" not in installed()):
        return None
    return "litert"


def resolver(kernels: str, runtime: str | None = None):
    """The op resolver for a kernel set: "optimized" (the builtin kernels, no default delegate:
    the ops that run are the model's own) or "reference" (TFLite's reference kernels)."""
    types = interpreter_module(runtime).OpResolverType
    return types.BUILTIN_REF if kernels == "reference" else types.BUILTIN_WITHOUT_DEFAULT_DELEGATES
