"""`quarl-edge export` (issue 37), used as a user uses the folder: with CMake and gcc on the host,
with clang, arm-none-eabi-gcc, avr-gcc and g++; the library's actions against the host's
mapping of TF Lite Micro's outputs (measure/reference.py + core/envs.outputs_to_actions) for the
same observations, for a discrete policy (CartPole DQN at int8, int16x8 and fp32), a continuous
one (the SB3 SAC Pendulum actor of tests/fixtures/onnx-export, imported and quantized here; its
head as recorded, identity, and rewritten to scale) and a recurrent one (SB3 RecurrentPPO on
CartPole, int8), all linked into one program; int8-acc's accumulator readout too."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers_export import (CARTPOLE, RPPO, cli, export, host_actions, imported_run,
                            observations, pendulum_run)
from helpers_hostile import assert_refused, assert_unchanged, run_hostile, snapshot

STRICT = ["-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror"]
MPS2 = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O2"]
AVR = ["-mmcu=atmega328p", "-Os"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """CartPole's int16x8 and int8-acc (accumulator readout) models (a copy of the example run),
    the Pendulum run (imported, int8), a copy whose head is scale, the recurrent run."""
    d = tmp_path_factory.mktemp("runs")
    imported_run(RPPO, "CartPole-v1", d / "rnn", "int8")
    shutil.copytree(CARTPOLE, d / "cartpole", ignore=shutil.ignore_patterns("build", "results"))
    from quarl_edge import api     # in this process, as imported_run: no TensorFlow import again
    api.quantize(d / "cartpole", ["int16x8", "int8-acc", "dyn-int8"])
    pendulum_run(d)
    shutil.copytree(d / "pendulum", d / "pendulum_scale")
    meta = json.loads((d / "pendulum_scale" / "run.json").read_text())
    meta["action_head"] = "scale"
    (d / "pendulum_scale" / "run.json").write_text(json.dumps(meta))
    return {"cp8": (CARTPOLE, "int8"), "cp32": (CARTPOLE, "fp32"),
            "cp16": (d / "cartpole", "int16x8"), "cpacc": (d / "cartpole", "int8-acc"),
            "pend": (d / "pendulum", "int8"), "pends": (d / "pendulum_scale", "int8"),
            "rnn": (d / "rnn", "int8")}


@pytest.fixture(scope="module")
def libs(runs, tmp_path_factory):
    """The four policies exported for the host board: name -> (folder, facts)."""
    d = tmp_path_factory.mktemp("libs")
    return {n: (d / n, export(run, n, d / n, scheme=s)) for n, (run, s) in runs.items()}


DRIVER = """#include <stdio.h>
#include <stdlib.h>
#include <string.h>
@INCLUDES@
/* stdin: lines "NAME x0 x1 ..." (hex floats) or "reset_NAME"; stdout: "rc a0 a1 ..." */
#define RUN(N) if (strcmp(which, #N) == 0) { \\
        float obs[N##_OBS_SIZE], act[N##_ACTION_SIZE]; int i, rc; \\
        for (i = 0; i < N##_OBS_SIZE; ++i) { if (scanf("%a", &obs[i]) != 1) return 2; } \\
        rc = N##_act(obs, act); printf("%d", rc); \\
        for (i = 0; i < N##_ACTION_SIZE; ++i) { printf(" %a", (double)act[i]); } \\
        printf("\\n"); continue; } \\
    if (strcmp(which, "reset_" #N) == 0) { N##_reset(); continue; }
int main(void)
{
    char which[64];
@SELFTESTS@
    while (scanf("%63s", which) == 1) {
@RUNS@
        return 3;
    }
    return 0;
}
"""


def build_program(tmp: Path, folders: dict[str, Path]) -> Path:
    """A user's CMake project linking the exported folders with add_subdirectory."""
    src = tmp / "app"
    src.mkdir()
    names = sorted(folders)
    subdirs = "".join(f"add_subdirectory({folders[n]} {n})\n" for n in names)
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(app C)\n" + subdirs
        + f"add_executable(app main.c)\ntarget_link_libraries(app PRIVATE {' '.join(names)})\n")
    text = (DRIVER.replace("@INCLUDES@", "".join(f'#include "{n}.h"\n' for n in names))
            .replace("@SELFTESTS@", "".join(f'    printf("selftest {n} %d\\n", {n}_selftest());\n'
                                             for n in names))
            .replace("@RUNS@", "".join(f"        RUN({n})\n" for n in names)))
    (src / "main.c").write_text(text)
    for cmd in (["cmake", "-S", src, "-B", tmp / "build", "-DCMAKE_C_COMPILER=gcc",
                 "-DCMAKE_C_FLAGS=-Wall -Wextra -Werror"],
                ["cmake", "--build", tmp / "build"]):
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return tmp / "build" / "app"


@pytest.fixture(scope="module")
def program(libs, tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("app"), {n: f for n, (f, _) in libs.items()})


def run_program(exe: Path, lines: list[str]) -> list[str]:
    p = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_every_selftest_passes_in_one_program(program, libs):
    out = run_program(program, [])
    assert out == [f"selftest {n} 0" for n in sorted(libs)]


@pytest.mark.parametrize("name", ["cp8", "cp32", "cp16", "cpacc", "pend", "pends", "rnn"])
def test_the_library_acts_as_the_host_maps_tflm(program, runs, libs, name):
    run, scheme = runs[name]
    facts = libs[name][1]
    obs = observations(facts["env"])
    lines = [f"{name} " + " ".join(float(v).hex() for v in o) for o in obs]
    out = run_program(program, lines)[len(libs):]
    assert len(out) == len(obs)
    assert all(line.split()[0] == "0" for line in out), out[:3]
    ours = np.array([[float.fromhex(v) for v in line.split()[1:]] for line in out], np.float32)
    want = host_actions(run, scheme, obs)
    assert ours.shape == want.shape == (len(obs), facts["action_size"])
    assert np.array_equal(ours.view(np.uint32), want.view(np.uint32)), \
        np.argwhere(ours != want)[:5]
    # the actions are not all one value: the comparison covers the mapping, not a constant
    assert len(np.unique(want)) > 1


def test_the_recurrent_state_carries_over_and_reset_zeroes_it(program, runs, libs):
    obs = observations("CartPole-v1", 40)[:40]
    lines = ["rnn " + " ".join(float(v).hex() for v in o) for o in obs]
    out = run_program(program, lines + ["reset_rnn"] + lines)[len(libs):]
    first, again = out[:40], out[40:]
    assert first == again                       # reset: the same actions from a zero state
    want = host_actions(*runs["rnn"], obs)
    ours = np.array([[float.fromhex(v) for v in ln.split()[1:]] for ln in first], np.float32)
    assert np.array_equal(ours, want)
    # without the state (a reset before every step) the actions differ somewhere
    fresh = run_program(program, [x for ln in lines for x in ("reset_rnn", ln)])[len(libs):]
    assert fresh != first and libs["rnn"][1]["recurrent"]


def test_a_nan_observation_is_an_error_not_an_action(program, libs):
    nan = float("nan").hex()          # "nan", which scanf("%a") reads
    out = run_program(program, ["cp8 " + " ".join([nan] + ["0x0p+0"] * 3)])
    assert out[len(libs)].split()[0] == "-1"


def test_every_global_symbol_starts_with_the_name(libs, program):
    build = program.parent
    for n in libs:
        p = subprocess.run(["nm", "-g", "--defined-only", str(build / n / f"lib{n}.a")],
                           capture_output=True, text=True, check=True)
        syms = [ln.split()[-1] for ln in p.stdout.splitlines() if len(ln.split()) == 3]
        assert syms and all(s.startswith(f"{n}_") for s in syms), \
            [s for s in syms if not s.startswith(f"{n}_")]
        assert {f"{n}_act", f"{n}_reset", f"{n}_selftest"} <= set(syms)


def test_only_the_kernels_the_model_calls_are_copied(libs):
    src = sorted(p.name for p in (libs["cp8"][0] / "src").glob("*.c"))
    assert src == ["cp8.c", "cp8_dequantize.c", "cp8_fully_connected.c", "cp8_model.c",
                   "cp8_quantize.c", "cp8_requant.c"]
    text = "".join(p.read_text() for p in (libs["cp8"][0] / "src").iterdir())
    for word in ("malloc", "printf", "qe_", "QE_", "protocol"):
        assert word not in text, word


def _compile_all(cc: str, flags: list[str], src: Path, tmp: Path) -> None:
    for c in sorted(src.glob("*.c")):
        p = subprocess.run([cc, *flags, "-I", str(src), "-c", str(c), "-o",
                            str(tmp / f"{c.stem}.o")], capture_output=True, text=True)
        assert p.returncode == 0 and not p.stderr, f"{cc} {c.name}:\n{p.stderr[-3000:]}"


@pytest.fixture(scope="module")
def board_libs(runs, tmp_path_factory):
    d = tmp_path_factory.mktemp("boards")
    return {b: d / b for b in ("mps2-an386", "atmega328p")
            if export(runs["cp8"][0], "cp8", d / b, board=b) is not None}


@pytest.mark.parametrize("cc,flags,board", [
    ("gcc", STRICT + ["-O2"], None),
    ("clang-19", STRICT + ["-O2"], None),
    ("arm-none-eabi-gcc", STRICT + MPS2, "mps2-an386"),
    ("avr-gcc", STRICT + AVR, "atmega328p"),
    # the GNU mode keeps the weights in flash (__flash), as Arduino builds: the board's flags
    ("avr-gcc", ["-std=gnu99", "-Wall", "-Wextra", "-Werror", "-Waddr-space-convert"] + AVR,
     "atmega328p"),
])
def test_the_folder_compiles_without_a_warning(libs, board_libs, tmp_path, cc, flags, board):
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed (scripts/setup.sh installs it)")
    folders = [board_libs[board]] if board else [f for f, _ in libs.values()]
    for folder in folders:
        _compile_all(cc, flags, folder / "src", tmp_path)


def test_the_header_compiles_as_cpp(libs, tmp_path):
    for n, (folder, _) in libs.items():
        cpp = tmp_path / f"{n}.cpp"
        cpp.write_text(f'#include "{n}.h"\nint f(const float *o, float *a) '
                       f'{{ return {n}_act(o, a) + {n}_selftest(); }}\n')
        p = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-pedantic", "-Werror",
                            "-I", str(folder / "src"), "-c", str(cpp), "-o",
                            str(tmp_path / f"{n}.o")], capture_output=True, text=True)
        assert p.returncode == 0 and not p.stderr, p.stderr
        nm = subprocess.run(["nm", str(tmp_path / f"{n}.o")], capture_output=True, text=True)
        assert f"U {n}_act" in nm.stdout          # unmangled: the extern "C" guard works


def test_the_folder_is_a_library_for_each_build_system(libs):
    folder, facts = libs["pend"]
    for rel in ("library.properties", "library.json", "CMakeLists.txt", "zephyr/module.yml",
                "zephyr/CMakeLists.txt", "README.md", "examples/pend_basic/pend_basic.ino"):
        assert (folder / rel).is_file(), rel
    assert "name=pend\n" in (folder / "library.properties").read_text()
    assert json.loads((folder / "library.json").read_text())["name"] == "pend"
    assert "idf_component_register" in (folder / "CMakeLists.txt").read_text()
    readme = (folder / "README.md").read_text()
    assert "pend_act" in readme and "quarl-edge export" in readme
    assert facts["action_head"] == "identity" and facts["low"] == [-2.0] and facts["high"] == [2.0]


def test_a_bare_tflite_with_its_env_exports_what_its_run_does(libs, tmp_path):
    cli("export", CARTPOLE / "models" / "int8.tflite", "--env", "CartPole-v1", "--name", "cp8",
        "--out", tmp_path / "bare")
    run_src = libs["cp8"][0] / "src"
    assert sorted(p.name for p in (tmp_path / "bare" / "src").iterdir()) == \
        sorted(p.name for p in run_src.iterdir())
    for p in run_src.iterdir():
        assert (tmp_path / "bare" / "src" / p.name).read_text() == p.read_text(), p.name


def test_a_run_that_does_not_say_how_outputs_become_box_actions_is_refused(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["pend"][0], run)
    meta = json.loads((run / "run.json").read_text())
    del meta["action_head"], meta["action_space"]
    (run / "run.json").write_text(json.dumps(meta))
    before = snapshot(tmp_path)
    o = run_hostile("export-dyn-int8", ["export", str(runs["cp16"][0]), "--scheme", "dyn-int8",
                                        "--name", "p", "--out", str(tmp_path / "lib")], tmp_path)
    assert_refused(o, "dynamic-range")
    o = run_hostile("export-no-action-head", ["export", str(run), "--name", "p", "--out",
                                              str(tmp_path / "lib")], tmp_path)
    assert_refused(o, "neither action_head nor action_space")
    assert_unchanged(before, snapshot(tmp_path))


def test_a_second_export_replaces_an_earlier_one(libs, runs):
    folder, _ = libs["cp8"]
    export(runs["cp8"][0], "cp8", folder)          # the same folder: no --force needed
    assert (folder / "src" / "cp8.h").is_file()
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".cp8.")]


