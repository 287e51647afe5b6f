"""End to end on the `host` board, through the CLI as a user runs it: build, start behind a pty,
serial protocol via pyserial, golden comparison with TF Lite Micro, HIL with Gymnasium."""
import json
from pathlib import Path

import numpy as np
import pytest
from helpers_models import cli, cli_json, convert, random_mlp
from quarl_edge.core import tflite_host

ROOT = Path(__file__).resolve().parents[1]








def test_hil_int8_on_the_host_board_equals_tflite_runtime(run_copy):
    res = cli_json("hil", run_copy, "--scheme", "int8", "--board", "host", "--episodes", "4")
    assert res["board"] == "host" and res["scheme"] == "int8" and res["episodes"] == 4
    assert len(res["returns"]) == 4
    # same seeds, bit-exact outputs -> the same actions -> the same returns
    assert res["mean_return"] == res["tflite_mean_return"] == res["micro_mean_return"]
    assert res["matches_reference"]
    assert 0.0 <= res["agreement"] <= 1.0
    assert res["latency"]["unit"] == "ns" and res["latency"]["median"] > 0
    assert res["latency"]["p99"] >= res["latency"]["median"]
    assert res["steps_per_s"] > 0
    mem = res["memory"]
    assert mem["flash_bytes"] > mem["weights_bytes"] > 0 and mem["ram_bytes"] > mem["arena_bytes"] > 0
    assert 0 < mem["stack_bytes"] < 64 * 1024
    episodes = (run_copy / "results" / "hil_host_int8.episodes.jsonl").read_text().splitlines()
    assert len(episodes) == 4 * 4   # board, tflite-runtime, TFLM, fp32: written as they finish


def test_hil_fp32_firmware_plays_like_the_float_network(run_copy):
    res = cli_json("hil", run_copy, "--scheme", "fp32", "--episodes", "2")
    assert res["mean_return"] == res["tflite_mean_return"]
    assert res["agreement"] > 0.99


@pytest.mark.parametrize("scheme", ["int8", "fp32"])
def test_validate_example_models_bit_exact(run_copy, scheme, tmp_path):
    out = tmp_path / "y.npy"
    res = cli_json("validate", run_copy / "models" / f"{scheme}.tflite", "--board", "host",
                   "--random", "300", "--save-outputs", out)
    assert res["bit_exact"] is True and res["max_abs_diff"] == 0.0 and res["n"] == 300
    assert set(res) >= {"board", "n", "bit_exact", "max_abs_diff", "latency", "memory"}
    assert set(res["memory"]) >= {"flash_bytes", "ram_bytes", "stack_bytes"}
    y = np.load(out)
    assert y.shape == (300, 2) and y.dtype == np.float32


@pytest.mark.parametrize("mode, input_dim, widths, acts", [
    ("int8", 11, [24, 5], ["relu", "none"]),          # float I/O, other shapes
    ("int8_io", 3, [40, 17, 9], ["relu", "relu6", "none"]),   # int8 input and output
    ("float", 6, [32, 4], ["relu", "none"]),          # a float32 model
])
def test_validate_other_fully_connected_models(tmp_path, mode, input_dim, widths, acts):
    model = random_mlp(7, input_dim, widths, acts, weight_scale=1.5)
    calib = np.random.default_rng(1).normal(size=(200, input_dim)).astype(np.float32)
    path = tmp_path / f"{mode}.tflite"
    path.write_bytes(convert(model, mode, calib))
    x_dtype = np.int8 if mode == "int8_io" else np.float32
    rng = np.random.default_rng(2)
    if x_dtype == np.int8:
        x = rng.integers(-128, 128, size=(150, input_dim)).astype(np.int8)
    else:   # includes values far outside the calibration range (saturation)
        x = (rng.normal(size=(150, input_dim)) * rng.choice([1, 10, 1000], size=(150, 1))).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = cli_json("validate", path, "--board", "host", "--inputs", tmp_path / "x.npy",
                   "--save-outputs", tmp_path / "y.npy")
    assert res["bit_exact"] is True, res
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (150, widths[-1]) and y.dtype == x_dtype


