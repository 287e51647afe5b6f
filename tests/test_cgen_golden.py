"""What the generator writes stays fixed: the shipped example models' model.c and model.json,
pinned by SHA-256, and the zero-point range every quantized tensor it reads must satisfy.

The hashes were computed with the generator as it stood before quarl_edge/converters/cgen.py was split into
a driver, an emitter and one lowering file per op (quarl_edge/converters/emit.py, quarl_edge/converters/ops/): moving
code must not change a byte of what the generator writes. A deliberate change of the generated
C or of model.json (a new comment, a different parameter layout, ...) updates these hashes in
the same commit, and that commit's message says why the output changed.

Zero points: an int8 tensor's must lie in [-128, 127], an int16 tensor's in [-32768, 32767]
(the C output stages rely on |offset| fitting int16). Converters never write anything else, so
this refuses only malformed models and changes no valid model's output (the goldens above).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from helpers_models import build_tflite, fc_model, op_model, quant, schema, tensor

from quarl_edge.converters import cgen
from quarl_edge.core.errors import UnsupportedOpError

MODELS = Path(__file__).resolve().parents[1] / "examples" / "cartpole_dqn" / "models"

GOLDEN = {  # model file -> (sha256 of model.c, sha256 of model.json)
    "fp32.tflite": ("fd2ae91c4191b31e1da8cd2a30ec1a5607e7323398328f9a9be98c19bf0d41e6",
                    "6c03ab579b26789b807830f900b89c775238e6f46d099e75c9eb87cb13c74440"),
    "int8.tflite": ("644aaef8fe2926b4c7b9acfbcfcf218078239036775f7a3e2107f0d9826568a8",
                    "c72713b9c3b5ac86edd2dc4852ca92cf75615a1e897ce59cbfd4bd3d7b43f62c"),
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("model", sorted(GOLDEN))
def test_generated_files_are_unchanged(model, tmp_path):
    gm = cgen.generate(MODELS / model, tmp_path)
    assert (_sha256(gm.c_path), _sha256(gm.json_path)) == GOLDEN[model]


def test_fp16_example_is_still_refused(tmp_path):
    """The third shipped model (float16 weights) is refused by name, as before the split."""
    with pytest.raises(UnsupportedOpError, match="DEQUANTIZE.*float16"):
        cgen.generate(MODELS / "fp16.tflite", tmp_path / "gen")
    assert not (tmp_path / "gen" / "model.c").exists()


def test_every_shipped_model_is_covered():
    assert {p.name for p in MODELS.glob("*.tflite")} == set(GOLDEN) | {"fp16.tflite"}


# ------------------------------------------------------------------- zero-point range
@pytest.mark.parametrize("kwargs, words", [
    (dict(input_q=(0.1, 200)), "input 'input' has zero point 200, outside the int8 range [-128, 127]"),
    (dict(input_q=(0.1, -129)), "input 'input' has zero point -129"),
    (dict(output_q=(0.1, 300)), "output 'output' has zero point 300, outside the int8 range"),
    (dict(weight_zp=128), "weights 'fc/weights' has zero point 128, outside the int8 range"),
    (dict(weight_scale=[0.01, 0.02], weight_zp=-200), "weights 'fc/weights' has zero point -200"),
])
def test_int8_zero_point_out_of_range_is_refused(tmp_path, kwargs, words):
    args = dict(input_q=(0.1, 0), weight_scale=0.01, output_q=(0.1, 0))
    args.update(kwargs)
    path = tmp_path / "zp.tflite"
    path.write_bytes(fc_model([[1, 2], [3, 4]], args.pop("input_q"), args.pop("weight_scale"),
                              args.pop("output_q"), **args))
    with pytest.raises(UnsupportedOpError, match="FULLY_CONNECTED") as exc:
        cgen.generate(path, tmp_path / "gen")
    assert words in str(exc.value), str(exc.value)
    assert not (tmp_path / "gen" / "model.c").exists()


def test_int16_zero_point_out_of_range_is_refused(tmp_path):
    s = schema()
    tensors = [tensor("x", [1, 4], s.TensorType.FLOAT32, 1),
               tensor("q", [1, 4], s.TensorType.INT16, 2, quant(0.01, 40000))]
    path = tmp_path / "q16.tflite"
    path.write_bytes(build_tflite(tensors, [None, None, None], [("QUANTIZE", [0], [1], None)], [0], [1]))
    with pytest.raises(UnsupportedOpError,
                       match=r"QUANTIZE .*tensor 'q' has zero point 40000, outside the int16 range "
                             r"\[-32768, 32767\]"):
        cgen.generate(path, tmp_path / "gen")


def test_graph_io_zero_point_out_of_range_is_refused(tmp_path):
    """A RESHAPE does not read the quantization, but the graph's input/output spec does."""
    path = tmp_path / "r.tflite"
    q = (0.5, 1000)
    path.write_bytes(op_model("RESHAPE", [dict(shape=[1, 4], dtype="int8", q=q)],
                              [dict(shape=[2, 2], dtype="int8", q=q)]))
    with pytest.raises(UnsupportedOpError, match="graph input 'in0' has zero point 1000"):
        cgen.generate(path, tmp_path / "gen")


def test_zero_points_at_the_int8_limits_are_accepted(tmp_path):
    path = tmp_path / "edge.tflite"
    path.write_bytes(fc_model([[1, 2], [3, 4]], (0.1, -128), 0.01, (0.1, 127)))
    src = cgen.generate(path, tmp_path / "gen").c_path.read_text()
    assert ".input_offset = 128," in src and ".output_offset = 127," in src
