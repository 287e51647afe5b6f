"""The on-device harness (firmware/core) with the host port, end to end.

The harness is built with real gcc from firmware/core + firmware/ports/host + a small real model
(tests/fixtures/identity_model.c) and run the way quarl_edge/targets/launch.py runs the host board: the
process gets the MASTER side of a pseudo-terminal as stdin/stdout, and the test opens the SLAVE
side (a real tty device, raw mode) with pyserial, exactly like a board's serial port. (The other
way round - the harness on the slave - would need pyserial to open a bare master fd, which it
cannot, and would put the line discipline in front of the harness.) The test keeps the slave
open through pyserial for the harness's lifetime: once no one holds the slave, the harness's
read() fails with EIO and it exits, which is how a run ends.

A reader thread drains the port continuously, so the harness never blocks on a full pty buffer
while the test is still writing (hostile inputs can make it answer with many error frames).

Robustness tests also run against a build with -fsanitize=address,undefined (the host port then
uses the normal stack; see firmware/ports/host/port.c) and check its stderr stays clean.

(Split for issue 25: the error paths and the property tests with hostile bytes are in
test_harness_robustness.py; the build and `Board` in helpers_harness.py.)
"""
from __future__ import annotations

import os
import random
import signal
import struct
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_harness import (MAX_PAYLOAD, MODEL_HASH, STACK_BYTES, Board, assert_clean_exit,
                             dequant, infer, shared_builds)
from quarl_edge.link import protocol as P


@pytest.fixture(scope="module")
def builds(tmp_path_factory, worker_id):
    return shared_builds(tmp_path_factory, worker_id)


@pytest.fixture
def plain(builds):
    exe, env = builds["plain"]
    with Board(exe, env) as b:
        yield b


@pytest.fixture(params=["plain", "sanitized"])
def board(builds, request):
    exe, env = builds[request.param]
    with Board(exe, env) as b:
        yield b


# ---------------------------------------------------------------------------- commands
def test_hello_reports_board_and_model(board):
    h = board.hello()
    assert (h.version, h.cost_unit, h.clock_hz, h.max_payload) == (P.VERSION, "ns", 0, MAX_PAYLOAD)
    assert (h.board_id, h.model_name, h.model_hash, h.arena_bytes) == ("host", "identity",
                                                                       MODEL_HASH, 20)
    assert h.inputs == [P.TensorSpec("int8", (1, 4), 0.5, -3)]
    assert h.outputs == [P.TensorSpec("float32", (1, 4), 0.0, 0),
                         P.TensorSpec("float32", (1, 1), 0.0, 0)]
    assert_clean_exit(board)


def test_hello_echoes_each_nonce_and_seq(plain):
    for _ in range(20):
        nonce = random.getrandbits(32)
        f = plain.request(0x01, struct.pack("<I", nonce))
        assert f.cmd == 0x81 and P.parse_hello(f.payload).nonce == nonce


def test_infer_computes_the_model(plain):
    x = [-128, -3, 0, 127]
    cost, out, total = infer(plain, x)
    assert out == dequant(x) == [-62.5, 0.0, 1.5, 65.0]
    assert total == -62.5
    assert 0 < cost < 10**8          # ns: the two clock reads alone take some
    cost, out, total = infer(plain, [1, 2, 3, 4])
    assert out == dequant([1, 2, 3, 4]) and total == -62.5 + 2.0


@given(st.lists(st.integers(-128, 127), min_size=4, max_size=4))
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_infer_random_inputs(plain, x):
    _, out, _ = infer(plain, x)
    assert out == dequant(x)


def test_bench_reruns_the_last_input(plain):
    """The model writes its output over its input (in-place arena) and keeps a running sum of
    output[0]: after INFER x, BENCH n, INFER x the sum is (n + 2) * x's output[0] only if BENCH
    restored the input before every run."""
    x = [-128, 5, 6, 7]
    _, out, total = infer(plain, x)
    n = 7
    f = plain.request(0x03, struct.pack("<H", n))
    assert f.cmd == 0x83
    cnt, lo, hi, total_cost = struct.unpack(P.BENCH_REPLY, f.payload)
    assert cnt == n and 0 < lo <= total_cost / n <= hi < 10**8
    _, _, total = infer(plain, x)
    assert total == (n + 2) * out[0]


def test_bench_before_any_infer_runs_on_zeros(plain):
    f = plain.request(0x03, struct.pack("<H", 3))
    assert f.cmd == 0x83 and struct.unpack(P.BENCH_REPLY, f.payload)[0] == 3
    _, _, total = infer(plain, [9, 9, 9, 9])
    assert total == 3 * dequant([0])[0] + dequant([9])[0]


