"""What the importer reads of a zoo run folder beyond the network (issue 23): retired env ids,
a zip taken out of its folder, the legacy policy.pth without torch, the YAML's one tag; and bad
input (malicious pickles in the spaces or policy.pth, YAML tags, wrappers and frame stacks it
does not model, spaces that do not fit) refused in one line with exit 2, writing nothing. The
imported agents' behaviour against SB3's is in test_rl_zoo.py."""
from __future__ import annotations

import base64
import json
import os
import pickle
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers_models import assert_import_refused
from helpers_rl_zoo import ZOO, cli, zoo_zip

from quarl_edge.importers import import_policy
from quarl_edge.importers.common import current_env_id
from quarl_edge.importers.rl_zoo import read_yaml
from quarl_edge.importers.safe_pickle import LEGACY_MAGIC, LEGACY_PROTOCOL, UnsafePickle, \
    load_torch_archive


def test_the_cli_says_when_the_env_id_was_retired(tmp_path):
    p = cli("import", ZOO / "ppo" / "LunarLander-v2_1", "--out", tmp_path / "r")
    assert p.returncode == 0, p.stderr
    assert "for LunarLander-v3" in p.stdout
    assert "LunarLander-v2 is retired" in p.stderr and "played on LunarLander-v3" in p.stderr


def test_retired_env_ids_map_to_their_successor(tmp_path):
    assert current_env_id("LunarLander-v2")[0] == "LunarLander-v3"
    assert current_env_id("LunarLanderContinuous-v2")[0] == "LunarLanderContinuous-v3"
    assert current_env_id("BipedalWalker-v3") == ("BipedalWalker-v3", None)
    assert current_env_id("CartPole-v1") == ("CartPole-v1", None)
    hopper, note = current_env_id("Hopper-v3")
    assert hopper == "Hopper-v4" and "mujoco-py" in note["note"]
    # a retired id in the file name is found too (the zoo's zip copied out of its folder)
    lone = tmp_path / "LunarLander-v2.zip"
    shutil.copy(zoo_zip("ppo/LunarLander-v2_1"), lone)
    info = import_policy(lone, tmp_path / "r")
    assert info["env"] == "LunarLander-v3" and "rl_zoo" not in info["source"]
    assert info["source"]["env_renamed"]["from"] == "LunarLander-v2"


def test_a_zip_inside_a_zoo_run_brings_its_folder(tmp_path):
    """ENV.zip imported by itself still gets ENV/vecnormalize.pkl (leaving it out would import
    a policy that acts on unnormalised observations)."""
    info = import_policy(zoo_zip("ppo/MountainCar-v0_1"), tmp_path / "r")
    assert info["source"]["vecnormalize"]["file"] == "vecnormalize.pkl"
    assert info["source"]["rl_zoo"]["env"] == "MountainCar-v0"


def test_the_legacy_pth_is_read_without_torch():
    """sac/Pendulum-v1_1's policy.pth is torch's pre-1.6 pickle stream (equality with real
    torch on every zoo file: fixtures/rl-zoo/check_torch_reader.py)."""
    with zipfile.ZipFile(zoo_zip("sac/Pendulum-v1_1")) as z:
        raw = z.read("policy.pth")
    assert raw[:1] == b"\x80"
    sd = load_torch_archive(raw, "policy.pth")
    assert sd["actor.latent_pi.0.weight"].shape == (64, 3)
    assert sd["actor.mu.0.weight"].shape == (1, 64) and sd["actor.log_std"].shape == (64, 1)
    assert all(v.dtype == np.float32 for v in sd.values())


def test_zoo_yaml_reads_the_ordered_dict_tag_and_nothing_else(tmp_path):
    args = read_yaml(ZOO / "ppo" / "MountainCar-v0_1" / "MountainCar-v0" / "args.yml")
    assert args["env"] == "MountainCar-v0" and args["algo"] == "ppo"
    marker = tmp_path / "pwned"
    evil = tmp_path / "config.yml"
    evil.write_text(f"!!python/object/apply:os.system [touch {marker}]\n")
    with pytest.raises(Exception, match="refused: the YAML tag !!python/object/apply:os.system"):
        read_yaml(evil)
    assert not marker.exists()


# ----------------------------------------------------------------------------- bad input
class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _copy_run(tmp_path: Path, folder: str) -> Path:
    dst = tmp_path / folder.split("/")[1]
    shutil.copytree(ZOO / folder, dst)
    return dst


