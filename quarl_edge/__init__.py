"""quarl-edge: quantized RL policies from training to a microcontroller, measured on the board."""

__version__ = "0.1.0"
