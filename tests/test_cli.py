"""The command line's conventions: help on every option (with its default and choices) and an
example per command, --version, aligned tables with units, --json that is only JSON, the
documented exit codes, and no third-party chatter unless -v."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import quarl_edge
from quarl_edge import cli
from quarl_edge.cli.options import DeprecatedAlias
from quarl_edge.core.errors import QuarlError
from quarl_edge.core.resources import examples_dir

EXAMPLE = "examples/cartpole_dqn"


def run(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quarl_edge.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    p = cli.parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_option_has_help_with_its_default_and_each_command_an_example(name):
    s = subcommands()[name]
    text = s.format_help()
    assert "example:\n  quarl-edge " + name in text
    for action in s._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.help is argparse.SUPPRESS:      # only a deprecated spelling is hidden
            assert isinstance(action, DeprecatedAlias), f"{name} {action.option_strings}"
            continue
        assert action.help, f"{name} {action.dest}: no help text"
        has_default = action.default not in (None, False, [], argparse.SUPPRESS)
        if has_default and action.option_strings:      # argparse appends "(default: ...)"
            assert "default" in cli.HelpFormatter(name)._get_help_string(action)
        if action.choices and action.metavar:     # a metavar hides argparse's {a,b,...}
            assert all(c in action.help for c in action.choices), f"{name} {action.dest}"


def test_each_name_of_quarl_edge_names_has_its_stage_entry_and_no_other():
    """The CLI offers quarl_edge.core.names; each stage's table holds exactly those names, and each
    head and sweep mode is one that its stage runs (an unknown one is refused by name)."""
    import gymnasium as gym
    from quarl_edge.core import names
    from quarl_edge.importers import import_policy
    from quarl_edge.quant.nbit import nbit_sweep
    from quarl_edge.quant.schemes import SCHEMES
    from quarl_edge.core.envs import outputs_to_actions
    from quarl_edge.rl.train import ALGOS
    assert tuple(ALGOS) == names.ALGOS and tuple(SCHEMES) == names.SCHEMES
    options = {a.dest: a for s in subcommands().values() for a in s._actions}
    assert options["algo"].choices is names.ALGOS and options["scheme"].choices is names.SCHEMES
    box, discrete = gym.spaces.Box(-2.0, 2.0, (1,)), gym.spaces.Discrete(3)
    for head in names.HEADS:
        space = discrete if head == "argmax" else box
        assert outputs_to_actions(np.zeros((1, space.n if head == "argmax" else 1)), space, head).shape[0] == 1
    with pytest.raises(QuarlError, match="unknown action head 'softmax'; known: argmax, identity, scale"):
        outputs_to_actions(np.zeros((1, 1)), box, "softmax")
    with pytest.raises(QuarlError, match="unknown import kind 'pickle'; known: sb3, rl-zoo, onnx"):
        import_policy("x.pkl", "out", kind="pickle")
    with pytest.raises(QuarlError, match="unknown sweep mode 'bits'; known: weights\\+activations, "
                                         "weights, activations"):
        nbit_sweep(examples_dir() / "cartpole_dqn", modes=["weights", "bits"])


def test_version():
    p = run("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"quarl-edge {quarl_edge.__version__}"


def test_usage_and_user_errors_exit_2_without_a_traceback(tmp_path):
    p = run("validate")                                  # a missing argument: argparse's usage
    assert p.returncode == 2 and "usage:" in p.stderr
    p = run("validate", tmp_path / "nothing.tflite")      # a user error: one line
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.startswith("quarl-edge: error:") and "nothing.tflite" in p.stderr


def test_a_bug_exits_3_with_its_traceback(monkeypatch, capsys):
    def broken(*a, **k):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(quarl_edge.api, "boards", broken)
    assert cli.main(["boards"]) == cli.EXIT_BUG
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err and "bug in quarl-edge" in err


def test_an_error_inside_a_progress_bar_gets_a_line_of_its_own(monkeypatch, capsys):
    """A stage that fails inside its loop leaves its bar open (the trainers do): the error is
    still printed at the start of a line, never after the bar's text (issue 24)."""
    from tqdm import tqdm

    def fails_mid_training(*a, **k):
        bar = tqdm(total=100, desc="dqn CartPole-v1", leave=False)
        bar.update(40)
        raise quarl_edge.core.errors.QuarlError("the env stopped")
    monkeypatch.setattr(quarl_edge.api, "train", fails_mid_training)
    assert cli.main(["train", "--env", "CartPole-v1", "--out", "nowhere"]) == cli.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "dqn CartPole-v1:" in err                        # the bar was drawn
    before = err[:err.index("quarl-edge: error: the env stopped")]
    assert before.endswith(("\r", "\n")), repr(before[-80:])


