"""Generated code and kernels under AddressSanitizer and UBSan: every supported kind of policy,
inputs including saturating and non-finite ones, no report, same bytes as the plain build."""
import subprocess

import numpy as np
import pytest

from helpers_models import DRIVER, compile_c, convert, core_sources, random_cnn, random_mlp, run_driver
from quarl_edge.converters.cgen import generate

SAN = ["-fsanitize=address,undefined,float-cast-overflow", "-fno-sanitize-recover=all", "-g", "-O1"]

KINDS = [("int8", 7, [16, 3], ["relu", "tanh"]), ("int8_io", 4, [8, 8, 2], ["relu6", "relu", "none"]),
         ("int16x8", 5, [12, 2], ["relu", "none"]), ("float", 6, [10, 2], ["relu", "sigmoid"]),
         ("int8", (6, 6, 2), "cnn", "max"), ("float", (6, 6, 2), "cnn", "gap")]


@pytest.mark.parametrize("mode, n_in, widths, acts", KINDS,
                         ids=[f"{k[0]}-{'cnn' if k[2] == 'cnn' else 'mlp'}-{i}" for i, k in enumerate(KINDS)])
def test_generated_model_is_clean_under_asan_and_ubsan(tmp_path, mode, n_in, widths, acts):
    shape = n_in if isinstance(n_in, tuple) else (n_in,)
    calib = np.random.default_rng(0).normal(size=(100, *shape)).astype(np.float32)
    tfl = tmp_path / "m.tflite"
    model = random_cnn(5, shape, acts) if widths == "cnn" else random_mlp(5, n_in, widths, acts)
    tfl.write_bytes(convert(model, mode, calib))
    gm = generate(tfl, tmp_path / "gen")
    sources = [tmp_path / "gen" / "model.c", *core_sources(), DRIVER]
    plain = compile_c(sources, tmp_path / "plain")
    sanitized = compile_c(sources, tmp_path / "san", SAN)
    rng = np.random.default_rng(1)
    if mode == "int8_io":
        x = rng.integers(-128, 128, size=(300, *shape)).astype(np.int8)
    else:
        scale = rng.choice([1, 100, 1e30], size=(300,) + (1,) * len(shape))
        x = (rng.normal(size=(300, *shape)) * scale).astype(np.float32)
        x[:3] = np.array([np.inf, -np.inf, np.nan], np.float32).reshape((3,) + (1,) * len(shape))
    records = x.tobytes()
    proc = subprocess.run([str(sanitized)], input=records, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    assert b"runtime error" not in proc.stderr and b"ERROR: AddressSanitizer" not in proc.stderr
    assert proc.stdout == run_driver(plain, records)
    assert len(proc.stdout) == 300 * sum(t.nbytes for t in gm.outputs)