def test_bench_statistics_many_runs(plain):
    infer(plain, [1, 2, 3, 4])
    f = plain.request(0x03, struct.pack("<H", 65535))
    cnt, lo, hi, total = struct.unpack(P.BENCH_REPLY, f.payload)
    assert cnt == 65535 and lo <= total / cnt <= hi and lo < hi   # timing noise over 65535 runs


def test_mem_reports_a_measured_stack(plain):
    infer(plain, [1, 2, 3, 4])
    f = plain.request(0x04)
    assert f.cmd == 0x84
    flash, ram, used, size, arena = struct.unpack(P.MEM_REPLY, f.payload)
    assert (flash, ram, size, arena) == (0, 0, STACK_BYTES, 20)
    # harness + frame layer + model + read/write/clock_gettime: a few hundred bytes
    assert 64 < used < 4096, used


def test_mem_on_sanitized_build_says_it_cannot_tell(builds):
    exe, env = builds["sanitized"]
    with Board(exe, env) as b:
        flash, ram, used, size, arena = struct.unpack(P.MEM_REPLY, b.request(0x04).payload)
        assert (used, size, arena) == (0, 0, 20)
        assert_clean_exit(b)


@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(256)) * 4])
def test_echo_roundtrip(board, payload):
    f = board.request(0x05, payload)
    assert (f.cmd, f.payload) == (0x85, payload)
    assert_clean_exit(board)


def test_harness_exits_cleanly_on_pipe_eof(builds):
    """Pipes instead of a pty: replies are written, then end of input ends the process."""
    exe, env = builds["plain"]
    req = P.encode_frame(0x05, b"over a pipe", 1) + P.encode_frame(0x01, b"\1\2\3\4", 2)
    p = subprocess.run([str(exe)], input=req, capture_output=True, timeout=10,
                       env={**os.environ, **env})
    assert p.returncode == 0, p.stderr
    frames = P.FrameDecoder().feed(p.stdout)
    assert [(f.cmd, f.seq) for f in frames] == [(0x81, P.BOOT_SEQ), (0x85, 1), (0x81, 2)]
    assert frames[1].payload == b"over a pipe"


# ----------------------------------------------------------------- retries and resets
def test_boot_announcement_then_the_first_hello_sets_the_boot_id(plain):
    boot = P.parse_hello(plain.boot.payload)
    assert plain.boot.seq == P.BOOT_SEQ and boot.is_boot_announcement and boot.boot_id == 0
    assert (boot.board_id, boot.model_hash) == ("host", MODEL_HASH)
    nonces = [random.getrandbits(32) | 1 for _ in range(3)]
    ids = [P.parse_hello(plain.request(0x01, struct.pack("<I", n)).payload).boot_id for n in nonces]
    assert ids == [nonces[0]] * 3       # the first HELLO's nonce, for as long as it runs


def test_a_retried_infer_is_answered_again_not_run_again(plain):
    """The model keeps a running sum of its output over every invoke: a retry (same seq, same
    bytes) gets the identical reply, cost included, and the sum shows the model ran once."""
    x = struct.pack("<4b", 10, 0, 0, 0)
    seq = plain.next_seq()
    plain.send(P.encode_frame(0x02, x, seq))
    first = plain.frame()
    plain.send(P.encode_frame(0x02, x, seq))
    again = plain.frame()
    assert first.seq == again.seq == seq and first.payload == again.payload
    _, out, total = infer(plain, [10, 0, 0, 0])
    assert total == 2 * out[0]          # two invokes, not three
    # the same seq with other bytes is a new request; so is anything after a HELLO
    plain.send(P.encode_frame(0x02, struct.pack("<4b", 11, 0, 0, 0), plain.seq))
    assert struct.unpack("<I4ff", plain.frame().payload)[-1] == 2 * out[0] + dequant([11])[0]
    plain.hello()
    plain.send(P.encode_frame(0x02, struct.pack("<4b", 11, 0, 0, 0), plain.seq - 1))
    assert struct.unpack("<I4ff", plain.frame().payload)[-1] == 2 * out[0] + 2 * dequant([11])[0]


