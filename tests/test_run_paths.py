"""The run directory has one owner: quarl_edge/core/run.py's Run names every path in it (run.json,
the network file, models/<scheme>.tflite, calibration.npy, build/<board>/<label>, results/)
and writes into it through quarl_edge/core/files.py; nothing else in quarl_edge/ spells one."""
from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from quarl_edge.core.errors import QuarlError
from quarl_edge.core.run import Run, keras_path, load_run, tflite_path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cartpole_dqn"


@pytest.fixture
def run(tmp_path) -> Run:
    """A copy of the example run (no builds, no results)."""
    return Run(EXAMPLE).copy_to(tmp_path / "run")


# ------------------------------------------------------------------------------ behaviour
def test_run_names_the_paths_of_the_contract(run):
    d = run.dir
    assert run.meta_path == d / "run.json" and run.is_run()
    assert run.load() == load_run(d)
    assert run.network_path() == keras_path(d) == d / run.load().get("model_file", "qnet.keras")
    assert run.model_path("int8") == d / "models" / "int8.tflite"
    assert run.tflite("int8") == tflite_path(d, "int8") == run.model_path("int8")
    assert run.has_model("int8") and not run.has_model("int16x8")
    assert run.calibration_path == d / "calibration.npy"
    assert run.build_dir("host", "int8", make=False) == d / "build" / "host" / "int8"
    assert run.gen_dir("host", "int8") == d / "build" / "host" / "int8" / "gen"
    assert run.results_dir(make=False) == d / "results"
    assert run.policy_dir == d / "policy" and run.train_curve == d / "train_curve.csv"
    assert os.fspath(run) == str(d)


def test_a_policy_belongs_to_its_run_or_its_models_folder(tmp_path):
    """hil's and bench's RUN_OR_MODEL: a run directory is its own home; a bare MODEL.tflite's
    builds and results go beside it."""
    assert Run.of_policy(tmp_path / "run").dir == tmp_path / "run"
    assert Run.of_policy(tmp_path / "m" / "policy.tflite").dir == tmp_path / "m"
    assert Run.of_policy(str(tmp_path / "policy.tflite")).results_dir(make=False) == \
        tmp_path / "results"


def test_the_copy_leaves_builds_and_results_behind(tmp_path):
    src = Run(EXAMPLE).copy_to(tmp_path / "src")
    src.build_dir("host", "int8").joinpath("firmware.elf").write_bytes(b"x")
    src.results_dir().joinpath("hil_host_int8.json").write_text("{}")
    copy = src.copy_to(tmp_path / "copy")
    assert copy.has_model("int8") and copy.is_run()
    assert not (copy.dir / "build").exists() and not (copy.dir / "results").exists()


def test_folders_are_made_only_when_asked(run):
    assert not (run.dir / "build").exists() and not (run.dir / "results").exists()
    run.build_dir("host", "int8", make=False)
    run.results_dir(make=False)
    assert not (run.dir / "build").exists() and not (run.dir / "results").exists()
    assert run.build_dir("host", "int8").is_dir() and run.results_dir().is_dir()


def test_a_missing_model_is_one_line_naming_the_command(run):
    with pytest.raises(QuarlError, match=r"no int16x8 model in .*quarl-edge quantize"):
        run.tflite("int16x8")


def test_calibration_round_trips(tmp_path):
    run = Run(tmp_path)
    assert run.load_calibration() is None
    x = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    assert run.save_calibration(x) == tmp_path / "calibration.npy"
    back = run.load_calibration()
    assert back.dtype == np.float32 and np.array_equal(back, x)
    assert not list(tmp_path.glob("*.tmp"))          # the temporary file was renamed


def test_the_example_calibration_is_read_through_run():
    calib = Run(EXAMPLE).load_calibration()
    assert calib.ndim == 2 and calib.shape[1] == 4 and len(calib) > 1


def test_a_model_write_replaces_a_planted_symlink(run, tmp_path):
    """A symlink at models/<scheme>.tflite is replaced, never written through."""
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"keep me")
    run.model_path("planted").parent.mkdir(exist_ok=True)
    run.model_path("planted").symlink_to(victim)
    out = run.write_model("planted", b"TFL3 new model")
    assert out == run.model_path("planted") and not out.is_symlink()
    assert out.read_bytes() == b"TFL3 new model" and victim.read_bytes() == b"keep me"


def test_a_calibration_write_replaces_a_planted_symlink(run, tmp_path):
    victim = tmp_path / "victim.npy"
    victim.write_bytes(b"keep me")
    run.calibration_path.unlink()
    run.calibration_path.symlink_to(victim)
    run.save_calibration(np.zeros((2, 4), np.float32))
    assert not run.calibration_path.is_symlink() and victim.read_bytes() == b"keep me"
    assert run.load_calibration().shape == (2, 4)


def test_a_meta_write_replaces_a_planted_symlink(run, tmp_path):
    info = run.load()
    victim = tmp_path / "victim.json"
    victim.write_text("keep me")
    run.meta_path.unlink()
    run.meta_path.symlink_to(victim)
    run.write_meta({**info, "seed": 7})
    assert not run.meta_path.is_symlink() and victim.read_text() == "keep me"
    assert run.load()["seed"] == 7


