"""The names the tool offers, each set written once: the CLI's choices, the API's checks and the
stages' own tables all read them from here.

A foundation module (it imports nothing of the project), so `quarl-edge --help` reads them
without importing TensorFlow or an algorithm. Each stage keys its table by these names, and a
test checks that every name has its entry there and that there is no other:

    ALGOS        quarl_edge.rl.train.ALGOS          the trainers
    SCHEMES      quarl_edge.quant.schemes.SCHEMES   the quantization schemes
    HEADS        quarl_edge.core.envs                 how a network's outputs become an action
    SWEEP_MODES  quarl_edge.quant.nbit              what the n-bit sweep fake-quantizes
    IMPORT_KINDS quarl_edge.importers               the policy formats `import` reads
    BENCH_MAX_N  docs/protocol.md                   BENCH's n is a u16
"""
from __future__ import annotations

ALGOS = ("dqn", "ppo", "sac", "td3", "ddpg")
SCHEMES = ("fp32", "fp16", "int8", "dyn-int8", "int16x8", "int8x4", "qat-int8", "qat-int8x4",
           "qat-distill-int8", "qat-distill-int8x4", "int8-centred", "int8-acc", "int8-centred-acc")
HEADS = ("argmax", "identity", "scale")
SWEEP_MODES = ("weights+activations", "weights", "activations")
IMPORT_KINDS = ("sb3", "rl-zoo", "onnx", "keras", "savedmodel")
BENCH_MAX_N = 0xFFFF
