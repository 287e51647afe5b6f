"""Issue 36, files: no write follows a link quarl-edge did not make, untrusted run files stay in
their folder, and a full or read-only disk is one line that loses nothing.

A run directory from elsewhere may hold symlinks at the names quarl-edge writes (RUN/
calibration.npy, RUN/build/.../gen/model.c, RUN/results/bench.jsonl, ...) pointing at a
victim file outside. Every command run on it must leave the victim as it was: it either
replaces the link by a real file (a temporary name, then a rename) or refuses in one line.
The full disk is a real one (a 64 KiB tmpfs), the read-only disk a tmpfs remounted read-only."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers_hostile import assert_bounded, assert_refused, assert_unchanged, run_hostile, snapshot
from helpers_models import copy_example_tree

VICTIM = "the user's file, which no command may change\n"


@pytest.fixture
def box(tmp_path):
    """tmp/run: a copy of the example run; tmp/outside/victim: what the links point at."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "victim").write_text(VICTIM)
    (tmp_path / "outside" / "adir").mkdir()
    copy_example_tree(tmp_path / "run")
    return tmp_path


def plant(path: Path, target: Path) -> None:
    """A symlink at `path` (replacing what was there) to `target`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    path.symlink_to(target)


def check_replaced(box: Path, before: dict, links: list[Path]) -> None:
    """Nothing outside changed, and each planted link is now a real file of ours."""
    assert_unchanged(before, snapshot(box / "outside"))
    assert (box / "outside" / "victim").read_text() == VICTIM
    for p in links:
        assert not p.is_symlink() and p.is_file(), p


def test_quantize_replaces_links_at_its_outputs(box):
    run = box / "run"
    links = [run / "calibration.npy", run / "models" / "int8.tflite"]
    for p in links:
        plant(p, box / "outside" / "victim")
    before = snapshot(box / "outside")
    o = run_hostile("files-quantize-links", ["quantize", "run", "--scheme", "int8"], box)
    assert o.exit == 0, o.stderr[-2000:]
    assert_bounded(o)
    check_replaced(box, before, links)
    assert np.load(run / "calibration.npy").shape[1:] == (4,)
    assert (run / "models" / "int8.tflite").read_bytes()[4:8] == b"TFL3"
    assert not list(run.rglob("*.tmp"))


def test_quantize_refuses_a_models_folder_that_leads_outside(box):
    run = box / "run"
    shutil.rmtree(run / "models")
    plant(run / "models", box / "outside" / "adir")
    before = snapshot(box / "outside")
    o = run_hostile("files-quantize-models-dir-link", ["quantize", "run", "--scheme", "int8"],
                    box)
    assert_refused(o, "leads outside")
    assert_unchanged(before, snapshot(box / "outside"))


BUILD_OUTPUTS = ["gen/model.c", "gen/model.json", "build.log", "build.cmd", "firmware.elf",
                 "memory.json", "firmware.stderr.log"]


def test_validate_builds_over_links_at_every_build_output(box):
    b = box / "run" / "build" / "host" / "int8"
    links = [b / name for name in BUILD_OUTPUTS]
    for p in links:
        plant(p, box / "outside" / "victim")
    before = snapshot(box / "outside")
    o = run_hostile("files-validate-build-links",
                    ["validate", "run", "--board", "host", "--random", "3"], box)
    assert o.exit == 0, o.stderr[-2000:]
    assert "bit-exact" in o.stdout
    assert_bounded(o)
    check_replaced(box, before, links)
    assert "#include" in (b / "gen" / "model.c").read_text()
    assert not [p for p in b.rglob("*") if p.name.endswith(".tmp")]


def test_a_lock_file_leading_outside_is_refused(box):
    b = box / "run" / "build" / "host" / "int8"
    plant(b / ".quarl-edge.lock", box / "outside" / "victim")
    before = snapshot(box / "outside")
    o = run_hostile("files-lock-link", ["build", "run", "--board", "host"], box)
    assert_refused(o, ".quarl-edge.lock")
    assert_unchanged(before, snapshot(box / "outside"))


def test_a_build_folder_leading_outside_is_refused(box):
    plant(box / "run" / "build", box / "outside" / "adir")
    before = snapshot(box / "outside")
    o = run_hostile("files-build-dir-link", ["build", "run", "--board", "host"], box)
    assert_refused(o, "leads outside")
    assert_unchanged(before, snapshot(box / "outside"))
    assert not list((box / "outside" / "adir").iterdir())


def test_hil_replaces_links_at_its_results(box):
    r = box / "run" / "results"
    links = [r / n for n in ("hil_host_int8.json", "hil_host_int8.episodes.jsonl",
                             "hil_host_int8_seeds0-0.json",
                             "hil_host_int8_seeds0-0.episodes.jsonl")]
    for p in links:
        plant(p, box / "outside" / "victim")
    before = snapshot(box / "outside")
    o = run_hostile("files-hil-links",
                    ["hil", "run", "--board", "host", "--episodes", "1"], box)
    assert o.exit == 0, o.stderr[-2000:]
    assert_bounded(o)
    check_replaced(box, before, links)
    assert json.loads((r / "hil_host_int8.json").read_text())["board"] == "host"
    assert (r / "hil_host_int8.episodes.jsonl").read_text() == \
        (r / "hil_host_int8_seeds0-0.episodes.jsonl").read_text()


@pytest.fixture
def bare(box):
    """box/m/int8.tflite: a bare model (bench runs its one scheme)."""
    (box / "m").mkdir()
    shutil.copy(box / "run" / "models" / "int8.tflite", box / "m" / "int8.tflite")
    return box


def test_bench_refuses_a_results_log_leading_outside(bare):
    # a line the merge would have kept and copied into the new bench.jsonl
    (bare / "outside" / "victim").write_text('{"secret": "of the user"}\n')
    plant(bare / "m" / "results" / "bench.jsonl", bare / "outside" / "victim")
    before = snapshot(bare / "outside")
    o = run_hostile("files-bench-jsonl-link",
                    ["bench", "m/int8.tflite", "--boards", "host", "-n", "3"], bare)
    assert_refused(o, "bench.jsonl")
    assert_unchanged(before, snapshot(bare / "outside"))
    assert not [p for p in (bare / "m" / "results").iterdir()
                if not p.is_symlink() and "secret" in p.read_text()]


def test_bench_replaces_a_link_at_its_table(bare):
    plant(bare / "m" / "results" / "bench.md", bare / "outside" / "victim")
    before = snapshot(bare / "outside")
    o = run_hostile("files-bench-md-link",
                    ["bench", "m/int8.tflite", "--boards", "host", "-n", "3"], bare)
    assert o.exit == 0, o.stderr[-2000:]
    check_replaced(bare, before, [bare / "m" / "results" / "bench.md",
                                  bare / "m" / "results" / "bench.jsonl"])
    assert "host" in (bare / "m" / "results" / "bench.md").read_text()


def test_report_replaces_links_at_its_outputs(box):
    from test_report import _grid
    rows = _grid(lambda r: 0.004 * r, qat_delta=+1.0)
    (box / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = box / "rep"
    links = [rep / n for n in ("report.md", "report.html", "claims.json", "remedies.json",
                               "boards.json", "return_vs_scheme.png")]
    for p in links:
        plant(p, box / "outside" / "victim")
    before = snapshot(box / "outside")
    o = run_hostile("files-report-links", ["report", "results.jsonl", "--out", "rep"], box)
    assert o.exit == 0, o.stderr[-2000:]
    assert_bounded(o)
    check_replaced(box, before, links)
    assert json.loads((rep / "claims.json").read_text())[0]["verdict"] == "agree"
    assert (rep / "return_vs_scheme.png").read_bytes()[:4] == b"\x89PNG"


# ------------------------------------------------------------------ run.json names no outside
@pytest.mark.parametrize("how", ["path", "symlink"])
def test_run_json_model_file_must_stay_in_the_run(box, how):
    run = box / "run"
    shutil.copy(run / "qnet.keras", box / "outside" / "qnet.keras")
    meta = json.loads((run / "run.json").read_text())
    if how == "path":
        meta["model_file"] = "../outside/qnet.keras"
    else:
        plant(run / "inside.keras", box / "outside" / "qnet.keras")
        meta["model_file"] = "inside.keras"
    (run / "run.json").write_text(json.dumps(meta))
    o = run_hostile(f"files-model-file-{how}", ["quantize", "run", "--scheme", "fp32"], box)
    assert_refused(o, "leads outside")
    assert "model_file" in o.line


def test_a_model_of_the_run_leading_outside_is_refused(box):
    shutil.copy(box / "run" / "models" / "int8.tflite", box / "outside" / "int8.tflite")
    plant(box / "run" / "models" / "int8.tflite", box / "outside" / "int8.tflite")
    o = run_hostile("files-models-tflite-link", ["build", "run", "--board", "host"], box)
    assert_refused(o, "leads outside")


def test_a_deeply_nested_run_json_is_one_line(box):
    (box / "run" / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    o = run_hostile("files-run-json-deep", ["quantize", "run", "--scheme", "fp32"], box)
    assert_refused(o, "run.json")


# -------------------------------------------------------------------- full and read-only disks
@pytest.fixture
def mount(tmp_path):
    """mount(size) -> a tmpfs of `size` at tmp/disk (we run as root in CI; skipped, saying
    why, where mounting is not allowed); unmounted at the end."""
    mounted = []

    def make(size: str) -> Path:
        disk = tmp_path / "disk"
        disk.mkdir()
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {p.stderr.strip()[:200]}")
        mounted.append(disk)
        return disk
    yield make
    for disk in mounted:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.fixture
def tmpfs(mount):
    """A 64 KiB tmpfs: room for the example run's network and calibration set, not for more."""
    return mount("64k")


