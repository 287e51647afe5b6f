"""Our statically planned arena is never larger than TF Lite Micro's for the same model.

TFLM's figure is the non-persistent ("head") section of its arena as the RecordingMicroAllocator
reports it (helpers_models.tflm_arena): where its greedy planner puts activation tensors and
scratch buffers. TFLM's persistent section (tensor and node structs, op data) has no
counterpart in RAM here: generated code keeps those facts in flash as const data.
`benchmarks/arena_vs_tflm.py` prints the same comparison, with code sizes, for larger models.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers_models import convert, op_model, random_cnn, random_mlp, tflm_arena, unary_model
from quarl_edge.converters import cgen

ROOT = Path(__file__).resolve().parents[1]


def _models():
    yield "cartpole_int8", (ROOT / "examples/cartpole_dqn/models/int8.tflite").read_bytes()
    yield "cartpole_fp32", (ROOT / "examples/cartpole_dqn/models/fp32.tflite").read_bytes()
    yield "tanh_policy_int8", convert(random_mlp(4, 8, [64, 32, 2], ["tanh", "relu", "tanh"]), "int8")
    yield "relu_int16x8", convert(random_mlp(4, 8, [48, 2], ["relu", "none"]), "int16x8")
    yield "float_tanh_1x300", unary_model("TANH", [1, 300], "float32")
    calib = np.random.default_rng(0).standard_normal((32, 16, 16, 2))
    yield "cnn_maxpool_int8", convert(random_cnn(5, pool="max"), "int8", calib)
    yield "cnn_avgpool_int8_io", convert(random_cnn(5, pool="avg", depth_multiplier=2), "int8_io", calib)
    yield "cnn_gap_fp32", convert(random_cnn(5, pool="gap"), "float", calib)
    shape = dict(shape=[2], dtype="int32", data=np.array([10, 10], np.int32))
    yield "reshape_then_relu", op_model("RESHAPE", [dict(shape=[1, 100], dtype="int8", q=(0.1, 0)), shape],
                                        [dict(shape=[10, 10], dtype="int8", q=(0.1, 0))], None,
                                        op2=("RELU", None, dict(shape=[10, 10], dtype="int8", q=(0.1, 0))))


@pytest.fixture(scope="module")
def models():
    return list(_models())


def test_our_arena_is_at_most_tflms(models, tmp_path):
    rows = []
    for name, data in models:
        path = tmp_path / f"{name}.tflite"
        path.write_bytes(data)
        gm = cgen.generate(path, tmp_path / name)
        tflm = tflm_arena(data)
        rows.append((name, gm.arena_bytes, tflm["head"], tflm["total"]))
    print("\n".join(f"{n:20s} ours {o:6d}  tflm head {h:6d}  total {t:6d}" for n, o, h, t in rows))
    for name, ours, head, _ in rows:
        assert ours <= head, f"{name}: our arena {ours} B > TFLM's {head} B"
    # RESHAPE costs nothing: the reshaped tensor is the graph input's bytes, RELU writes the output
    assert dict((n, o) for n, o, _, _ in rows)["reshape_then_relu"] == 2 * 112