def test_validate_refuses_inputs_of_the_wrong_shape(run_copy, tmp_path):
    np.save(tmp_path / "bad.npy", np.zeros((5, 3), np.float32))
    proc = cli("validate", run_copy / "models" / "int8.tflite", "--inputs", tmp_path / "bad.npy",
               expect=2)
    assert "float32 of shape (1, 4): (n, 4) for n rows" in proc.stderr   # the accepted forms
    assert "Traceback" not in proc.stderr


def test_unsupported_models_are_refused_by_name(run_copy):
    proc = cli("build", run_copy / "models" / "fp16.tflite", "--board", "host", expect=2)
    assert "DEQUANTIZE" in proc.stderr and "float16" in proc.stderr.lower()
    assert "Traceback" not in proc.stderr


def test_malformed_model_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"this is not a flatbuffer" * 10)
    proc = cli("validate", bad, "--random", "3", expect=2)
    assert proc.stderr.startswith("quarl-edge: error:") and "Traceback" not in proc.stderr


def test_build_prints_the_memory_report(run_copy):
    out = cli("build", run_copy, "--board", "host", "--scheme", "int8").stdout
    assert "flash" in out and "RAM" in out and "model arena" in out
    assert (run_copy / "build" / "host" / "int8" / "firmware.elf").is_file()


def test_unknown_board_is_named(run_copy):
    proc = cli("hil", run_copy, "--board", "toaster", expect=2)
    assert "unknown board 'toaster'" in proc.stderr and "host" in proc.stderr


def test_demo_pretrained_prints_the_table(tmp_path):
    out = cli("demo", "--pretrained", "--board", "host", "--episodes", "2", "--workdir", tmp_path).stdout
    assert "board 'host'" in out and f"{tflite_host.runtime_name()} (host)" in out and "TensorFlow (host)" in out
    assert out.count(" ns (p99") == 2          # fp32 and int8 firmware latencies, in ns


@pytest.mark.long
def test_train_then_quantize_through_the_cli(tmp_path):
    run = tmp_path / "run"
    proc = cli("train", "--env", "CartPole-v1", "--algo", "dqn", "--steps", "300",
               "--seed", "3", "--out", run, "--set", "hidden=[32, 16]", "--set", "gamma=0.9",
               "--json")
    info = json.loads(proc.stdout)
    # stderr has our progress bar and our note only: no gym banner, TF/absl/deprecation lines
    noise = [ln for ln in proc.stderr.replace("\r", "\n").splitlines() if ln.strip()
             and not ln.startswith(("dqn CartPole-v1:", "wrote the run to "))]
    assert noise == [], noise
    assert info["env"] == "CartPole-v1" and info["steps"] == 300
    assert info["hyperparameters"]["hidden"] == [32, 16] and info["hyperparameters"]["gamma"] == 0.9
    assert info["network"]["hidden"] == [32, 16]
    out = cli("quantize", run, "--scheme", "fp32", "int8").stdout
    assert (run / "models" / "int8.tflite").is_file() and "int8" in out


def test_set_options_parse_as_toml_values_and_unknown_ones_are_named(tmp_path):
    from quarl_edge.cli.runs import option_value
    assert option_value("gamma=0.9") == ("gamma", 0.9)
    assert option_value("hidden=[256,256]") == ("hidden", [256, 256])
    assert option_value("warmup_noise=ou") == ("warmup_noise", "ou")      # a bare word
    assert option_value("select_int8=false") == ("select_int8", False)
    err = cli("train", "--algo", "ppo", "--out", tmp_path / "r", "--set", "gama=0.9",
              expect=2).stderr
    assert "unknown ppo option(s) gama" in err and "gamma" in err
    assert "--set wants KEY=VALUE" in cli("train", "--out", tmp_path / "r", "--set", "gamma",
                                          expect=2).stderr


def test_demo_defaults_to_the_emulated_cortex_m4():
    from quarl_edge.cli import parser
    assert parser().parse_args(["demo"]).board == "mps2-an386"
