"""Issue 12: models of several inputs and outputs validate (policies with dict observations,
actor-critic heads). The real TFLite converter makes a two-input, two-output Keras model; the
board's outputs are compared with TF Lite Micro's, output by output, on the host board and on
QEMU's mps2-an386; `--inputs` takes an .npz with one array per input, and each bad archive gets
one line naming the input at fault."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from helpers_models import cli, cli_json
from quarl_edge.measure.reference import TFLMReference
from quarl_edge.core.tfcompat import configure_converter
from quarl_edge.targets.boards import get_board


@pytest.fixture(scope="module")
def two_io(tmp_path_factory):
    """pos (3) and vel (5) -> q (4) and v (1): the inputs meet in a CONCATENATION, float I/O,
    full int8 inside (and the same model in float32)."""
    import tensorflow as tf
    d = tmp_path_factory.mktemp("two_io")
    tf.keras.utils.set_random_seed(0)
    a, b = tf.keras.Input((3,), name="pos"), tf.keras.Input((5,), name="vel")
    x = tf.keras.layers.Concatenate()([tf.keras.layers.Dense(8, activation="relu")(a), b])
    h = tf.keras.layers.Dense(16, activation="relu")(x)
    m = tf.keras.Model([a, b], [tf.keras.layers.Dense(4, name="q")(h),
                                tf.keras.layers.Dense(1, name="v")(h)])
    rng = np.random.default_rng(0)

    def rep():
        for _ in range(100):
            yield [rng.normal(size=(1, 3)).astype(np.float32),
                   rng.normal(size=(1, 5)).astype(np.float32)]
    paths = {}
    for scheme in ("fp32", "int8"):
        c = configure_converter(tf.lite.TFLiteConverter.from_keras_model(m))
        if scheme == "int8":
            c.optimizations = [tf.lite.Optimize.DEFAULT]
            c.representative_dataset = rep
            c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        paths[scheme] = d / f"{scheme}.tflite"
        paths[scheme].write_bytes(c.convert())
    xr = np.random.default_rng(1)
    np.savez(d / "x.npz", pos=xr.normal(size=(30, 3)).astype(np.float32),
             vel=xr.normal(size=(30, 5)).astype(np.float32))
    return d, paths


def _board_or_skip(board_id):
    b = get_board(board_id)
    if b.kind != "host" and (shutil.which(b.cc) is None or shutil.which("qemu-system-arm") is None):
        pytest.skip(f"{b.cc} or qemu-system-arm is not installed")


@pytest.mark.parametrize("scheme", ["fp32", "int8"])
def test_two_inputs_two_outputs_validate_bit_exact_on_the_host(two_io, scheme, tmp_path):
    d, paths = two_io
    out = tmp_path / "y.npz"
    res = cli_json("validate", str(paths[scheme]), "--board", "host", "--inputs",
                   str(d / "x.npz"), "--save-outputs", str(out), "--out", str(tmp_path / "b"))
    assert res["n"] == 30 and res["bit_exact"] and res["differing"] == 0, res
    assert len(res["outputs"]) == 2                       # one set of metrics per output
    # the saved outputs are TFLM's, output by output (so the comparison compared something)
    ref = TFLMReference(paths[scheme])
    x = np.load(d / "x.npz")
    want = [ref.run([x["pos"][i:i + 1], x["vel"][i:i + 1]]) for i in range(30)]
    saved = np.load(out)
    names = sorted(saved.files)
    assert len(names) == 2
    for j in range(2):
        got = saved[saved.files[j]]
        exp = np.concatenate([w[j] for w in want])
        assert got.shape == exp.shape and np.array_equal(got, exp)
    assert {np.load(out)[k].shape[1] for k in names} == {1, 4}


def test_two_inputs_random_rows_bit_exact_on_mps2_an386(two_io, tmp_path):
    _board_or_skip("mps2-an386")
    _, paths = two_io
    res = cli_json("validate", str(paths["int8"]), "--board", "mps2-an386", "--random", "40",
                   "--out", str(tmp_path / "b"))
    assert res["n"] == 40 and res["bit_exact"] and res["differing"] == 0, res
    assert [o["top1_agreement"] for o in res["outputs"]].count(1.0) == 1   # the q head only


@pytest.mark.parametrize("case,arrays,needle", [
    ("npy", None, "has 2 inputs (pos, vel); pass an .npz"),
    ("missing", {"pos": np.zeros((4, 3), np.float32)}, "no array for the model's input 1 'vel'"),
    ("shape", {"pos": np.zeros((4, 3), np.float32), "vel": np.zeros((4, 4), np.float32)},
     "(input 1 'vel') holds float32 (4, 4)"),
    ("dtype", {"pos": np.zeros((4, 3), np.float64), "vel": np.zeros((4, 5), np.float32)},
     "(input 0 'pos') holds float64"),
    ("rows", {"pos": np.zeros((4, 3), np.float32), "vel": np.zeros((5, 5), np.float32)},
     "different numbers of rows (pos 4, vel 5)"),
    ("extra", {"pos": np.zeros((4, 3), np.float32), "vel": np.zeros((4, 5), np.float32),
               "acc": np.zeros((4, 1), np.float32)}, "no input of the model: acc"),
    ("positional", [np.zeros((4, 3), np.float32), np.zeros((4, 5), np.float32)], None),
])
def test_bad_npz_inputs_name_the_input(two_io, tmp_path, case, arrays, needle):
    _, paths = two_io
    if case == "npy":
        path = tmp_path / "x.npy"
        np.save(path, np.zeros((4, 3), np.float32))
    else:
        path = tmp_path / "x.npz"
        if isinstance(arrays, list):
            np.savez(path, *arrays)                      # arr_0, arr_1: by position
        else:
            np.savez(path, **arrays)
    if needle is None:
        res = cli_json("validate", str(paths["fp32"]), "--board", "host", "--inputs", str(path),
                       "--out", str(tmp_path / "b"))
        assert res["n"] == 4 and res["bit_exact"]
        return
    proc = cli("validate", str(paths["fp32"]), "--board", "host", "--inputs", str(path),
               "--out", str(tmp_path / "b"), expect=2)
    err = proc.stderr.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_several_outputs_are_not_saved_to_an_npy(two_io, tmp_path):
    d, paths = two_io
    proc = cli("validate", str(paths["fp32"]), "--board", "host", "--inputs", str(d / "x.npz"),
               "--save-outputs", str(tmp_path / "y.npy"), expect=2)
    assert "has 2 outputs: save them to an .npz" in proc.stderr
    assert not (tmp_path / "y.npy").exists()


def test_an_input_without_a_batch_axis_takes_one_sample_or_whole_samples(tmp_path):
    """Issue 26: a model whose inputs are [1, 4, 8] and [8] (a bias beside an activation, as in
    TF Lite Micro's seanet tests). `--inputs` takes rows for the batched input and one sample of
    the other (used with every row), or, with --samples, stacks of whole samples; a wrong shape
    names the accepted forms; --random fills both."""
    from helpers_models import op_model, schema
    opt = schema().AddOptionsT()
    model = tmp_path / "add.tflite"
    model.write_bytes(op_model("ADD", [dict(shape=[1, 4, 8], dtype="int8", q=(0.05, 3)),
                                       dict(shape=[8], dtype="int8", q=(0.02, -5))],
                               [dict(shape=[1, 4, 8], dtype="int8", q=(0.07, -1))], opt))
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (5, 4, 8), dtype=np.int8)
    b = rng.integers(-128, 128, (8,), dtype=np.int8)
    np.savez(tmp_path / "rows.npz", in0=a, in1=b)
    v = cli_json("validate", model, "--board", "host", "--inputs", tmp_path / "rows.npz",
                 "--save-outputs", tmp_path / "y.npy", "--json")
    assert v["bit_exact"] and v["n"] == 5
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (5, 4, 8)
    # the stacks of whole samples: the same five samples give the same outputs
    np.savez(tmp_path / "samples.npz", in0=a[:, None], in1=np.repeat(b[None], 5, axis=0))
    v = cli_json("validate", model, "--board", "host", "--inputs", tmp_path / "samples.npz",
                 "--samples", "--save-outputs", tmp_path / "y2.npy", "--json")
    assert v["bit_exact"] and v["n"] == 5
    assert np.array_equal(np.load(tmp_path / "y2.npy"), y)
    # a stack without --samples is not one of the forms: the error lists them
    np.savez(tmp_path / "mixed.npz", in0=a, in1=np.repeat(b[None], 5, axis=0))
    p = cli("validate", model, "--board", "host", "--inputs", tmp_path / "mixed.npz", expect=2)
    assert "(8,) for one sample" in p.stderr and "(n, 8) with --samples" in p.stderr
    v = cli_json("validate", model, "--board", "host", "--random", "20", "--json")
    assert v["bit_exact"] and v["n"] == 20
    p = cli("validate", model, "--board", "host", "--random", "20", "--samples", expect=2)
    assert "pass --inputs" in p.stderr