def test_a_model_file_leading_outside_the_run_is_refused(run, tmp_path):
    """run.json's model_file must resolve inside the run (after symlinks)."""
    outside = tmp_path / "elsewhere.keras"
    shutil.copy(run.network_path(), outside)
    info = run.load()
    run.write_meta({**info, "model_file": "../elsewhere.keras"})
    with pytest.raises(QuarlError, match="leads outside"):
        run.network_path()
    (run.dir / "link.keras").symlink_to(outside)
    run.write_meta({**info, "model_file": "link.keras"})
    with pytest.raises(QuarlError, match="leads outside"):
        run.network_path()


def test_folders_leading_out_of_the_run_are_refused(run, tmp_path):
    (tmp_path / "out").mkdir()
    shutil.rmtree(run.models_dir)
    run.models_dir.symlink_to(tmp_path / "out")
    with pytest.raises(QuarlError, match="leads outside"):
        run.check_models_dir()
    with pytest.raises(QuarlError, match="leads outside"):
        run.write_model("int8", b"x")
    (run.dir / "build").symlink_to(tmp_path / "out")
    with pytest.raises(QuarlError, match="leads outside"):
        run.build_dir("host", "int8")
    assert list((tmp_path / "out").iterdir()) == []


def test_a_calibration_leading_out_of_the_run_is_refused(run, tmp_path):
    np.save(tmp_path / "other.npy", np.zeros(3))
    run.calibration_path.unlink()
    run.calibration_path.symlink_to(tmp_path / "other.npy")
    with pytest.raises(QuarlError, match="leads outside"):
        run.load_calibration()


def test_a_file_name_must_stay_in_the_run(run):
    for bad in ("../x", "a/b", "", ".."):
        with pytest.raises(QuarlError):
            run.network_file(bad)


# ------------------------------------------------------------------- no path spelt elsewhere
RUN_NAMES = {"run.json", "calibration.npy", "models", "build", "results"}

# (file, the name it spells): why it is not a run directory's path.
ALLOWED = {
    ("quarl_edge/study/grid.py", "results"): "a study's default output folder, results/<study> "
                                             "under the working directory, not a run's",
    ("quarl_edge/study/status.py", "results"): "the same default as grid.py (where a study's "
                                               "results.jsonl is read back)",
}


def run_path_literals(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(file, line, name) of each run-directory name spelt as a path in quarl_edge/ and
    quarl_edge/converters/ outside core/run.py: joined with `/`, given to subdir(), Path() or
    shutil.ignore_patterns(), or "run.json" / "calibration.npy" / "models/..." as a string of
    its own (docstrings and the text of f-string messages are prose, not paths)."""
    out = []
    files = sorted([*(root / "quarl_edge").rglob("*.py"), *(root / "converters").rglob("*.py")])
    for path in files:
        if path == root / "quarl_edge" / "core" / "run.py":
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr)
                and isinstance(n.body[0].value, ast.Constant)}
        prose = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}

        def named(node) -> str | None:
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value in RUN_NAMES or node.value.startswith("models/")):
                return node.value
            return None
        for n in ast.walk(tree):
            hits = []
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
                hits = [named(n.left), named(n.right)]
            elif isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) \
                    in ("subdir", "Path", "ignore_patterns"):
                hits = [named(a) for a in n.args]
            elif isinstance(n, ast.Constant) and id(n) not in docs and id(n) not in prose \
                    and isinstance(n.value, str) and (n.value in ("run.json", "calibration.npy")
                                                      or n.value.startswith("models/")):
                hits = [n.value]
            out += [(str(path.relative_to(root)), n.lineno, h) for h in hits if h]
    return sorted(set(out))


def test_no_module_but_run_spells_a_run_directory_path():
    found = [f"{f}:{line}: {name!r}" for f, line, name in run_path_literals()
             if (f, name) not in ALLOWED]
    assert found == [], "run-directory paths spelt outside quarl_edge/core/run.py (use Run):\n" + \
        "\n".join(found)


def test_the_allow_list_is_still_needed():
    """Each allowed spelling still occurs (a stale entry would hide a new one)."""
    seen = {(f, name) for f, _, name in run_path_literals()}
    assert set(ALLOWED) <= seen


def test_the_path_scan_finds_what_it_forbids(tmp_path):
    (tmp_path / "quarl_edge").mkdir()
    (tmp_path / "converters").mkdir()
    (tmp_path / "quarl_edge" / "m.py").write_text(
        '"""RUN/models/int8.tflite and run.json in a docstring are prose."""\n'
        'from pathlib import Path\n'
        'def f(run, subdir):\n'
        '    a = run / "models" / "int8.tflite"\n'
        '    b = subdir(run, "build", "host")\n'
        '    c = "calibration.npy"\n'
        '    d = f"{run}/run.json is missing"\n'
        '    return Path(run, "results")\n')
    assert [(line, name) for _, line, name in run_path_literals(tmp_path)] == [
        (4, "models"), (5, "build"), (6, "calibration.npy"), (8, "results")]
