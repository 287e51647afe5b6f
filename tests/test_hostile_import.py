"""Issue 36: `quarl-edge import` does bounded work on hostile files and says what is wrong in
one line. Each case runs the CLI in a subprocess (helpers_hostile.run_hostile) and must be
refused with exit 2 in one line within 60 s and 1 GB, writing nothing outside --out and no
run folder; the limits are bounded.py's (docs/import.md lists them).

The files (helpers_hostile_import.py): zip bombs (3 GiB of zeros in 3 KB of bzip2) as SB3's
`data`, as policy.pth, as a storage inside policy.pth and as a .keras file's config.json and
weights; pickles of 2^60 shared lists; YAML alias bombs, deep and recursive YAML; deep JSON;
fields of the wrong type; NaN and infinite weights; ONNX graphs that fold into huge tensors,
20,000-node chains, ops of a foreign domain and external data outside the model's folder."""
from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers_hostile import assert_bounded, assert_refused, assert_unchanged, run_hostile, \
    snapshot
from helpers_hostile_import import (SB3, Raw, billion_laughs, bomb, deep_json, deflate_bomb,
                                    mean_bomb, members, tensors_viewing_one_storage,
                                    sb3_zip, shared_lists, shared_tuples, torch_archive,
                                    vecnormalize_pickle, write_zip)
from helpers_rl_zoo import ZOO

PTH = members(SB3 / "dqn_cartpole.zip")["policy.pth"]
DATA = json.loads(members(SB3 / "dqn_cartpole.zip")["data"])


def refused(case: str, tmp_path: Path, source, words: str, *args) -> None:
    """`import SOURCE ARGS --out tmp/out` is refused in one line naming `words`, within the
    bounds, writing nothing but nothing (no run folder, no temporary one beside it)."""
    out = tmp_path / "out"
    before = snapshot(tmp_path)
    o = run_hostile(case, ["import", str(source), *map(str, args), "--out", str(out)], tmp_path)
    assert_refused(o, words)
    assert_unchanged(before, snapshot(tmp_path))
    assert not out.exists() and not list(tmp_path.glob(".out.import-*"))


def _data(**change) -> bytes:
    d = json.loads(json.dumps(DATA))
    for k, v in change.items():
        d[k] = v
    return json.dumps(d).encode()


# ------------------------------------------------------------------ 1. decompression
def test_sb3_data_zip_bomb_is_refused_before_inflating(tmp_path):
    src = sb3_zip(tmp_path / "bomb.zip", data=bomb())
    assert len(bomb().compressed) < 3000           # 2.3 KB of bzip2 for 3 GiB
    refused("sb3-data-bomb", tmp_path, src, "data inflates to 3,221,225,472 bytes",
            "--env", "CartPole-v1")


def test_a_zip_member_that_lies_about_its_size_is_bounded(tmp_path):
    """A deflated member declaring 1 MB that inflates to 256 MiB: read no further than its
    declared size, and refused as corrupted (its CRC); a bzip2 one is refused for its method
    (zipfile inflates all of a bzip2 stream it reads at once, whatever size is asked for)."""
    src = sb3_zip(tmp_path / "liar.zip", data=deflate_bomb(declared=1 << 20))
    refused("sb3-data-deflate-lying", tmp_path, src, "corrupted zip member data",
            "--env", "CartPole-v1")
    src = sb3_zip(tmp_path / "liar.zip", data=bomb(declared=1 << 20))
    refused("sb3-data-bzip2-lying", tmp_path, src, "data is compressed with bzip2",
            "--env", "CartPole-v1")


def test_policy_pth_zip_bomb_is_refused(tmp_path):
    src = sb3_zip(tmp_path / "pth.zip", policy_pth=bomb())
    refused("sb3-pth-bomb", tmp_path, src, "policy.pth inflates to 3,221,225,472 bytes",
            "--env", "CartPole-v1")


