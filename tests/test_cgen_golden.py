"""The generated C and model.json of the shipped example models, pinned by SHA-256.

The hashes were computed with the generator as it stood before converters/cgen.py was split into
a driver, an emitter and one lowering file per op (converters/emit.py, converters/ops/): moving
code must not change a byte of what the generator writes. A deliberate change of the generated
C or of model.json (a new comment, a different parameter layout, ...) updates these hashes in
the same commit, and that commit's message says why the output changed.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from quarl_edge.converters import cgen
from quarl_edge.errors import UnsupportedOpError

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
