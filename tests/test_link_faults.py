"""The link survives the real world (issue 15), on the real host board and the QEMU
mps2-an386 board behind real ports, through the fault:// port (quarl_edge/link/fault.py):
a lost header byte or noise before HELLO, HIL and validate at a 1e-3 byte error rate with
forced board resets, a board that falls silent, and `flash` handing the emulated board's port
to `validate --port`. The board runs the RL Zoo's DQN Acrobot (int8): every action shows in the
return, and HIL under faults must choose TF Lite Micro's action at every step."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import serial

from quarl_edge import api
from quarl_edge.core.errors import BoardError
from quarl_edge.link.runner import BoardLink
from quarl_edge.targets.boards import all_boards
from quarl_edge.targets.build import build
from quarl_edge.targets.launch import start
from helpers_models import cli_json


ZOO_ACROBOT = Path(__file__).resolve().parent / "fixtures" / "rl-zoo" / "dqn" / "Acrobot-v1_1"


@pytest.fixture(scope="module")
def acrobot(tmp_path_factory):
    """The RL Zoo's DQN Acrobot as an int8 run. Acrobot's return moves with every action (-1
    per step until the goal), where the example CartPole policy's saturates at 500 and would
    hide a wrong action."""
    run = tmp_path_factory.mktemp("acrobot") / "run"
    api.import_policy(ZOO_ACROBOT, out=run)
    api.quantize(run, ["int8"])
    return run


@pytest.fixture(scope="module", params=["host", "mps2-an386"])
def running(request, acrobot, tmp_path_factory):
    """The board running the Acrobot int8 policy, started once per module and board."""
    board = all_boards()[request.param]
    fw = build(acrobot / "models" / "int8.tflite", board, tmp_path_factory.mktemp("fw"))
    with start(board, fw.elf) as r:
        time.sleep(0.5)      # booted: its boot announcement is in the port, which open() flushes
        yield board, r


def handshake(url: str) -> tuple[BoardLink, float]:
    link = BoardLink(url)
    t0 = time.monotonic()
    link.hello(10)
    return link, time.monotonic() - t0


def test_handshake_survives_a_dropped_header_byte(running):
    board, r = running
    link, took = handshake(f"fault://?drop_rx=3&url={r.url}")   # the HELLO reply's command byte
    with link:
        assert link.ser.counts["dropped"] == 1
        assert link.stats["bad_frames"] >= 1          # the damaged reply was seen and dropped
        assert link.info.board_id == board.id
    assert took < 2.0, took


def test_handshake_survives_noise_before_hello(running):
    board, r = running
    link, took = handshake(f"fault://?inject=a55a000000ffff&url={r.url}")
    with link:
        assert link.ser.counts["injected"] == 7 and link.stats["bad_frames"] >= 1
        assert link.info.board_id == board.id
    assert took < 1.0, took


def hil_through_faults(running, run, tmp_path, episodes, resets_at):
    board, r = running
    url = f"fault://?flip=1e-3&seed=1&reset={r.reset_handle}&reset_at={resets_at}&url={r.url}"
    res = api.hil(run, board.id, scheme="int8", episodes=episodes, port=url, out=tmp_path)
    link = res.link
    assert link["faults"]["resets"] == 2 and link["faults"]["flipped"] > 100
    assert link["retries"] > 0 and link["bad_frames"] + link["board_errors"] > 0
    # each reset the board announced interrupted an episode, which was played again
    assert 1 <= link["resets"] == link["replayed_episodes"] <= 2
    logged = [json.loads(ln) for ln in (tmp_path / f"hil_{board.id}_int8.episodes.jsonl").open()]
    played = {w: [(e["seed"], e["return"], e["steps"]) for e in logged if e["who"] == w]
              for w in ("board", "tflm")}
    # the same seeds, returns and episode lengths as TF Lite Micro's (a clean run), and the
    # same action at every step
    assert played["board"] == played["tflm"] and len(played["board"]) == episodes
    assert res.actions_equal_reference and res.matches_reference
    assert len({ret for _, ret, _ in played["board"]}) > 1      # returns that move
    assert res.latency.n == sum(steps for _, _, steps in played["board"])   # no step twice


def test_hil_at_1e3_corruption_with_two_resets_plays_the_clean_episodes(running, acrobot,
                                                                         tmp_path):
    hil_through_faults(running, acrobot, tmp_path, 30, "500,1500")


def test_validate_200_through_the_fault_link_is_bit_exact(running, acrobot):
    board, r = running
    url = (f"fault://?flip=1e-3&drop=1e-3&dup=1e-3&seed=2&reset={r.reset_handle}"
           f"&reset_at=60,150&url={r.url}")
    res = api.validate(acrobot / "models" / "int8.tflite", board.id, random=200, port=url)
    assert res.bit_exact and res.n == 200
    assert res.link["retries"] > 0 and res.link["faults"]["resets"] == 2


def test_stalls_are_learnt_as_late_replies_not_retried_forever(running):
    """A busy host or a board that stalls makes replies late, not lost: 80 ms stalls on 1 in
    2,000 of the board's bytes (a QEMU descheduled on a loaded machine: about one reply in 100,
    rarer than the 32 round trips the wait is taken from), against round trips of about a
    millisecond. The first stall's reply comes after the re-send and is recognised as the
    earlier attempt's (too soon to answer the re-send); its round trip is then waited for, so the
    other stalls cost no re-sends (without learning, each stall costs one: ~20 here)."""
    board, r = running
    import numpy as np
    with BoardLink(f"fault://?delay=0.0005&delay_s=0.08&dir=rx&seed=3&url={r.url}") as link:
        link.hello(10)
        x = [np.zeros(link.info.inputs[0].shape, np.float32)]
        for _ in range(2000):
            link.infer(x)
        stalls = link.ser.counts["delayed"]
        assert stalls >= 8, link.ser.counts                     # the stalls were there
        assert link.stats["late_replies"] >= 1, link.stats
        assert link.stats["timeouts"] <= 3 + stalls // 10, (stalls, link.stats)
        assert link.stats["resyncs"] <= 2, link.stats


def test_a_board_that_falls_silent_is_a_clear_error_in_bounded_time(running):
    board, r = running
    if board.id != "host":
        pytest.skip("the link's timing is the same for every board; one is enough")
    with BoardLink(f"fault://?cut=2&url={r.url}") as link:   # HELLO passes, then nothing
        link.hello(10)
        import numpy as np
        t0 = time.monotonic()
        with pytest.raises(BoardError, match="stopped answering: no reply to INFER after 9 "
                                             "attempts .* and no answer to HELLO"):
            for _ in range(3):
                link.infer([np.full(link.info.inputs[0].shape, 0.1, np.float32)])   # INFER
        assert time.monotonic() - t0 < 15


def test_bad_fault_urls_are_clear_errors():
    with pytest.raises(BoardError, match="names no inner port"):
        BoardLink("fault://?flip=1e-3")
    with pytest.raises(BoardError, match="unknown fault:// parameter.*flop"):
        BoardLink("fault://?flop=1&url=loop://")
    with pytest.raises(BoardError, match="not a probability"):
        BoardLink("fault://?drop=2&url=loop://")


def test_the_fault_port_is_deterministic_per_seed():
    import quarl_edge.link.runner  # noqa: F401  (registers fault://)

    def through(seed):
        with serial.serial_for_url(f"fault://?flip=0.05&drop=0.05&dup=0.05&seed={seed}"
                                   "&url=loop://", timeout=0.2) as s:
            s.write(bytes(range(256)))
            return s.read(600), dict(s.counts)
    a, b, c = through(1), through(1), through(2)
    assert a == b and a != c and a[0] != bytes(range(256))
    assert set(a[1]) == {"flipped", "dropped", "duplicated"}


def test_flash_hands_the_emulated_boards_port_to_validate(run_copy, tmp_path):
    """`quarl-edge flash` on QEMU keeps the board up but not its serial socket (one client at a
    time): `validate --port URL` gets HELLO, also through a fault:// link with a reset."""
    # SIGINT at its default in the child whatever the test runner's is (a child inherits an
    # ignored SIGINT, and Python then never raises KeyboardInterrupt: Ctrl-C would not stop it)
    proc = subprocess.Popen([sys.executable, "-m", "quarl_edge.cli", "flash", run_copy,
                             "--scheme", "int8", "--board", "mps2-an386", "--out", tmp_path / "fw"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()
        url = re.search(r"unix://\S+\.sock", line).group(0)
        reset = None
        while reset is None:
            m = re.search(r"reset=(qemu-monitor:[^&]+)&", proc.stderr.readline())
            reset = m and m.group(1)
        model = run_copy / "models" / "int8.tflite"
        plain = cli_json("validate", model, "--board", "mps2-an386", "--port", url, "--random", "20")
        assert plain["bit_exact"] and plain["link"]["retries"] == 0
        faulty = cli_json("validate", model, "--board", "mps2-an386", "--random", "200", "--port",
                          f"fault://?flip=1e-3&seed=5&reset={reset}&reset_at=80&url={url}")
        assert faulty["bit_exact"] and faulty["n"] == 200
        assert faulty["link"]["retries"] > 0 and faulty["link"]["faults"]["resets"] == 1
    finally:
        # communicate() drains both pipes (a flash process blocked writing to a full pipe would
        # never see the SIGINT through); a loaded machine may take a while to stop QEMU
        # (In the full suite in CI the flash process once outlived SIGINT by 60 s after every
        # assertion above had passed; not reproduced alone. SIGTERM next, then the kill.)
        for stop, wait in ((signal.SIGINT, 30), (signal.SIGTERM, 30)):
            proc.send_signal(stop)
            try:
                proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            proc.kill()
            proc.communicate()
            raise AssertionError("quarl-edge flash outlived SIGINT and SIGTERM")