def test_a_storage_bomb_inside_policy_pth_is_refused(tmp_path):
    """policy.pth (a zip inside the zip) whose first storage inflates to 3 GiB."""
    inner = members_of(PTH)
    key = sorted(k for k in inner if "/data/" in k)[0]
    inner[key] = bomb()
    src = sb3_zip(tmp_path / "storage.zip", policy_pth=write_zip(None, inner))
    refused("sb3-storage-bomb", tmp_path, src, "inflates to 3,221,225,472 bytes",
            "--env", "CartPole-v1")


def members_of(raw: bytes) -> dict:
    import io
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        return {n: z.read(n) for n in z.namelist()}


def test_keras_config_zip_bomb_is_refused(tmp_path):
    src = tmp_path / "bomb.keras"
    write_zip(src, {"metadata.json": b"{}", "config.json": bomb()})
    refused("keras-config-bomb", tmp_path, src, "config.json inflates to 3,221,225,472 bytes",
            "--env", "CartPole-v1")


def test_keras_weights_zip_bomb_is_refused(tmp_path):
    src = tmp_path / "weights.keras"
    write_zip(src, {"metadata.json": b"{}", "config.json": b"{}", "model.weights.h5": bomb()})
    refused("keras-weights-bomb", tmp_path, src, "its members inflate to 3,221,225,4",
            "--env", "CartPole-v1")


# ------------------------------------------------------------- 2. pickles and aliases
def test_shared_lists_pickle_as_vecnormalize(tmp_path):
    pkl = tmp_path / "vn.pkl"
    pkl.write_bytes(shared_lists())
    assert len(pkl.read_bytes()) < 500
    refused("pickle-shared-lists-vecnorm", tmp_path, SB3 / "dqn_cartpole.zip",
            "not a VecNormalize file (it holds a list of 2 items)",
            "--env", "CartPole-v1", "--vecnormalize", pkl)


def test_shared_lists_as_the_vecnormalize_mean(tmp_path):
    pkl = tmp_path / "vn.pkl"
    pkl.write_bytes(vecnormalize_pickle(mean_bomb()))
    refused("pickle-shared-lists-mean", tmp_path, SB3 / "dqn_cartpole.zip",
            "obs_rms.mean is a list of 2 items, not an array",
            "--env", "CartPole-v1", "--vecnormalize", pkl)


def test_shared_tuples_as_policy_pth(tmp_path):
    assert len(shared_tuples()) < 200
    src = sb3_zip(tmp_path / "t.zip", policy_pth=torch_archive(
        {"data.pkl": shared_tuples(), "byteorder": b"little", "version": b"3"}))
    refused("pickle-shared-tuples-pth", tmp_path, src, "not a state dict of tensors",
            "--env", "CartPole-v1")


def test_a_pickle_whose_dict_key_is_2_to_the_40_shared_tuples(tmp_path):
    """86 bytes that CPython's unpickler alone would take hours on: it hashes each dict key
    it sets, and a tuple's hash walks every path through what it shares."""
    key_bomb = b"\x80\x02}N" + b"2\x86" * 40 + b"Ns."
    assert len(key_bomb) < 100
    pkl = tmp_path / "vn.pkl"
    pkl.write_bytes(key_bomb)
    refused("pickle-hash-bomb-vecnorm", tmp_path, SB3 / "dqn_cartpole.zip",
            "dict keys or set items are tuples of more than 1,000,000 elements",
            "--env", "CartPole-v1", "--vecnormalize", pkl)
    src = sb3_zip(tmp_path / "h.zip", policy_pth=torch_archive(
        {"data.pkl": key_bomb, "byteorder": b"little"}))
    refused("pickle-hash-bomb-pth", tmp_path, src,
            "dict keys or set items are tuples of more than 1,000,000 elements",
            "--env", "CartPole-v1")


def test_a_pickle_of_too_many_opcodes(tmp_path):
    pkl = tmp_path / "vn.pkl"
    pkl.write_bytes(b"\x80\x04" + b"N0" * 2_000_001 + b"N.")
    refused("pickle-too-many-ops", tmp_path, SB3 / "dqn_cartpole.zip",
            "a pickle of more than 2,000,000 opcodes", "--env", "CartPole-v1",
            "--vecnormalize", pkl)