def _rewrite_zip(src: Path, dst: Path, data=None, policy: bytes | None = None) -> Path:
    """src with its `data` JSON changed by data(dict) and/or its policy.pth replaced."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.namelist():
            raw = zin.read(item)
            if item == "data" and data is not None:
                d = json.loads(raw)
                data(d)
                raw = json.dumps(d).encode()
            if item == "policy.pth" and policy is not None:
                raw = policy
            zout.writestr(item, raw)
    return dst


def _legacy_header() -> bytes:
    return b"".join(pickle.dumps(x, protocol=2) for x in (
        LEGACY_MAGIC, LEGACY_PROTOCOL,
        {"protocol_version": LEGACY_PROTOCOL, "little_endian": True,
         "type_sizes": {"short": 2, "int": 4, "long": 8}}))


def _only_serialized(d: dict) -> None:
    """Strip the plain JSON fields of the spaces, as a zip with serialized spaces only."""
    for key in ("observation_space", "action_space"):
        d[key] = {k: v for k, v in d[key].items() if k in (":type:", ":serialized:")}


def test_spaces_only_serialized_come_from_the_env(tmp_path):
    src = _rewrite_zip(zoo_zip("ppo/CartPole-v1_1"), tmp_path / "CartPole-v1.zip",
                       data=_only_serialized)
    info = import_policy(src, tmp_path / "r", env="CartPole-v1")
    assert info["source"]["spaces_from"].startswith("the env CartPole-v1")
    assert info["fidelity"]["argmax_agreement"] == 1.0


@pytest.mark.parametrize("case", ["serialized-space-evil", "legacy-pth-evil",
                                  "legacy-pth-evil-object", "env-wrapper", "frame-stack",
                                  "yaml-python-tag", "spaces-do-not-fit", "normalize-no-pkl"])
def test_zoo_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, case):
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_Evil(marker), protocol=2)
    env = []
    if case == "serialized-space-evil":
        def poison(d):
            d["observation_space"][":serialized:"] = base64.b64encode(evil).decode()
        src = _rewrite_zip(zoo_zip("ppo/CartPole-v1_1"), tmp_path / "CartPole-v1.zip",
                           data=poison)
        words = "serialized observation_space: refused: the pickle asks for posix.system"
    elif case in ("legacy-pth-evil", "legacy-pth-evil-object"):
        pth = evil if case == "legacy-pth-evil" else _legacy_header() + evil
        src = _rewrite_zip(zoo_zip("sac/Pendulum-v1_1"), tmp_path / "Pendulum-v1.zip",
                           policy=pth)
        words = "refused: the pickle asks for posix.system"
    elif case in ("env-wrapper", "frame-stack", "yaml-python-tag", "normalize-no-pkl"):
        folder = "ppo/MountainCar-v0_1" if case == "normalize-no-pkl" else "ppo/CartPole-v1_1"
        src = _copy_run(tmp_path, folder)
        config = src / src.name.rsplit("_", 1)[0] / "config.yml"
        if case == "env-wrapper":
            config.write_text(config.read_text() + "  - - env_wrapper\n"
                              "    - sb3_contrib.common.wrappers.TimeFeatureWrapper\n")
            words = "env_wrapper sb3_contrib.common.wrappers.TimeFeatureWrapper is not modelled"
        elif case == "frame-stack":
            config.write_text(config.read_text() + "  - - frame_stack\n    - 4\n")
            words = "frame_stack 4 (VecFrameStack) is not reproduced on the board"
        elif case == "yaml-python-tag":
            config.write_text(f"!!python/object/apply:os.system [touch {marker}]\n")
            words = "refused: the YAML tag !!python/object/apply:os.system"
        else:
            (config.parent / "vecnormalize.pkl").unlink()
            words = "normalize is True but"
    else:   # spaces only serialized, and an env whose spaces do not fit the network
        src = _rewrite_zip(zoo_zip("ppo/CartPole-v1_1"), tmp_path / "policy.zip",
                           data=_only_serialized)
        env = ["--env", "Acrobot-v1"]
        words = ("the network takes 4 inputs and gives 2 outputs; Acrobot-v1 has observations "
                 "of shape (6,) and 3 discrete actions")
    assert_import_refused(cli("import", src, *env, "--out", tmp_path / "r"), words,
                          tmp_path / "r", marker)


def test_a_malicious_legacy_pth_is_refused_by_the_reader(tmp_path):
    marker = tmp_path / "pwned"
    for raw in (pickle.dumps(_Evil(marker), protocol=2),
                _legacy_header() + pickle.dumps(_Evil(marker), protocol=2)):
        with pytest.raises(UnsafePickle, match="posix.system"):
            load_torch_archive(raw, "policy.pth")
    assert not marker.exists()


def test_a_pickle_naming_a_huge_memo_index_is_refused_before_the_unpickler_runs():
    """CPython's unpickler would grow its memo to 2**31 entries (16 GB) for this one opcode."""
    import struct
    huge = b"\x80\x02N" + b"r" + struct.pack("<I", 2 ** 31) + b"."   # NONE, LONG_BINPUT, STOP
    with pytest.raises(UnsafePickle, match="memo index of 2,147,483,648"):
        load_torch_archive(huge, "policy.pth")
    with pytest.raises(UnsafePickle, match="memo index"):
        load_torch_archive(_legacy_header() + huge, "policy.pth")
    from quarl_edge.importers.safe_pickle import load_symbolic
    with pytest.raises(UnsafePickle, match="memo index"):
        load_symbolic(huge, "vecnormalize.pkl")


def test_an_expanded_tensor_is_not_copied_out_to_terabytes():
    """Stride 0 lets a 1-element storage stand for a 2**40-element tensor; it is refused."""
    from quarl_edge.importers.safe_pickle import _rebuild_tensor_v2
    with pytest.raises(UnsafePickle, match="more elements than its storage"):
        _rebuild_tensor_v2(np.zeros(1, np.float32), 0, (1 << 20, 1 << 20), (0, 0))
