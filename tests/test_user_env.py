"""quarl-edge installed into a user's own environment leaves it intact, and works in it.

A fresh Python 3.11 venv gets what a Stable-Baselines3 user already has (stable-baselines3 2.9.2,
torch 2.13.0, the numpy 2 that SB3 pulls, gymnasium), then our wheel with the `tf` extra
(`pip install quarl_edge-*.whl[tf]`: TensorFlow 2.21 and tf-keras from PyPI). The install must
not change torch's or numpy's version nor downgrade typing-extensions, `pip check` must be clean,
and in that venv a tiny SB3 PPO trained there goes through the CLI: `import`, `quantize fp32
int8`, `hil --board host` (and `--board mps2-an386` when QEMU is installed), the board's return
equal to TF Lite Micro's.

Slow (a venv with torch and TensorFlow; the first run downloads TensorFlow into pip's cache):
marked `userenv`, excluded by default. Run it with

    pytest -m userenv tests/test_user_env.py -s

(-s shows the versions installed in the venv). torch is named by its exact version: pip takes the
CPU build of that version that lies on this machine's disk; a bare `torch` would download a
multi-GB CUDA build.

The wheel is built from a fresh copy of the checkout (its tracked files and untracked, not-ignored
ones, as tests/test_wheel.py does), so the checkout gets no build/ and no egg-info."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers_models import copy_checkout

pytestmark = pytest.mark.userenv

ROOT = Path(__file__).resolve().parents[1]
USER_PACKAGES = ["stable-baselines3==2.9.2", "torch==2.13.0", "gymnasium"]
SHOWN = ["torch", "numpy", "stable-baselines3", "tensorflow", "tf-keras", "ai-edge-litert",
         "tflite-micro", "typing-extensions"]

# A tiny PPO (two rollouts of 256 steps, a few seconds): far from solved, but its greedy actions
# vary (returns ~40-60), unlike a DQN this short, which collapses to one action.
TRAIN = """
import sys
import gymnasium as gym
from stable_baselines3 import PPO
model = PPO("MlpPolicy", gym.make("CartPole-v1"), seed=0, n_steps=256, batch_size=64, n_epochs=4,
            policy_kwargs={"net_arch": [32, 32]}, device="cpu", verbose=0)