def test_tensors_viewing_one_storage_are_within_the_budget(tmp_path):
    """Ten tensors each a copy of one 32 MB storage (a 32 KB deflated member): 352 MB of
    copies, refused when the storage and the copies pass 128 MiB."""
    import zlib
    numel = 8 << 20
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = comp.compress(bytes(4 * numel)) + comp.flush()
    storage = Raw(raw, 4 * numel, zlib.crc32(bytes(4 * numel)), zipfile.ZIP_DEFLATED)
    pth = torch_archive({"data.pkl": tensors_viewing_one_storage(10, numel),
                         "byteorder": b"little", "data/0": storage})
    refused("sb3-pth-shared-storage", tmp_path, sb3_zip(tmp_path / "s.zip", policy_pth=pth),
            "a tensor of size (8388608,) takes the tensors past the limit of 134,217,728",
            "--env", "CartPole-v1")


def test_in_process_the_inert_reader_keeps_sharing_and_cycles():
    """What load_symbolic returns: a shared array rebuilt once and shared, a cycle kept."""
    import pickle
    from quarl_edge.importers.safe_pickle import load_symbolic
    a = np.arange(3.0)
    loop: list = [a]
    loop.append(loop)
    got = load_symbolic(pickle.dumps(((a, a), loop)), "x")
    (first, second), back = got
    assert first is second and isinstance(first, np.ndarray) and list(first) == [0, 1, 2]
    assert back[1] is back and back[0] is first


def _zoo_run(tmp_path: Path, config: str | None = None, args: str | None = None) -> Path:
    run = tmp_path / "CartPole-v1_1"
    shutil.copytree(ZOO / "ppo" / "CartPole-v1_1", run)
    env_dir = run / "CartPole-v1"
    if config is not None:
        (env_dir / "config.yml").write_text(config)
    if args is not None:
        (env_dir / "args.yml").write_text(args)
    return run


@pytest.mark.parametrize("where", ["config", "args"])
def test_yaml_alias_bomb_in_a_zoo_run(tmp_path, where):
    run = _zoo_run(tmp_path, **{where: billion_laughs("env_wrapper" if where == "config"
                                                      else "env")})
    refused(f"yaml-alias-bomb-{where}", tmp_path, run,
            "aliases expand to more than 100,000 nodes")


def test_deep_large_and_recursive_yaml(tmp_path):
    run = _zoo_run(tmp_path, config="[" * 50_000 + "]" * 50_000 + "\n")
    refused("yaml-deep-config", tmp_path, run, "YAML nested deeper than 100 levels")
    shutil.rmtree(run)
    run = _zoo_run(tmp_path, config="env_wrapper: &a [*a]\n")
    refused("yaml-recursive-config", tmp_path, run, "inside the node it names (a cycle)")
    shutil.rmtree(run)
    run = _zoo_run(tmp_path, config="# " + "x" * (1 << 20) + "\n")
    refused("yaml-too-large", tmp_path, run, "a YAML file larger than the limit of 1,048,576")


def test_an_h5_dataset_that_inflates_past_the_limit(tmp_path):
    """A 4 GiB dataset, none of it written (HDF5 keeps its fill value): refused by its
    declared shape before Keras would read it."""
    import h5py
    src = tmp_path / "big.h5"
    with h5py.File(src, "w") as f:
        f.attrs["model_config"] = json.dumps({"class_name": "Sequential", "config": {}})
        f.create_dataset("model_weights/dense/kernel", shape=(1 << 30,), dtype="f4",
                         chunks=(1 << 20,), compression="gzip")
    assert src.stat().st_size < 100_000
    refused("keras-h5-dataset-bomb", tmp_path, src, "refused: datasets of 4,294,967,296 bytes",
            "--env", "CartPole-v1")


