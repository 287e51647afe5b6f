"""quarl-edge: quantized RL policies from training to a microcontroller, measured on the board.

    import quarl_edge as qe
    res = qe.validate("policy.tflite", "mps2-an386")     # bit-exact with TF Lite Micro?
    print(res.bit_exact, res.latency.median, res.latency.unit)

The functions (train, import_policy, quantize, sweep, build, validate, hil, bench, study, report, boards,
ports, session) and their result dataclasses are quarl_edge.api's; errors a user can cause are
`qe.QuarlError` and its subclasses (quarl_edge.errors). Nothing is imported until it is used,
so `import quarl_edge` is cheap and this package also runs on a board that has only the
protocol (the linux agent, quarl_edge/link/agent.py).
"""

__version__ = "0.1.0"

_ERRORS = ("QuarlError", "ModelError", "UnsupportedOpError", "BoardError", "ToolchainError",
           "ProtocolError")

__all__ = ["__version__", *_ERRORS, "train", "import_policy", "quantize", "sweep", "build", "validate", "hil",
           "bench", "study", "report", "boards", "ports", "session", "farm_node"]


def __getattr__(name: str):
    """The API on first use (PEP 562): `qe.validate` imports quarl_edge.api then."""
    from importlib import import_module     # not `from . import`: that asks __getattr__ again
    if name in _ERRORS:
        return getattr(import_module("quarl_edge.errors"), name)
    api = import_module("quarl_edge.api")
    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'quarl_edge' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
