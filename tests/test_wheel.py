"""A real wheel, installed the way a user installs quarl-edge: `pip install <checkout>` (not
editable, pip's default build isolation) into a fresh venv outside the checkout, then, from a
directory outside the checkout, `quarl-edge validate` on the host, an emulated Cortex-M (QEMU)
and an emulated AVR (simavr, with the bridge built from the package's simavr_bridge.c), and
`quarl-edge demo --pretrained` on the host. The installed package must find firmware/, boards/
and the example run as its own package data inside the venv, and nothing of the checkout.

What is installed is a fresh copy of the checkout: its tracked files and its untracked,
not-ignored ones (what `git clone` plus the working tree's edits give). pip builds in the source
tree, so building in the checkout itself would leave build/ there and ship files that an earlier
build put in build/lib but that the checkout no longer has.

The pinned dependencies (TensorFlow, TF Lite Micro, ...) are not downloaded again: the new venv
sees the running interpreter's through a .pth file pointing at a folder of symlinks to its
site-packages entries, without quarl-edge's own (its editable install's dist-info would make pip
take quarl-edge for installed and try to uninstall it from the other environment) and without
the packaging tools the new venv has its own of. A .pth line only adds a path: the editable
install's hooks in that site-packages are not run.

Nothing here reads a path outside the checkout, the temp dir and the running interpreter's
environment (whose site-packages is found with sysconfig)."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers_models import copy_checkout

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "cartpole_dqn" / "models" / "int8.tflite"
# Not made visible to the new venv: quarl-edge itself, and what the venv brings its own of.
HIDDEN = re.compile(r"^(quarl_edge|pip|setuptools|pkg_resources|_distutils_hack)([-.].*)?$"
                    r"|^__editable__|^__pycache__$|\.pth$", re.I)


def checkout_version() -> str:
    return re.search(r'^__version__ = "([^"]+)"$', (ROOT / "quarl_edge" / "__init__.py").read_text(),
                     re.M).group(1)


def clean_env(**extra) -> dict:
    """The environment of a user's shell: nothing that points Python or quarl-edge at the
    checkout or at another environment."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "QUARL_EDGE_HOME",
                        "QUARL_EDGE_BOARDS", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    env.update(extra)
    return env


