"""quarl_edge/converters/tflm_export.py: the C array holds exactly the .tflite's bytes, 16-byte aligned."""
from __future__ import annotations

import subprocess
import sys

import pytest

from helpers_models import affine_model, gcc
from quarl_edge.converters import tflm_export
from quarl_edge.core.errors import ModelError

DUMP = r'''
#include <stdint.h>
#include <stdio.h>
#include "%s.h"
int main(void)
{
    if (((uintptr_t)%s & 15u) != 0) { return 3; }
    return fwrite(%s, 1, %s_len, stdout) == %s_len ? 0 : 1;
}
'''


@pytest.mark.parametrize("std, name", [("c99", "g_model"), ("c11", "policy_model")])
def test_c_array_round_trips_and_is_aligned(tmp_path, std, name):
    data = affine_model("QUANTIZE", 37, 0.1, 3)
    assert len(data) % 12 != 0                  # a partial last line
    (tmp_path / "m.tflite").write_bytes(data)
    c_path, h_path = tflm_export.export(tmp_path / "m.tflite", tmp_path / name, name)
    src = c_path.read_text()
    assert f"const unsigned char {name}[]" in src and f"const unsigned int {name}_len = {len(data)}u;" in src
    assert ("alignas(16)" in src) and "aligned(16)" in src
    (tmp_path / "dump.c").write_text(DUMP % (name, name, name, name, name))
    exe = tmp_path / "dump"
    res = subprocess.run([gcc(), f"-std={std}", "-Wall", "-Wextra", "-Werror", "-pedantic",
                          f"-I{tmp_path}", str(c_path), str(tmp_path / "dump.c"), "-o", str(exe)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    out = subprocess.run([str(exe)], capture_output=True)
    assert out.returncode == 0 and out.stdout == data


def test_compiles_as_cpp(tmp_path):
    import shutil
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    (tmp_path / "m.tflite").write_bytes(affine_model("DEQUANTIZE", 4, 0.5, 0))
    c_path, _ = tflm_export.export(tmp_path / "m.tflite", tmp_path / "g_model")
    res = subprocess.run([gxx, "-std=c++11", "-Wall", "-Werror", "-x", "c++", "-c", str(c_path),
                          "-o", str(tmp_path / "m.o")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_cli_and_errors(tmp_path):
    (tmp_path / "m.tflite").write_bytes(affine_model("QUANTIZE", 3, 0.1, 0))
    ok = subprocess.run([sys.executable, "-m", "quarl_edge.converters.tflm_export",
                         str(tmp_path / "m.tflite"), str(tmp_path / "out" / "g_model")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "out" / "g_model.c").is_file() and (tmp_path / "out" / "g_model.h").is_file()
    (tmp_path / "bad.tflite").write_bytes(b"nope")
    with pytest.raises(ModelError, match="not a TFLite model"):
        tflm_export.export(tmp_path / "bad.tflite", tmp_path / "x")
    err = subprocess.run([sys.executable, "-m", "quarl_edge.converters.tflm_export",
                          str(tmp_path / "bad.tflite"), str(tmp_path / "y")], capture_output=True, text=True)
    assert err.returncode == 2 and err.stderr.startswith("error: ")
