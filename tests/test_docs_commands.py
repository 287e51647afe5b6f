"""Every shell command README.md and docs/*.md show (code blocks and inline code: quarl-edge,
make, python, pytest, scripts by path) is found and checked against what it names (issue 25:
docs that cannot rot): quarl-edge's own argument parser (command, options, choices, types, board
ids, repository paths; a whole command must parse), the Makefile's targets and variables, a
script's or module's --help, pyproject's markers. The collector and the checks are in
tests/helpers_docs.py; the cheap commands run for real in test_docs_runs.py.
"""
from __future__ import annotations

import pytest
from helpers_docs import CHECKS, COMMANDS, _command


def test_the_documented_commands_are_found():
    """The collector sees the commands where the docs show them: code blocks, table cells,
    spans that wrap a line; a program's bare name or an output table is not a command."""
    texts = {c.text for c in COMMANDS}
    assert "make demo" in texts and "make test" in texts                        # README, a block
    assert "quarl-edge boards" in texts                                         # README, a span
    assert "quarl-edge report results/classic/results.jsonl" in texts           # wraps a line
    assert ("quarl-edge validate MODEL.tflite --board BOARD [--inputs X.npy|X.npz | --random N] "
            "[--save-outputs Y.npy|Y.npz] [--out DIR] --json") in texts         # a table cell, \|
    assert "quarl-edge farm-node --address HEAD:6379 --instances 4 --resources " \
           '{"board:nucleo-f446re": 1}' in texts                                # quoted, # comment
    assert not any(c.argv in (("quarl-edge",), (".venv/bin/quarl-edge",), ("python3.11",),
                              ("make",), ("pytest",)) for c in COMMANDS)
    assert len(COMMANDS) >= 80, len(COMMANDS)


@pytest.mark.parametrize("c", COMMANDS, ids=lambda c: f"{c.where} {c.text}"[:100])
def test_a_documented_command_is_valid(c):
    assert CHECKS[c.kind](c) == []


def test_the_checks_find_a_renamed_flag_a_bad_choice_a_missing_target():
    """Each check fails on what would be a stale doc: an option or command renamed, a choice
    that is not one, a type, a board, a make target or variable, a script's option, a marker."""
    def bad(text, fenced=True):
        return CHECKS[_command(text, "x:1", fenced).kind](_command(text, "x:1", fenced))
    assert bad("quarl-edge quantize runs/x --scheme fp32 int8") == []
    assert "no option --schemes" in bad("quarl-edge quantize runs/x --schemes int8")[0]
    assert "'int7' is not one of" in bad("quarl-edge quantize runs/x --scheme fp32 int7")[0]
    assert "no command 'quantise'" in bad("quarl-edge quantise runs/x")[0]
    assert "'many'" in bad("quarl-edge hil RUN --episodes many")[0]
    assert "no board 'toaster'" in bad("quarl-edge hil RUN --board toaster")[0]
    assert "required" in bad("quarl-edge import policy.onnx --env Pendulum-v1")[0]   # no --out
    assert bad("quarl-edge import SOURCE [--env ID]", fenced=False) == []           # a synopsis
    assert "no option --pretrain" in bad("quarl-edge demo [--pretrain]", fenced=False)[0]
    assert "studies/nothing.toml does not exist" in bad("quarl-edge study studies/nothing.toml")[0]
    assert bad("make test-core PYTHON=python3.13") == []
    assert "no target 'tests'" in bad("make tests")[0]
    assert "no variable ZOOO" in bad("make rl-zoo-table ZOOO=DIR")[0]
    assert "no option --tflm" in bad("benchmarks/vs_tflm.py --tflm DIR")[0]
    assert "benchmarks/nothing.py does not exist" in bad("python benchmarks/nothing.py")[0]
    assert "no such module" in bad("python -m quarl_edge.nothing")[0]
    assert "no marker 'sloow'" in bad("pytest -m 'not sloow'")[0]