def test_a_retried_bench_is_answered_again_not_run_again(plain):
    infer(plain, [1, 2, 3, 4])
    seq = plain.next_seq()
    plain.send(P.encode_frame(0x03, struct.pack("<H", 5), seq))
    first = plain.frame()
    plain.send(P.encode_frame(0x03, struct.pack("<H", 5), seq))
    assert plain.frame().payload == first.payload
    _, out, total = infer(plain, [1, 2, 3, 4])
    assert total == 7 * out[0]          # INFER, 5 BENCH runs, INFER: the retry ran nothing


def reset(b: Board, seq: int | None = None) -> int:
    """RESET; returns the boot id its reply carries."""
    seq = b.next_seq() if seq is None else seq
    b.send(P.encode_frame(P.COMMANDS["RESET"], b"", seq))
    f = b.frame()
    assert (f.cmd, f.seq) == (P.COMMANDS["RESET"] | P.REPLY_BIT, seq), f
    (boot,) = struct.unpack(P.RESET_REPLY, f.payload)
    return boot


def test_reset_zeroes_the_model_state_and_names_the_boot_id(plain):
    """The fixture's running sum is its state (as an LSTM's h and c): RESET zeroes it, the next
    INFER's sum starts again; the reply is the boot id of the first HELLO (0 before any)."""
    assert reset(plain) == 0                                   # no HELLO yet since boot
    boot = plain.hello().boot_id
    infer(plain, [7, 0, 0, 0])
    infer(plain, [7, 0, 0, 0])
    assert infer(plain, [7, 0, 0, 0])[2] == 3 * dequant([7])[0]
    assert reset(plain) == boot
    _, out, total = infer(plain, [9, 0, 0, 0])
    assert total == out[0] == dequant([9])[0]


def test_a_retried_reset_leaves_the_state_zero_and_an_infer_retry_still_replays(plain):
    """RESET has no effect to repeat: its retry (same seq) is answered again and the state is
    still zero. An INFER retry after it is answered from the first attempt and the model does
    not run again, so the state moves on once per step, not once per attempt."""
    boot = plain.hello().boot_id
    infer(plain, [5, 0, 0, 0])
    seq = plain.next_seq()
    assert reset(plain, seq) == reset(plain, seq) == boot
    x = struct.pack("<4b", 5, 0, 0, 0)
    seq = plain.next_seq()
    plain.send(P.encode_frame(0x02, x, seq))
    first = plain.frame()
    plain.send(P.encode_frame(0x02, x, seq))
    assert plain.frame().payload == first.payload
    assert struct.unpack("<I4ff", first.payload)[-1] == dequant([5])[0]
    assert infer(plain, [5, 0, 0, 0])[2] == 2 * dequant([5])[0]   # two runs since the RESET


@given(st.lists(st.tuples(st.sampled_from(["infer", "reset"]), st.integers(-20, 20),
                          st.integers(0, 2)), min_size=1, max_size=12))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_reset_and_infer_with_retries_keep_the_state_of_a_model_run_once_per_step(plain, steps):
    """Any sequence of INFERs and RESETs, each sent 1 + `retries` times with its sequence
    number (a host whose replies got lost): the state (the fixture's running sum) is the sum of
    the INFERs since the last RESET, each counted once, as if no request had been repeated."""
    boot = plain.hello().boot_id
    assert reset(plain) == boot
    expected = 0.0
    for what, x, retries in steps:
        seq = plain.next_seq()
        if what == "reset":
            for _ in range(1 + retries):
                assert reset(plain, seq) == boot
            expected = 0.0
            continue
        frame = P.encode_frame(0x02, struct.pack("<4b", x, 0, 0, 0), seq)
        replies = []
        for _ in range(1 + retries):
            plain.send(frame)
            replies.append(plain.frame().payload)
        expected += dequant([x])[0]
        assert all(r == replies[0] for r in replies)
        assert struct.unpack("<I4ff", replies[0])[-1] == pytest.approx(expected, abs=1e-4)


def test_sigusr1_restarts_the_host_board_which_announces_it(plain):
    """A reset from outside (the fault link's reset=signal:PID): the same process restarts
    from scratch on the same pty, announces its boot and takes the next HELLO's nonce as its
    new boot id; the model's state is gone (its running sum starts again)."""
    old = plain.hello().boot_id
    infer(plain, [20, 0, 0, 0])
    pid = plain.proc.pid
    os.kill(pid, signal.SIGUSR1)
    plain.expect_boot()
    new = plain.hello()
    assert new.boot_id != old and plain.proc.pid == pid and plain.alive()
    _, out, total = infer(plain, [20, 0, 0, 0])
    assert total == out[0]
    assert_clean_exit(plain)