model.learn(total_timesteps=512)
model.save(sys.argv[1])
"""

def python311() -> str:
    """A Python 3.11 interpreter (the one a 3.11 user would have)."""
    for cand in (shutil.which("python3.11"), "/root/.pyenv/versions/3.11.7/bin/python3.11",
                 sys.executable if sys.version_info[:2] == (3, 11) else None):
        if not cand or not Path(cand).exists():
            continue
        p = subprocess.run([cand, "-c", "import sys; print(sys.version_info[:2] == (3, 11))"],
                           capture_output=True, text=True)
        if p.returncode == 0 and p.stdout.strip() == "True":
            return cand
    pytest.skip("no python3.11")


def clean_env(**extra) -> dict:
    """A user's shell: nothing pointing Python or quarl-edge at the checkout or another env.
    pip's own cache is kept (it holds TensorFlow after the first run)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "QUARL_EDGE_HOME",
                        "QUARL_EDGE_BOARDS", "PYTHONSTARTUP", "TF_USE_LEGACY_KERAS")}
    env.update(PYTHONNOUSERSITE="1", PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(extra)
    return env


def run(cmd, cwd: Path, env: dict, timeout: float = 1800, check: bool = True
        ) -> subprocess.CompletedProcess:
    t = time.monotonic()
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    print(f"[userenv] {time.monotonic() - t:6.1f}s  {shlex.join(map(str, cmd))}", flush=True)
    if check:
        assert p.returncode == 0, (f"{shlex.join(map(str, cmd))} exited with {p.returncode}\n"
                                   f"{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return p


def freeze(py: Path, cwd: Path, env: dict) -> dict[str, str]:
    """{normalized name: version} of what is installed in the venv."""
    out = run([py, "-m", "pip", "list", "--format", "json"], cwd, env).stdout
    return {re.sub(r"[-_.]+", "-", d["name"]).lower(): d["version"] for d in json.loads(out)}


def version_tuple(v: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


@pytest.fixture(scope="module")
def userenv(tmp_path_factory):
    """A venv with SB3 + torch + numpy 2, then quarl-edge[tf] from our wheel: a dict with the
    venv, a work dir, the env, and `pip list` before and after quarl-edge."""
    tmp = tmp_path_factory.mktemp("userenv").resolve()
    assert ROOT not in tmp.parents, f"the temp dir {tmp} must lie outside the checkout"
    src, venv, work, dist = tmp / "src", tmp / "venv", tmp / "work", tmp / "dist"
    for d in (src, work, dist):
        d.mkdir()
    env = clean_env(XDG_CONFIG_HOME=str(work / "config"))
    run([python311(), "-m", "venv", venv], work, env, timeout=300)
    py = venv / "bin" / "python"
    # 1. the user's environment
    run([py, "-m", "pip", "install", "-q", *USER_PACKAGES], work, env)
    before = freeze(py, work, env)
    (tmp / "freeze-before.txt").write_text(run([py, "-m", "pip", "freeze"], work, env).stdout)
    # 2. our wheel, built from a copy of the checkout, with the tf extra
    copy_checkout(src)
    run([py, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, src], work, env)
    (wheel,) = dist.glob("quarl_edge-*.whl")
    run([py, "-m", "pip", "install", f"{wheel}[tf]"], work, env)
    after = freeze(py, work, env)
    (tmp / "freeze-after.txt").write_text(run([py, "-m", "pip", "freeze"], work, env).stdout)
    print("\n[userenv] versions in the venv (before quarl-edge -> after):")
    for name in SHOWN:
        print(f"[userenv]   {name:20s} {before.get(name, '-'):>16s} -> {after.get(name, '-')}")
    changed = sorted(n for n in before if n in after and before[n] != after[n])
    print(f"[userenv] changed by quarl-edge[tf]: "
          f"{', '.join(f'{n} {before[n]}->{after[n]}' for n in changed) or 'nothing'}")
    print(f"[userenv] freezes: {tmp / 'freeze-before.txt'}, {tmp / 'freeze-after.txt'}")
    return {"venv": venv, "py": py, "bin": venv / "bin", "work": work, "env": env,
            "before": before, "after": after}


def test_the_user_environment_is_numpy2_with_sb3_and_torch(userenv):
    before = userenv["before"]
    assert before["stable-baselines3"] == "2.9.2"
    assert version_tuple(before["torch"]) == (2, 13, 0), before["torch"]
    assert version_tuple(before["numpy"]) >= (2,), before["numpy"]


def test_installing_quarl_edge_changes_nothing_the_user_had(userenv):
    before, after = userenv["before"], userenv["after"]
    assert "quarl-edge" in after and "tensorflow" in after and "tf-keras" in after
    for name in ("torch", "numpy", "stable-baselines3", "gymnasium"):
        assert after[name] == before[name], (name, before[name], after[name])
    if "typing-extensions" in before:
        assert version_tuple(after["typing-extensions"]) >= \
            version_tuple(before["typing-extensions"]), \
            (before["typing-extensions"], after["typing-extensions"])


def test_pip_check_is_clean_and_everything_imports(userenv):
    py, work, env = userenv["py"], userenv["work"], userenv["env"]
    p = run([py, "-m", "pip", "check"], work, env, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    run([py, "-c", "import torch, stable_baselines3, quarl_edge"], work, env)
    run([py, "-c", "import numpy; assert int(numpy.__version__.split('.')[0]) >= 2, "
                   "numpy.__version__"], work, env)


def cli(userenv, *args, check: bool = True) -> subprocess.CompletedProcess:
    return run([userenv["bin"] / "quarl-edge", *args], userenv["work"], userenv["env"],
               check=check)


@pytest.fixture(scope="module")
def sb3_run(userenv):
    """A tiny SB3 PPO trained in the venv, imported and quantized (fp32, int8) by its CLI."""
    work = userenv["work"]
    model = work / "ppo-CartPole-v1.zip"
    run([userenv["py"], "-c", TRAIN, model], work, userenv["env"], timeout=600)
    assert model.is_file()
    out = work / "runs" / "ppo"
    p = cli(userenv, "import", model, "--env", "CartPole-v1", "--out", out, "--json")
    info = json.loads(p.stdout)
    print(f"[userenv] import fidelity: {json.dumps(info['fidelity'])}")
    assert info["fidelity"]["ok"] and info["fidelity"]["argmax_agreement"] == 1.0, info["fidelity"]
    assert info["versions"]["tensorflow"] == userenv["after"]["tensorflow"], info["versions"]
    cli(userenv, "quantize", out, "--scheme", "fp32", "int8")
    assert (out / "models" / "fp32.tflite").is_file() and (out / "models" / "int8.tflite").is_file()
    return out


def hil(userenv, run_dir: Path, board: str) -> dict:
    p = cli(userenv, "hil", run_dir, "--scheme", "int8", "--board", board, "--episodes", 3,
            "--out", userenv["work"] / f"hil-{board}", "--json")
    res = json.loads(p.stdout)
    print(f"[userenv] hil {board}: returns {res['returns']} mean {res['mean_return']} "
          f"TFLM {res['micro_mean_return']} tflite-runtime {res['tflite_mean_return']} "
          f"fp32 {res['fp32_mean_return']} agreement {res['agreement']}")
    return res


def check_board_equals_tflm(res: dict) -> None:
    assert res["micro_mean_return"] is not None, "TF Lite Micro did not run the model"
    assert res["matches_reference"] and res["actions_equal_reference"], res
    assert res["mean_return"] == res["micro_mean_return"], res


def test_sb3_policy_on_the_host_board_equals_tflm(userenv, sb3_run):
    check_board_equals_tflm(hil(userenv, sb3_run, "host"))


def test_sb3_policy_on_an_emulated_cortex_m_equals_tflm(userenv, sb3_run):
    for tool in ("qemu-system-arm", "arm-none-eabi-gcc"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed")
    check_board_equals_tflm(hil(userenv, sb3_run, "mps2-an386"))