def _small_run(disk: Path) -> Path:
    """The example run's run.json, network and calibration set (no models) on `disk`."""
    run = disk / "run"
    run.mkdir()
    example = Path(__file__).resolve().parents[1] / "examples" / "cartpole_dqn"
    for name in ("run.json", "qnet.keras", "calibration.npy"):
        shutil.copy(example / name, run / name)
    return run


def test_a_full_disk_during_quantize_keeps_the_previous_calibration(tmpfs):
    run = _small_run(tmpfs)
    old = (run / "calibration.npy").read_bytes()
    free = shutil.disk_usage(tmpfs).free
    assert free < len(old), f"the tmpfs must be too small for a second calibration set ({free} B)"
    o = run_hostile("files-full-disk-quantize", ["quantize", str(run), "--scheme", "int8"],
                    tmpfs.parent)
    assert_refused(o, "calibration.npy")
    assert "No space left on device" in o.line and " free on its file system" in o.line
    assert (run / "calibration.npy").read_bytes() == old          # not truncated
    assert sorted(p.name for p in run.iterdir()) == ["calibration.npy", "qnet.keras",
                                                      "run.json"]   # the temporary is gone


def test_a_full_disk_during_build_is_one_line(tmpfs):
    run = _small_run(tmpfs)
    (run / "calibration.npy").unlink()
    (run / "models").mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "examples" / "cartpole_dqn" / "models"
                / "int8.tflite", run / "models" / "int8.tflite")
    o = run_hostile("files-full-disk-build", ["build", str(run), "--board", "host"],
                    tmpfs.parent)
    assert_refused(o, "No space left on device")
    assert " free on its file system" in o.line
    assert not [p for p in run.rglob("*") if p.name.endswith((".tmp", ".partial"))]