# ------------------------------------------------------------------------- 3. ONNX
def _onnx(path: Path, nodes, inits=(), n_out: int = 2, opsets=(("", 17),), outputs=None):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n_out])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    onnx.save(model, path)
    return path


def _gemm(w=None):
    from onnx import helper
    w = np.full((4, 2), 0.5, np.float32) if w is None else w
    return helper.make_node("Gemm", ["h", "w"], ["y"]), ("w", w)


def test_onnx_shape_folding_is_bounded(tmp_path):
    from onnx import helper
    big = np.array([1 << 20, 1 << 20], np.int64)
    cases = {
        "onnx-constantofshape": ([helper.make_node("ConstantOfShape", ["s"], ["c"]),
                                  helper.make_node("Add", ["x", "c"], ["h"])], [("s", big)],
                                 "#0 ConstantOfShape would make a tensor of 1,099,511,627,776"),
        "onnx-expand": ([helper.make_node("Expand", ["one", "s"], ["c"]),
                         helper.make_node("Add", ["x", "c"], ["h"])],
                        [("s", big), ("one", np.ones(1, np.float32))],
                        "#0 Expand would make a tensor of 1,099,511,627,776"),
        "onnx-concat-doubling": ([helper.make_node("Concat", [f"c{k}", f"c{k}"], [f"c{k + 1}"],
                                                   axis=0) for k in range(40)]
                                 + [helper.make_node("Add", ["x", "c40"], ["h"])],
                                 [("c0", np.ones(1024, np.float32))],
                                 "#10 Concat would make a tensor of 2,097,152 elements"),
        "onnx-tile": ([helper.make_node("Tile", ["x", "r"], ["h"])],
                      [("r", np.array([1 << 30, 1 << 30], np.int64))], "#0 Tile"),
        "onnx-range": ([helper.make_node("Range", ["a", "b", "d"], ["r"]),
                        helper.make_node("Add", ["x", "r"], ["h"])],
                       [("a", np.float32(0)), ("b", np.float32(1e12)), ("d", np.float32(1))],
                       "#0 Range"),
    }
    for case, (nodes, inits, words) in cases.items():
        gemm, w = _gemm()
        src = _onnx(tmp_path / f"{case}.onnx", nodes + [gemm], [*inits, w])
        refused(case, tmp_path, src, words, "--env", "CartPole-v1")


def test_a_20000_node_chain(tmp_path):
    """Walked without recursion: 20,000 Identity nodes import; 20,000 Relus (a Dense layer
    each) are refused past MAX_LAYERS."""
    from onnx import helper
    relu = [helper.make_node("Relu", ["x" if k == 0 else f"r{k}"],
                             ["h" if k == 19_999 else f"r{k + 1}"]) for k in range(20_000)]
    gemm, w = _gemm()
    src = _onnx(tmp_path / "relu.onnx", relu + [gemm], [w])
    refused("onnx-chain-20k-relu", tmp_path, src, "a network of more than 256 Dense layers",
            "--env", "CartPole-v1")
    ident = [helper.make_node("Identity", ["x" if k == 0 else f"r{k}"],
                              ["h" if k == 19_999 else f"r{k + 1}"]) for k in range(20_000)]
    src = _onnx(tmp_path / "ident.onnx", ident + [gemm], [w])
    out = tmp_path / "ident-run"
    o = run_hostile("onnx-chain-20k-identity", ["import", str(src), "--env", "CartPole-v1",
                                                "--out", str(out)], tmp_path)
    assert o.exit == 0, o.stderr[-2000:]
    assert_bounded(o)
    assert json.loads((out / "run.json").read_text())["fidelity"]["ok"]


def test_an_op_of_a_foreign_domain_is_named(tmp_path):
    from onnx import helper
    gemm, w = _gemm()
    src = _onnx(tmp_path / "evil.onnx", [helper.make_node("Relu", ["x"], ["h"],
                                                          domain="com.evil"), gemm], [w],
                opsets=(("", 17), ("com.evil", 1)))
    refused("onnx-foreign-domain", tmp_path, src, "ops outside ONNX's own domain: "
            "#0 com.evil.Relu", "--env", "CartPole-v1")