@pytest.mark.parametrize("case,args,words", [
    ("export-name-keyword", ["--name", "int"], "keyword"),
    ("export-name-digit", ["--name", "9lives"], "not a C identifier"),
    ("export-name-dash", ["--name", "a-b"], "not a C identifier"),
    ("export-name-semicolon", ["--name", "x;y"], "not a C identifier"),
    ("export-fp16", ["--scheme", "fp16", "--name", "p"], "float16"),
    ("export-out-not-export", ["--name", "p", "--out", "@user"], "not an earlier export"),
    ("export-out-file", ["--name", "p", "--out", "@file"], "is a file"),
    ("export-bare-no-env", ["@tflite", "--name", "p"], "--env"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, case, args, words):
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "mine.txt").write_text("keep")
    (tmp_path / "file").write_text("keep")
    args = [str(tmp_path / a[1:]) if a in ("@user", "@file") else a for a in args]
    target = [str(CARTPOLE / "models" / "int8.tflite")] if "@tflite" in args else [str(CARTPOLE)]
    args = [a for a in args if a != "@tflite"]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "new" / "lib")]     # its parent not made either
    before = snapshot(tmp_path)
    o = run_hostile(case, ["export", *target, *args], tmp_path)
    assert_refused(o, words)
    assert_unchanged(before, snapshot(tmp_path))


