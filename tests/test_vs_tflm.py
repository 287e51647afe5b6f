"""benchmarks/vs_tflm.py without the third-party sources (they are the user's checkouts, never
downloaded): a missing or wrong source directory is a usage error, exit 2, that says what to pass.
The measurement itself needs TF Lite Micro, CMSIS-NN, ... checkouts: `make vs-tflm`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "vs_tflm.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_no_sources_names_every_required_one_and_exits_2():
    p = run()
    assert p.returncode == 2, p.stderr
    for opt, what in (("--tflm-src", "tensorflow/tflite-micro"), ("--cmsis-nn-src", "CMSIS-NN"),
                      ("--flatbuffers-src", "flatbuffers"), ("--gemmlowp-src", "gemmlowp"),
                      ("--ruy-src", "ruy"), ("--tiny-src", "mlcommons/tiny")):
        assert opt in p.stderr and what in p.stderr, (opt, p.stderr)
    assert "nothing is downloaded" in p.stderr
    assert "--cmsis-src" not in p.stderr.split("error:", 1)[1]   # optional


def test_a_directory_that_is_not_the_checkout_says_which_file_is_missing(tmp_path):
    p = run("--tflm-src", str(tmp_path), "--models", "cartpole")
    assert p.returncode == 2
    assert f"--tflm-src {tmp_path}: no tensorflow/lite/micro/micro_interpreter.h there" in p.stderr
    assert "--tiny-src" not in p.stderr.split("error:", 1)[1]   # kws not asked for