@pytest.mark.parametrize("how", ["dotdot", "symlink", "absolute"])
def test_onnx_external_data_outside_the_models_folder(tmp_path, how):
    """Refused before onnx reads it: the outside file is unreadable (a read would fail with
    another error than the refusal)."""
    import onnx
    from onnx import TensorProto, helper
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.full((4, 2), 0.5, np.float32).tobytes())
    location = {"dotdot": "../secret.bin", "absolute": str(secret),
                "symlink": "link.bin"}[how]
    if how == "symlink":
        os.symlink(secret, model_dir / "link.bin")
    secret.chmod(0)
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 2])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("length", "32")):
        w.external_data.add(key=k, value=v)
    src = model_dir / "ext.onnx"
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
                          [w])
    src.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                    .SerializeToString())
    try:
        refused(f"onnx-external-{how}", tmp_path, src, "is not a file inside the model's folder",
                "--env", "CartPole-v1")
    finally:
        secret.chmod(0o600)
    assert onnx   # imported for the model's types above


# ------------------------------------------------------ 4. deep JSON, wrong types, NaN
@pytest.mark.parametrize("case,data,words", [
    ("sb3-data-deep", deep_json(100_000), "JSON nested too deeply to read"),
    ("sb3-data-deep-500", b'{"a": ' + deep_json(500) + b"}", "nested deeper than 100 levels"),
    ("sb3-data-list", b"[1, 2]", "SB3's data entry is a list of 2 items, not a JSON object"),
    ("sb3-policy-class-str", _data(policy_class="evil"), "policy_class = 'evil', not an object"),
    ("sb3-discrete-n-null", _data(action_space={**DATA["action_space"], "n": None}),
     "action space's n is None, not an integer >= 1"),
])
def test_sb3_data_of_the_wrong_shape_or_type(tmp_path, case, data, words):
    refused(case, tmp_path, sb3_zip(tmp_path / "d.zip", data=data), words,
            "--env", "CartPole-v1")


def test_sb3_clip_mean_abc(tmp_path):
    d = json.loads(members(SB3 / "sac_pendulum.zip")["data"])
    d["policy_kwargs"]["clip_mean"] = "abc"
    src = sb3_zip(tmp_path / "sac.zip", "sac_pendulum.zip", data=json.dumps(d).encode())
    refused("sb3-clip-mean-abc", tmp_path, src, "clip_mean is 'abc', not a finite number",
            "--env", "Pendulum-v1")


def _mean(raw: bytes) -> np.ndarray:
    from quarl_edge.importers.safe_pickle import load_symbolic
    return load_symbolic(raw, "fixture").attrs()["obs_rms"].attrs()["mean"]


def _patched_vecnormalize(old_new) -> bytes:
    raw = (SB3 / "ppo_vecnorm_pendulum.vecnormalize.pkl").read_bytes()
    old, new = old_new(raw)
    assert raw.count(old) == 1 and len(old) == len(new)
    return raw.replace(old, new)


@pytest.mark.parametrize("case,patch,words", [
    ("vecnorm-clip-obs-abc",
     lambda raw: (b"clip_obs\x94G" + struct.pack(">d", 10.0),
                  b"clip_obs\x94\x8c\x03abcN0N0"), "clip_obs is 'abc', not a finite number"),
    ("vecnorm-nan-mean",
     lambda raw: (_mean(raw).tobytes(), np.array([np.nan, *_mean(raw)[1:]]).tobytes()),
     "tensor obs_rms.mean holds 1 NaN"),
])
def test_vecnormalize_of_the_wrong_type_or_nan(tmp_path, case, patch, words):
    pkl = tmp_path / "vn.pkl"
    pkl.write_bytes(_patched_vecnormalize(patch))
    refused(case, tmp_path, SB3 / "ppo_vecnorm_pendulum.zip", words, "--env", "Pendulum-v1",
            "--vecnormalize", pkl)