def run(cmd, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, (f"{shlex.join(map(str, cmd))} exited with {p.returncode}\n"
                               f"{p.stdout[-3000:]}\n{p.stderr[-5000:]}")
    return p


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv, its site-packages, a work directory, the environment to run commands in)."""
    tmp = tmp_path_factory.mktemp("wheel").resolve()
    assert ROOT not in tmp.parents, f"the temp dir {tmp} must lie outside the checkout"
    src, venv, work, deps = tmp / "src", tmp / "venv", tmp / "work", tmp / "deps"
    for d in (src, work, deps):
        d.mkdir()
    copy_checkout(src)
    env = clean_env(PIP_CACHE_DIR=str(tmp / "pip-cache"), PIP_NO_INPUT="1",
                    PIP_DISABLE_PIP_VERSION_CHECK="1")
    run([sys.executable, "-m", "venv", venv], work, env, timeout=300)
    py = venv / "bin" / "python"
    site = Path(run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    work, env).stdout.strip())
    ours = {Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    for d in ours:
        for entry in sorted(d.iterdir()):
            if not HIDDEN.search(entry.name) and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    (site / "quarl-edge-test-deps.pth").write_text(f"{deps}\n")
    run([py, "-m", "pip", "install", "-q", src], work, env)
    return venv, site, work, env


def test_the_venv_imports_its_own_installed_copy(installed):
    venv, site, work, env = installed
    py = venv / "bin" / "python"
    p = run([py, "-c", "import quarl_edge; print(quarl_edge.__version__)"], work, env)
    assert p.stdout.strip() == checkout_version()
    probe = ("import json, importlib.metadata as m, quarl_edge, quarl_edge.converters.cgen as c\n"
             "from quarl_edge.core import resources as r\n"
             "print(json.dumps({'pkg': quarl_edge.__file__, 'cgen': c.__file__,\n"
             "  'version': m.version('quarl-edge'), 'root': str(r.project_root()),\n"
             "  'examples': str(r.examples_dir()), 'bridge': str(r.simavr_bridge_source())}))")
    info = json.loads(run([py, "-c", probe], work, env).stdout)
    for key in ("pkg", "cgen", "root", "examples", "bridge"):
        assert Path(info[key]).resolve().is_relative_to(site), (key, info[key])
    assert info["version"] == checkout_version()      # the metadata's, from __version__
    assert Path(info["root"]) == site / "quarl_edge" / "data"
    assert (Path(info["examples"]) / "cartpole_dqn" / "models" / "int8.tflite").is_file()
    assert Path(info["bridge"]).is_file()
    assert not (site / "quarl_edge" / "paths.py").exists()
    shipped = {p.name for p in (site / "quarl_edge" / "data" / "boards").glob("*.toml")}
    assert shipped == {p.name for p in (ROOT / "boards").glob("*.toml")}


def user_env(env: dict, work: Path) -> dict:
    """A user's config folder of the test's own (no board files of this machine's user)."""
    return dict(env, XDG_CONFIG_HOME=str(work / "config"))


def validate_from_the_wheel(installed, board_id: str) -> tuple[dict, Path]:
    venv, site, work, env = installed
    model_dir = work / board_id
    model_dir.mkdir()
    model = model_dir / "int8.tflite"
    shutil.copy(MODEL, model)
    env = user_env(env, work)
    p = run([venv / "bin" / "quarl-edge", "validate", model, "--board", board_id, "--json"],
            model_dir, env)
    res = json.loads(p.stdout[p.stdout.index("{"):])
    out = model_dir / "build" / board_id / "int8"
    cmd = shlex.split((out / "build.cmd").read_text())
    fw_core = [Path(a[2:]) for a in cmd if a.startswith("-I") and a.endswith("core")]
    assert fw_core, cmd
    for d in fw_core:
        assert d.resolve().is_relative_to(site / "quarl_edge" / "data" / "firmware"), d
    assert not any(str(ROOT) in a for a in cmd), "the build used files of the checkout"
    return res, out


def test_validate_on_the_host_from_the_wheel(installed):
    res, _ = validate_from_the_wheel(installed, "host")
    assert res["bit_exact"] is True and res["n"] > 0 and res["board"] == "host"


def test_validate_on_an_emulated_cortex_m_from_the_wheel(installed):
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/setup.sh installs it)")
    res, out = validate_from_the_wheel(installed, "mps2-an386")
    assert res["bit_exact"] is True and res["n"] > 0 and res["board"] == "mps2-an386"
    assert (out / "firmware.bin").is_file() and (out / "firmware.hex").is_file()


def test_validate_on_an_emulated_avr_from_the_wheel(installed):
    """simavr runs the firmware inside a bridge compiled from the package's simavr_bridge.c."""
    if shutil.which("avr-gcc") is None or not Path("/usr/include/simavr/sim_avr.h").is_file():
        pytest.skip("avr-gcc or simavr's headers are not installed (scripts/setup.sh installs them)")
    res, out = validate_from_the_wheel(installed, "atmega328p")
    assert res["bit_exact"] is True and res["n"] > 0
    assert (out / "simavr_bridge").is_file()


def test_the_pretrained_demo_runs_from_the_wheel(installed):
    venv, site, work, env = installed
    runs = work / "demo-runs"
    p = run([venv / "bin" / "quarl-edge", "demo", "--pretrained", "--board", "host",
             "--episodes", "1", "--workdir", runs], work, user_env(env, work))
    shipped = site / "quarl_edge" / "data" / "examples" / "cartpole_dqn"
    assert f"using the shipped example run {shipped}" in p.stdout
    assert "board 'host'" in p.stdout and (runs / "cartpole_dqn-pretrained" / "run.json").is_file()