def test_an_int8_io_model_quantizes_the_observation_as_the_host_does(tmp_path):
    """A model with int8 input and output (a bare .tflite; quarl-edge's own schemes keep float
    I/O): NAME_act quantizes the observation as measure/reference.py's _quantized (round half
    to even of x / scale, plus the zero point, saturated) and dequantizes the output."""
    import tensorflow as tf

    from quarl_edge.core.run import load_keras
    calibration = np.load(CARTPOLE / "calibration.npy").astype(np.float32)
    conv = tf.lite.TFLiteConverter.from_keras_model(load_keras(CARTPOLE))
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([x[None]] for x in calibration[:200])
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = conv.inference_output_type = tf.int8
    model = tmp_path / "io8.tflite"
    model.write_bytes(conv.convert())
    cli("export", model, "--env", "CartPole-v1", "--name", "io8", "--out", tmp_path / "io8")
    facts = json.loads((tmp_path / "io8" / "quarl-edge-export.json").read_text())
    assert facts["input"]["dtype"] == facts["output"]["dtype"] == "int8"
    exe = build_program(tmp_path, {"io8": tmp_path / "io8"})
    obs = observations("CartPole-v1")
    s = facts["input"]["scale"]
    # values on the rounding ties (k + 0.5) * scale, either parity, and beyond saturation
    ties = np.array([[(k + 0.5) * s, -(k + 0.5) * s, 300 * s, -300 * s] for k in range(6)],
                    np.float32)
    obs = np.concatenate([obs, ties])
    out = run_program(exe, ["io8 " + " ".join(float(v).hex() for v in o) for o in obs])[1:]
    ours = np.array([float.fromhex(ln.split()[1]) for ln in out], np.float32)
    want = host_actions(model, None, obs, env_id="CartPole-v1").reshape(-1)
    assert np.array_equal(ours, want), np.argwhere(ours != want)[:5]