def _patched_pth(change) -> bytes:
    inner = members_of(PTH)
    change(inner)
    return write_zip(None, inner)


def test_policy_pth_shape_mismatch_and_nan(tmp_path):
    def reshape(inner):     # q_net.q_net.0.weight (64, 4) -> (32, 8), the same storage
        pkl = [k for k in inner if k.endswith("data.pkl")][0]
        old, new = b"K@K\x04\x86q\tK\x04K\x01\x86", b"K K\x08\x86q\tK\x08K\x01\x86"
        assert inner[pkl].count(old) == 1
        inner[pkl] = inner[pkl].replace(old, new)

    def nan(inner):         # every float storage starts with a NaN
        for k in inner:
            if "/data/" in k:
                inner[k] = struct.pack("<f", float("nan")) + inner[k][4:]
    src = sb3_zip(tmp_path / "shape.zip", policy_pth=_patched_pth(reshape))
    refused("sb3-pth-shape-mismatch", tmp_path, src, "dense layer 0 has a kernel of shape "
            "(8, 32) and a bias of shape (64,): the tensors do not make one network",
            "--env", "CartPole-v1")
    src = sb3_zip(tmp_path / "nan.zip", policy_pth=_patched_pth(nan))
    refused("sb3-nan-weight", tmp_path, src, "holds 1 NaN or infinite values",
            "--env", "CartPole-v1")


def test_onnx_inf_weight(tmp_path):
    w = np.full((4, 2), 0.5, np.float32)
    w[1, 1] = np.inf
    gemm, init = _gemm(w)
    from onnx import helper
    src = _onnx(tmp_path / "inf.onnx", [helper.make_node("Identity", ["x"], ["h"]), gemm],
                [init])
    refused("onnx-inf-weight", tmp_path, src, "tensor w holds 1 NaN or infinite values",
            "--env", "CartPole-v1")


def test_keras_deep_config_and_nan_weight(tmp_path):
    src = tmp_path / "deep.keras"
    write_zip(src, {"metadata.json": b"{}", "config.json": b'{"a": ' + deep_json(500) + b"}"})
    refused("keras-config-deep", tmp_path, src, "config.json: refused: nested deeper than 100",
            "--env", "CartPole-v1")
    import tensorflow as tf
    m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2, name="head")])
    k, b = m.layers[-1].get_weights()
    k[0, 0] = np.nan
    m.layers[-1].set_weights([k, b])
    src = tmp_path / "nan.keras"
    m.save(src)
    refused("keras-nan-weight", tmp_path, src, "holds 1 NaN or infinite values",
            "--env", "CartPole-v1")


def test_savedmodel_nan_variable(tmp_path):
    """A SavedModel shaped like a TF-Agents Q policy (its ops all allowed) whose kernel holds a
    NaN: refused naming the variable (its actions would be argmax 0 on both sides)."""
    import tensorflow as tf

    class Policy(tf.Module):
        def __init__(self):
            super().__init__()
            kernel = np.ones((4, 2), np.float32)
            kernel[2, 1] = np.nan
            self.kernel = tf.Variable(kernel, name="QNetwork/dense/kernel")
            self.bias = tf.Variable(tf.zeros((2,)), name="QNetwork/dense/bias")
            self.model_variables = [self.kernel, self.bias]

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32,
                                                    name="0/observation")])
        def action(self, observation):
            return {"action": tf.argmax(tf.matmul(observation, self.kernel) + self.bias,
                                        axis=-1)}

    policy = Policy()
    tf.saved_model.save(policy, str(tmp_path / "policy"), signatures={"action": policy.action})
    refused("savedmodel-nan-variable", tmp_path, tmp_path / "policy",
            "tensor QNetwork/dense/kernel:0 holds 1 NaN or infinite values",
            "--env", "CartPole-v1")