def test_a_read_only_disk_is_one_line(mount):
    disk = mount("1m")
    run = _small_run(disk)
    (run / "models").mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "examples" / "cartpole_dqn" / "models"
                / "int8.tflite", run / "models" / "int8.tflite")
    old = (run / "calibration.npy").read_bytes()
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    before = snapshot(disk)
    o = run_hostile("files-read-only-quantize", ["quantize", str(run), "--scheme", "int8"],
                    disk.parent)
    assert_refused(o, "Read-only file system")
    assert str(run / "calibration.npy") in o.line and "free on its file system" in o.line
    assert (run / "calibration.npy").read_bytes() == old
    o = run_hostile("files-read-only-build", ["build", str(run), "--board", "host"],
                    disk.parent)
    assert_refused(o, "Read-only file system")
    assert str(run / "build") in o.line
    assert snapshot(disk) == before


def test_write_atomic_keeps_the_old_file_and_no_temporary_on_a_full_disk(tmpfs):
    from quarl_edge.core.files import DiskError, write_atomic
    path = tmpfs / "a.json"
    write_atomic(path, "old\n")
    with pytest.raises(DiskError, match=r"cannot write .*a\.json: No space left on device "
                                        r"\(.* free on its file system\)"):
        write_atomic(path, "x" * (128 << 10))
    assert path.read_text() == "old\n"
    assert os.listdir(tmpfs) == ["a.json"]