def test_a_measured_mismatch_exits_1(monkeypatch, capsys):
    """The exit code follows the measurement (bit_exact), not the command's success."""
    def not_exact(*a, **k):
        return quarl_edge.api.ValidateResult(
            "host", "m.tflite", 10, False, 3, 1.0, 0.5,
            quarl_edge.api.Latency("ns", 100.0, 120.0, 10), {}, "build/host/m")
    monkeypatch.setattr(quarl_edge.api, "validate", not_exact)
    assert cli.main(["validate", "m.tflite", "--json"]) == cli.EXIT_MISMATCH
    assert json.loads(capsys.readouterr().out)["mismatches"] == 3


def test_validate_says_where_it_built_and_takes_out(tmp_path):
    model = tmp_path / "int8.tflite"
    model.write_bytes((examples_dir() / "cartpole_dqn" / "models" /
                       "int8.tflite").read_bytes())
    p = run("validate", model, "--random", "5", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "bit-exact with TF Lite Micro" in p.stdout and " ns (p99 " in p.stdout
    assert "built into build/host/int8" in p.stderr
    assert (tmp_path / "build" / "host" / "int8" / "firmware.elf").is_file()
    assert not (tmp_path / "build" / "host" / "int8" / "results").exists()
    p = run("validate", model, "--random", "5", "--out", tmp_path / "elsewhere", "--json",
            cwd=tmp_path)
    res = json.loads(p.stdout)                       # nothing but the JSON on stdout
    assert res["bit_exact"] is True and res["out_dir"] == str(tmp_path / "elsewhere")
    assert (tmp_path / "elsewhere" / "firmware.elf").is_file()


def test_boards_table_has_units():
    p = run("boards")
    assert p.returncode == 0, p.stderr
    rows = {ln.split()[0]: ln for ln in p.stdout.splitlines()[1:]}
    assert "180 MHz" in rows["nucleo-f446re"] and "512 KiB" in rows["nucleo-f446re"]
    assert "4,096 KiB" in rows["mps2-an386"] and "instructions" in rows["mps2-an386"]
    assert "2.0 KiB" in rows["atmega328p"]


def test_boards_dir_adds_the_users_board_files(tmp_path):
    from quarl_edge.core.resources import boards_dir
    mine = tmp_path / "my-boards"
    mine.mkdir()
    text = (boards_dir() / "host.toml").read_text()
    (mine / "my-host.toml").write_text(text.replace('id = "host"', 'id = "my-host"', 1))
    listed = json.loads(run("--boards-dir", mine, "boards", "--json").stdout)
    assert listed["my-host"]["path"] == str(mine / "my-host.toml") and "host" in listed
    assert "my-host" not in json.loads(run("boards", "--json").stdout)


@pytest.mark.parametrize("argv, extra", [
    (["quantize", "{run}", "--scheme", "int8"], "pip install 'quarl-edge[tf]'"),
    (["import", "{zip}", "--env", "CartPole-v1", "--out", "{out}"], "pip install 'quarl-edge[tf]'"),
    (["train", "--env", "CartPole-v1", "--steps", "10", "--out", "{out}"],
     "pip install 'quarl-edge[train]'"),
])
def test_a_missing_extra_is_one_line_that_names_it_exit_2(argv, extra, monkeypatch, capsys,
                                                          tmp_path):
    """The core install has no TensorFlow: a command that needs it names the extra to install,
    in one line, exit 2, and writes nothing. (None in sys.modules makes `import tensorflow`
    raise ModuleNotFoundError, as when it is not installed.)"""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(examples_dir() / "cartpole_dqn", run)
    (run / "models" / "int8.tflite").unlink()
    fixture = Path(__file__).parent / "fixtures" / "sb3" / "dqn_cartpole.zip"
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    args = [a.format(run=run, zip=fixture, out=tmp_path / "out") for a in argv]
    assert cli.main(args) == cli.EXIT_USER_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"quarl-edge: error: {argv[0]} needs ") and extra in err[0], err
    assert not (tmp_path / "out").exists() and not (run / "models" / "int8.tflite").exists()
