"""Errors a user can cause. The CLI catches QuarlError once: one clear line, exit code 2."""


class QuarlError(Exception):
    """Base of every error caused by input, configuration or environment (not a bug)."""


class ModelError(QuarlError):
    """A .tflite file that is malformed or uses something the generator does not support."""


class UnsupportedOpError(ModelError):
    """An op, type or shape the firmware cannot run; the message names it."""


class BoardError(QuarlError):
    """A board file that is invalid, a board that is unknown or does not answer."""


class ToolchainError(QuarlError):
    """A compiler, emulator or flasher that is missing or failed; says how to install it."""


class ProtocolError(BoardError):
    """The board answered with an error frame or something that is not a valid reply. `code`:
    the error frame's name (docs/protocol.md: BAD_PAYLOAD, NOT_READY, ...), if it was one."""

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.code = code


class BoardReset(BoardError):
    """The board restarted during a session (its boot id changed, or it announced a boot). The
    link has handshaken again and checked that the board still runs the same model; what was
    in progress (an INFER, an episode) is lost and must be redone by the caller."""


# The optional packages, by the top-level module a command imports, and how to install each
# (pyproject.toml's extras). A command that reaches one of them without it installed is a user
# error (exit 2) that names the extra, not a traceback.
_TF_AGENTS_NO_DEPS = "pip install --no-deps tf-agents==0.19.0 gym==0.23.0"
OPTIONAL_MODULES = {
    "tensorflow": ("TensorFlow (the TFLite converter)", "pip install 'quarl-edge[tf]'"),
    "tf_keras": ("tf-keras (Keras 2, for TensorFlow >= 2.16)", "pip install 'quarl-edge[tf]'"),
    "tensorflow_probability": ("TensorFlow Probability (training)",
                               "pip install 'quarl-edge[train]'"),
    "tensorflow_model_optimization": ("tensorflow-model-optimization (QAT)",
                                      "pip install 'quarl-edge[train]'"),
    "tf_agents": ("TF-Agents (training)",
                  f"pip install 'quarl-edge[train]' (on Python 3.12+ then: {_TF_AGENTS_NO_DEPS})"),
    "gym": ("gym 0.23 (TF-Agents imports it)", _TF_AGENTS_NO_DEPS),
    "onnx": ("onnx (ONNX import)", "pip install 'quarl-edge[onnx]'"),
    "onnxruntime": ("onnxruntime (ONNX import)", "pip install 'quarl-edge[onnx]'"),
    "ray": ("Ray (study --ray, the board farm)", "pip install 'quarl-edge[ray]'"),
    "mujoco": ("MuJoCo (the MuJoCo tasks)", "pip install 'quarl-edge[mujoco]'"),
    "minatar": ("MinAtar (the MinAtar tasks)", "pip install --no-deps MinAtar==1.0.15"),
}


# Commands that train: a missing TensorFlow is the `train` extra's (it brings TF as well).
TRAINING_COMMANDS = ("train", "study")


def missing_extra(error: BaseException, command: str | None = None) -> str | None:
    """For an ImportError of one of OPTIONAL_MODULES, the one line that says what is missing and
    how to install it (for `command`); None for any other error (a missing module of our own is
    a bug)."""
    if not isinstance(error, ImportError):
        return None
    name = (getattr(error, "name", None) or "").split(".")[0]
    if name not in OPTIONAL_MODULES:
        # TensorFlow >= 2.16 with TF_USE_LEGACY_KERAS=1 and no tf-keras raises a plain
        # ImportError that names the package in its text
        text = str(error)
        name = next((m for m in ("tf_keras", "tf-keras") if m in text), "")
        name = "tf_keras" if name else ""
        if not name:
            return None
    what, how = OPTIONAL_MODULES[name]
    if command in TRAINING_COMMANDS and name in ("tensorflow", "tf_keras"):
        what, how = "TensorFlow and TF-Agents (training)", OPTIONAL_MODULES["tf_agents"][1]
    return f"needs {what}, not installed here: {how}"