def test_a_link_at_the_temporary_name_is_not_followed(tmp_path):
    from quarl_edge.core.files import own, remove_stale, write_atomic
    victim = tmp_path / "victim"
    victim.write_text(VICTIM)
    path = tmp_path / "out" / "claims.json"
    path.parent.mkdir()
    plant(own(path, "tmp"), victim)                  # this process's temporary name
    write_atomic(path, "new\n")
    assert victim.read_text() == VICTIM and path.read_text() == "new\n"
    assert os.listdir(path.parent) == ["claims.json"]
    (path.parent / "x.1.tmp").mkdir()                # a folder with a temporary's name stays
    remove_stale(path.parent)
    assert sorted(os.listdir(path.parent)) == ["claims.json", "x.1.tmp"]


def test_a_file_size_limit_is_one_line_and_keeps_the_old_file(tmp_path):
    """EFBIG: the file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) in a child process."""
    import resource
    import signal
    import sys
    path = tmp_path / "report.md"
    path.write_text("old\n")

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    code = ("import sys; from quarl_edge.core.files import write_atomic, DiskError\n"
            "try:\n    write_atomic(__import__('pathlib').Path(sys.argv[1]), 'x' * 100000)\n"
            "except DiskError as e:\n    print(e); sys.exit(2)\n")
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                       preexec_fn=limit, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "File too large" in p.stdout and "report.md" in p.stdout
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["report.md"]


@pytest.mark.parametrize("case, text, words", [
    ("files-results-deep", b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
    ("files-results-latin1", b'{"kind": "caf\xe9"}\n', "not UTF-8"),
])
def test_a_hostile_results_file_is_one_line(tmp_path, case, text, words):
    (tmp_path / "results.jsonl").write_bytes(text)
    before = snapshot(tmp_path)
    o = run_hostile(case, ["report", "results.jsonl", "--out", "rep"], tmp_path)
    assert_refused(o, words)
    assert_unchanged(before, snapshot(tmp_path), allowed=(tmp_path / "rep",))


@pytest.mark.parametrize("link, args", [
    ("results.jsonl", ["--status"]), (".study.lock", ["--status"]), ("results.jsonl", []),
])
def test_a_study_folder_with_links_leading_outside_is_refused(box, link, args):
    smoke = Path(__file__).resolve().parents[1] / "studies" / "smoke.toml"
    (box / "outside" / "victim").write_text('{"kind": "run"}\n')
    plant(box / "st" / link, box / "outside" / "victim")
    before = snapshot(box / "outside")
    o = run_hostile(f"files-study{'-status' if args else ''}-{link.strip('.')}-link",
                    ["study", str(smoke), "--out", "st", *args], box)
    assert_refused(o, "leads outside")
    assert_unchanged(before, snapshot(box / "outside"))


# ------------------------------------------------------- import, train and a run's own model
def test_import_refuses_an_out_that_is_a_link(box):
    """The imported run is renamed into place at --out: a link there would put it elsewhere."""
    plant(box / "linked", box / "outside" / "adir")
    before = snapshot(box / "outside")
    o = run_hostile("files-import-out-link", ["import", "run/qnet.keras", "--env", "CartPole-v1",
                                              "--out", "linked"], box)
    assert_refused(o, "is a symlink")
    assert_unchanged(before, snapshot(box / "outside"))
    assert not [p for p in box.iterdir() if ".import-" in p.name]


def test_train_replaces_links_at_its_outputs(box):
    """A training into a folder holding links at train_curve.csv, qnet.keras and policy/."""
    out = box / "t"
    links = [out / "train_curve.csv", out / "qnet.keras"]
    for p in links:
        plant(p, box / "outside" / "victim")
    plant(out / "policy", box / "outside" / "adir")
    before = snapshot(box / "outside")
    o = run_hostile("files-train-links", ["train", "--env", "CartPole-v1", "--steps", "300",
                                          "--out", "t"], box, timeout=120)
    assert o.exit == 0, o.stderr[-2000:]
    check_replaced(box, before, links)
    assert (out / "policy").is_dir() and not (out / "policy").is_symlink()


def test_a_runs_own_keras_file_with_a_config_bomb_is_refused(box):
    """RUN/qnet.keras is read without an importer's checks: its config.json still has a limit
    before it inflates (a deflated member of 32 MiB of spaces: 32 kB on disk)."""
    import zipfile
    bomb = box / "run" / "qnet.keras"
    bomb.unlink()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("config.json", "w", force_zip64=True) as f:
            chunk = b" " * (1 << 24)
            for _ in range(2):                       # 32 MiB: past the 16 MiB limit
                f.write(chunk)
    o = run_hostile("files-run-keras-config-bomb", ["quantize", "run", "--scheme", "fp32"], box)
    assert_refused(o, "config.json inflates")
