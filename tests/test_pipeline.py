"""quarl_edge/pipeline.py's steps, run for real on the committed example run and the host board:
quantize -> generate_c -> build -> session -> hil, each file where Run says it goes."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from quarl_edge import pipeline
from quarl_edge.core.errors import QuarlError
from quarl_edge.link.session import model_hash
from quarl_edge.core.run import Run
from quarl_edge.targets.boards import get_board

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cartpole_dqn"


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    """The steps once, in order, on a copy of the example run: what each returned, and the
    generated C's time stamp before and after build (build compiles it, it does not redo it)."""
    run = Run(EXAMPLE).copy_to(tmp_path_factory.mktemp("pipeline") / "run")
    board = get_board("host")
    (run.models_dir / "int8.tflite").unlink()
    run.calibration_path.unlink()
    t0 = time.perf_counter()
    model = pipeline.quantize(run.dir, "int8")
    out = run.build_dir(board.id, "int8")
    gen = pipeline.generate_c(model, board, out)
    stamp = (gen / "model.c").stat().st_mtime_ns
    fw = pipeline.build(model, board, out, generated=gen)
    return {"run": run, "board": board, "model": model, "out": out, "gen": gen, "fw": fw,
            "stamp": stamp, "seconds": time.perf_counter() - t0}


def test_quantize_writes_where_run_says(steps):
    run = steps["run"]
    assert steps["model"] == run.model_path("int8") == run.tflite("int8")
    assert run.load_calibration() is not None and len(run.load_calibration()) == 1000
    # the same conversion as the committed example's (seed 0, 1,000 observations), where the
    # converter is the one that made it (requirements/py3.11.txt's TensorFlow 2.15; 2.21 on the
    # 3.13 lock writes other bytes for the same model); everywhere, the same tensors and a
    # conversion that gives the same bytes twice
    import tensorflow as tf
    model = steps["model"].read_bytes()
    if tf.__version__.startswith("2.15."):
        assert model == Run(EXAMPLE).tflite("int8").read_bytes()
    copy = steps["run"].copy_to(steps["run"].dir.parent / "again")
    (copy.models_dir / "int8.tflite").unlink()
    copy.calibration_path.unlink()
    again = pipeline.quantize(copy.dir, "int8")
    assert again.read_bytes() == model


def test_generate_c_then_build_into_the_run(steps):
    run, gen, fw = steps["run"], steps["gen"], steps["fw"]
    assert gen == run.gen_dir("host", "int8")
    assert {"model.c", "model.json"} <= {p.name for p in gen.iterdir()}
    assert fw.elf == run.build_dir("host", "int8", make=False) / "firmware.elf"
    assert fw.elf.is_file() and (fw.out_dir / "memory.json").is_file()
    assert (gen / "model.c").stat().st_mtime_ns == steps["stamp"]    # compiled, not regenerated
    # the generated C is the generator's for this model and board, byte for byte
    from quarl_edge.converters.cgen import generate
    fresh = steps["out"].parent / "fresh"
    generate(steps["model"], fresh, name="int8", kernels=steps["board"].kernels)
    assert (fresh / "model.c").read_bytes() == (gen / "model.c").read_bytes()


def test_a_session_starts_the_built_firmware(steps):
    model, board, fw = steps["model"], steps["board"], steps["fw"]
    elf_stamp = fw.elf.stat().st_mtime_ns
    with pipeline.session(model, board, steps["out"], firmware=fw) as s:
        assert s.firmware is fw and s.info.model_hash == model_hash(model)
        obs = Run(EXAMPLE).load_calibration()[0]
        (y,), cost = s.link.infer([obs.reshape(s.info.inputs[0].shape)])
        assert np.asarray(y).size == 2 and cost > 0
        assert s.memory()["flash_bytes"] == fw.memory.flash_bytes
    assert fw.elf.stat().st_mtime_ns == elf_stamp        # the session built nothing


def test_hil_plays_the_references_returns(steps):
    run, board = steps["run"], steps["board"]
    res = pipeline.hil(run.dir, board, "int8", episodes=3)
    assert res["board"] == "host" and res["scheme"] == "int8" and len(res["returns"]) == 3
    assert res["matches_reference"] and res["actions_equal_reference"]
    assert res["mean_return"] == res["micro_mean_return"] == res["tflite_mean_return"]
    assert Path(res["results"]).parent == run.results_dir(make=False)
    assert (run.results_dir(make=False) / "hil_host_int8.json").is_file()
    assert (run.build_dir("host", "int8", make=False) / "firmware.elf").is_file()
    assert steps["seconds"] < 60


def test_hil_checks_the_env_before_building(tmp_path):
    run = Run(EXAMPLE).copy_to(tmp_path / "run")
    with pytest.raises(QuarlError, match="was made for CartPole"):
        pipeline.hil(run.dir, get_board("host"), "int8", episodes=1, env_id="MountainCar-v0")
    assert not (run.dir / "build").exists()


def test_which_sessions_need_firmware():
    host = get_board("host")
    assert pipeline.needs_build(host)
    assert not pipeline.needs_build(host, port="socket://localhost:1")
    assert pipeline.firmware(Run(EXAMPLE).tflite("int8"), host, Path("unused"),
                             port="socket://localhost:1") is None
