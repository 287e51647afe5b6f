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
