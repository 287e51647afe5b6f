"""Hostile but fair arguments (issue 24): files for directories, directories for files, missing
parents, absurd sizes, non-UTF-8 and wrong-type configs, empty lists. Each gives exactly one
line on stderr, `quarl-edge: error: ...`, and exit 2 (never 3), and writes nothing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers_models import convert, copy_example_tree, random_mlp

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cartpole_dqn"
STUDY = '[study]\nname = "x"\n[[task]]\nalgo = "dqn"\nenv = "CartPole-v1"\nsteps = 100\n'


@pytest.fixture(scope="module")
def here(tmp_path_factory):
    """A folder with the hostile inputs, the example run at run/."""
    d = tmp_path_factory.mktemp("hostile")
    copy_example_tree(d / "run")
    copy_example_tree(d / "badrun")
    (d / "badrun" / "qnet.keras").write_text("not a Keras model\n")
    copy_example_tree(d / "shaperun")               # run.json disagrees with its network
    meta = json.loads((d / "shaperun" / "run.json").read_text())
    (d / "shaperun" / "run.json").write_text(json.dumps({**meta, "obs_shape": [5]}))
    (d / "afile").write_text("not a directory\n")
    (d / "adir").mkdir()
    from numpy.lib import format as npformat
    with open(d / "huge.npy", "wb") as f:       # a 29 TiB array in a 192-byte file
        npformat.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False,
                                            "shape": (10 ** 12, 4)})
        f.write(b"\0" * 64)
    import h5py
    import tensorflow as tf
    tf.keras.models.load_model(EXAMPLE / "qnet.keras", compile=False).save(d / "bad.h5")
    with h5py.File(d / "bad.h5", "a") as f:
        f.attrs["model_config"] = "{not json"
    # int8 weights, float activations (64x64: the converter keeps smaller weights float)
    hybrid = random_mlp(0, 4, [64, 64, 2], ["relu", "relu", "none"])
    (d / "hybrid.tflite").write_bytes(convert(hybrid, "dynamic"))
    (d / "latin1.toml").write_bytes('[study]\nname = "caf\xe9"\n'.encode("latin-1"))
    (d / "abc.toml").write_text(STUDY + '[task.options]\nhidden = ["abc"]\n')
    (d / "str.toml").write_text(STUDY + '[task.options]\nhidden = "64"\n')
    return d


MODEL = "run/models/int8.tflite"
CASES = {
    "bench-empty-boards": (["bench", "run", "--boards", ""], "no board"),
    "bench-commas": (["bench", "run", "--boards", ",,"], "no board"),
    "import-out-file": (["import", str(EXAMPLE / "qnet.keras"), "--env", "CartPole-v1",
                         "--out", "afile"], "not a directory"),
    "import-out-under-file": (["import", str(EXAMPLE / "qnet.keras"), "--env", "CartPole-v1",
                               "--out", "afile/run"], "not a directory"),
    "hil-out-file": (["hil", "run", "--board", "host", "--episodes", "1", "--out", "afile"],
                     "not a directory"),
    "validate-out-file": (["validate", MODEL, "--board", "host", "--out", "afile"],
                          "not a directory"),
    "bench-out-file": (["bench", "run", "--boards", "host", "--out", "afile"],
                       "not a directory"),
    "save-outputs-dir": (["validate", MODEL, "--board", "host", "--random", "3",
                          "--save-outputs", "adir"], "is a directory"),
    "save-outputs-missing-dir": (["validate", MODEL, "--board", "host", "--random", "3",
                                  "--save-outputs", "nodir/y.npy"], "does not exist"),
    "random-huge": (["validate", MODEL, "--board", "host", "--random", "1000000000000"],
                    "at most"),
    "npy-header-huge": (["validate", MODEL, "--board", "host", "--inputs", "huge.npy"],
                        "header claims"),
    "h5-config-not-json": (["import", "bad.h5", "--env", "CartPole-v1", "--out", "r"],
                           "model_config"),
    "study-not-utf8": (["study", "latin1.toml", "--out", "s"], "not UTF-8"),
    "study-hidden-abc": (["study", "abc.toml", "--out", "s"], "list of integers"),
    "study-hidden-string": (["study", "str.toml", "--out", "s"], "list of integers"),
    "train-hidden-abc": (["train", "--env", "CartPole-v1", "--steps", "100", "--out", "t",
                          "--set", 'hidden=["abc"]'], "list of integers"),
    "boards-dir-missing": (["--boards-dir", "/nonexistent", "boards"], "no such directory"),
    "hil-bad-keras-first": (["hil", "badrun", "--board", "host", "--episodes", "1"],
                            "not a zip"),
    "validate-fp16": (["validate", "run/models/fp16.tflite", "--board", "host"],
                      "float16 weights"),
    "validate-hybrid": (["validate", "hybrid.tflite", "--board", "host"],
                        "hybrid (dynamic-range quantized) model"),
    "run-obs-shape-disagrees": (["hil", "shaperun", "--board", "host", "--episodes", "1"],
                                "obs_shape [5]"),
    "train-hidden-string": (["train", "--env", "CartPole-v1", "--steps", "100", "--out", "t",
                             "--set", 'hidden="64"'], "list of integers"),
}


def listing(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*") if "build" not in p.parts}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_hostile_argument_is_one_line_and_exit_2(here, name):
    args, words = CASES[name]
    before = listing(here)
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", *args], capture_output=True,
                       text=True, timeout=300, cwd=here)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, p.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("quarl-edge: error:"), p.stderr[-3000:]
    assert words in lines[0], lines[0]
    assert listing(here) == before        # nothing written (nor a temporary file left)
    print(f"quarl-edge {' '.join(args)}  ->  exit {p.returncode}: {lines[0]}")   # pytest -rA


def test_sigterm_is_handled_like_ctrl_c(here, tmp_path):
    """SIGTERM during a long hil on an emulator: exit 143, one line, no QEMU or temp folder
    left, no partial log."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.Popen([sys.executable, "-m", "quarl_edge.cli", "hil", "run", "--board",
                          "mps2-an386", "--episodes", "5000", "--seed", "3", "--out",
                          str(tmp_path / "res")], cwd=here, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp)})
    deadline = time.time() + 240
    while time.time() < deadline and not list((tmp_path / "res").glob("*.partial")):
        time.sleep(0.5)
    time.sleep(3)                  # some episodes in
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err[-2000:]
    assert err.rstrip().endswith("quarl-edge: terminated")
    assert list(tmp.iterdir()) == []
    assert not [f for f in (tmp_path / "res").iterdir() if f.name.endswith(".partial")]
