"""`quarl-edge hil --act` (issue 37): the board computes every action with the exported library's
NAME_act (the ACT request) and the host checks it against its own mapping of TF Lite Micro's
outputs at every step. For a discrete policy (CartPole DQN int8) and a continuous one (the SB3
SAC Pendulum actor, int8) on the host board, mps2-an386 (QEMU) and the ATmega328P (simavr,
CartPole: 2 KiB of RAM): every action equal, and the episodes' returns those of hil's ordinary
mode (the board's INFER, the host's mapping) on the same seeds. A recurrent policy (SB3
RecurrentPPO, int8) on the host and mps2-an386: RESET zeroes the library's state too."""
from __future__ import annotations

import shutil

import pytest

import quarl_edge as qe
from helpers_export import CARTPOLE, RPPO, imported_run, pendulum_run

TOOLS = {"host": ("gcc",), "mps2-an386": ("arm-none-eabi-gcc", "qemu-system-arm"),
         "atmega328p": ("avr-gcc", "simavr")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("act")
    shutil.copytree(CARTPOLE, d / "cartpole", ignore=shutil.ignore_patterns("build", "results"))
    imported_run(RPPO, "CartPole-v1", d / "rnn", "int8")
    return {"cartpole": d / "cartpole", "pendulum": pendulum_run(d), "rnn": d / "rnn"}


@pytest.mark.parametrize("board,policy,episodes", [
    ("host", "cartpole", 2), ("host", "pendulum", 2), ("host", "rnn", 2),
    ("mps2-an386", "cartpole", 1), ("mps2-an386", "pendulum", 1), ("mps2-an386", "rnn", 1),
    ("atmega328p", "cartpole", 1)])
def test_the_board_acting_with_the_library_plays_hils_episodes(runs, board, policy, episodes):
    missing = [t for t in TOOLS[board] if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (scripts/setup.sh)")
    run = runs[policy]
    plain = qe.hil(run, board, scheme="int8", episodes=episodes)
    act = qe.hil(run, board, scheme="int8", episodes=episodes, act=True)
    assert plain.act is None and act.act is not None
    assert act.act["differ"] == 0, act.act["first_difference"]
    assert act.act["steps"] == act.latency.n > 0      # every step went through NAME_act
    assert act.returns == plain.returns
    assert act.matches_reference and act.actions_equal_reference
    assert act.stateful == (policy == "rnn")
    assert act.results.endswith(f"hil_{board}_int8-act_seeds0-{episodes - 1}.json")
    assert act.memory["flash_bytes"] > plain.memory["flash_bytes"]   # the library is built in


def test_act_is_refused_by_a_plain_firmware_and_a_nan_observation_by_the_library(runs, tmp_path):
    """ACT on a firmware built without the library is UNKNOWN_CMD; on one with it, an
    observation the library refuses (NaN: NAME_act returns < 0) is BAD_PAYLOAD, not an action,
    and a good one after it is answered."""
    import numpy as np

    from quarl_edge.core.errors import ProtocolError
    from quarl_edge.link.session import BoardSession
    from quarl_edge.measure.hil import hil_policy
    from quarl_edge.measure.hil_act import act_library
    from quarl_edge.targets.boards import get_board
    board = get_board("host")
    t = hil_policy(runs["cartpole"], "int8", None, None)
    with BoardSession(t.model, board, tmp_path / "plain") as s:
        with pytest.raises(ProtocolError, match="UNKNOWN_CMD"):
            s.link.act(np.zeros(4, np.float32), 1)
    sources, defines, facts = act_library(t, board, tmp_path / "act" / "act")
    with BoardSession(t.model, board, tmp_path / "act", act=(sources, defines)) as s:
        with pytest.raises(ProtocolError, match="BAD_PAYLOAD"):
            s.link.act(np.array([np.nan, 0, 0, 0], np.float32), 1)
        action, _ = s.link.act(np.zeros(4, np.float32), 1)
        assert action.shape == (1,) and action[0] in (0.0, 1.0)
