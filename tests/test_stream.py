"""Streamed tensors (issue 12, docs/protocol.md "Streamed tensors"): inputs and outputs larger than
one frame go in IN_CHUNK / OUT_CHUNK frames, straight into and out of the model's tensors.

First the real harness (firmware/core, host port) with the identity fixture model, 16 wide and
built with an 8-byte max_payload so both its 16 input bytes and its 68 output bytes stream (4
bytes a chunk):
frame by frame, against the Python model of the board's reassembly (protocol.InputStream), after
a restart mid-stream, and through BoardLink over a corrupting fault:// link. Then real models
made by the real converter: a 96x96x1 int8 CNN on the QEMU Cortex-M boards and the host board
(through faults and resets), a 16x16x2 float CNN on the micro:bit, and the linux agent, whose
streamed outputs come back too.
"""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
import tty

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quarl_edge import api
from quarl_edge.core.errors import QuarlError
from quarl_edge.link import protocol as P
from quarl_edge.link.runner import BoardLink
from quarl_edge.targets.boards import all_boards
from quarl_edge.targets.build import build as build_firmware
from quarl_edge.targets.launch import start
from helpers_models import convert, random_cnn
from helpers_harness import Board, assert_clean_exit, build, dequant

N = 16            # the identity model, this wide: int8 [1,N] in; float [1,N] + float [1,1] out
MAXP = 8          # IN_CHUNK: a u32 offset + 4 input bytes
CHUNK = MAXP - 4
IN_BYTES, OUT_BYTES = N, 4 * N + 4
IN_CHUNK, OUT_CHUNK = P.COMMANDS["IN_CHUNK"], P.COMMANDS["OUT_CHUNK"]


@pytest.fixture(scope="module")
def stream_builds(tmp_path_factory):
    d = tmp_path_factory.mktemp("stream-harness")
    flags = [f"-DQE_MAX_PAYLOAD={MAXP}u", "-DQE_INPUT_COPY_BYTES=0u", f"-DQE_IDENTITY_N={N}"]
    from helpers_harness import SAN_ENV, SANITIZE
    return {"plain": (build(d / "harness", flags), {}),
            "sanitized": (build(d / "harness_san", flags + SANITIZE), SAN_ENV),
            "one-frame": (build(d / "harness_1", ["-DQE_MAX_PAYLOAD=64u"]), {})}


@pytest.fixture(params=["plain", "sanitized"])
def sboard(stream_builds, request):
    exe, env = stream_builds[request.param]
    with Board(exe, env) as b:
        yield b


def in_chunk(b: Board, off: int, data: bytes) -> int:
    f = b.request(IN_CHUNK, struct.pack("<I", off) + bytes(data))
    assert f.cmd == IN_CHUNK | P.REPLY_BIT, f
    (received,) = struct.unpack("<I", f.payload)
    return received


def out_chunk(b: Board, off: int, n: int) -> bytes:
    f = b.request(OUT_CHUNK, struct.pack("<IH", off, n))
    assert f.cmd == OUT_CHUNK | P.REPLY_BIT, f
    assert struct.unpack_from("<I", f.payload)[0] == off and len(f.payload) == 4 + n
    return f.payload[4:]


def error_of(f: P.Frame) -> str:
    assert f.is_error, f
    return f.error()[0]


def xs(*head: int) -> list[int]:
    """An input of N values starting with `head`, the rest counting up."""
    return [*head, *range(len(head), N)]


def outputs(b: Board, chunk: int = 7) -> tuple[list[float], float]:
    out = b"".join(out_chunk(b, off, n) for off, n in P.chunk_spans(OUT_BYTES, chunk))
    *ys, total = struct.unpack(f"<{N + 1}f", out)
    return ys, total


def stream_infer(b: Board, x: list[int]) -> tuple[list[float], float]:
    data = struct.pack(f"<{N}b", *x)
    for off, n in P.chunk_spans(IN_BYTES, CHUNK):
        assert in_chunk(b, off, data[off:off + n]) == off + n
    f = b.request(P.COMMANDS["INFER"])
    assert f.cmd == 0x82 and len(f.payload) == 4, f      # the cost only: outputs stream
    return outputs(b)


def test_streamed_chunks_land_in_the_input_tensor_and_the_outputs_come_back(sboard):
    h = sboard.hello()
    assert h.max_payload == MAXP and P.streamed(IN_BYTES, MAXP) and P.streamed(OUT_BYTES, MAXP)
    ys, total = stream_infer(sboard, xs(-128, -3, 0, 127))
    assert ys == dequant(xs(-128, -3, 0, 127)) and total == -62.5
    ys, total = stream_infer(sboard, xs(1, 2, 3, 4))          # the model's running sum: 2 runs
    assert ys == dequant(xs(1, 2, 3, 4)) and total == -62.5 + 2.0
    assert_clean_exit(sboard)


def test_streamed_tensors_missing_are_not_ready_never_stale(sboard):
    sboard.hello()
    infer = P.COMMANDS["INFER"]
    assert error_of(sboard.request(infer)) == "NOT_READY"              # no chunk yet
    assert error_of(sboard.request(OUT_CHUNK, struct.pack("<IH", 0, 4))) == "NOT_READY"
    assert in_chunk(sboard, 0, b"\1\2\3\4") == 4
    assert error_of(sboard.request(infer)) == "NOT_READY"              # a quarter of the input
    # the single-frame INFER of a streamed model is refused at its header
    assert error_of(sboard.request(infer, b"\1\2\3\4")) == "BAD_PAYLOAD"
    assert error_of(sboard.request(IN_CHUNK, struct.pack("<I", N - 1) + b"\1\2")) == "BAD_PAYLOAD"
    stream_infer(sboard, xs(5, 6))
    assert in_chunk(sboard, 0, b"\1\2") == 2     # a chunk may overwrite the outputs: not ready
    assert error_of(sboard.request(OUT_CHUNK, struct.pack("<IH", 0, 4))) == "NOT_READY"
    stream_infer(sboard, xs(5, 6))
    assert sboard.request(P.COMMANDS["BENCH"], struct.pack("<H", 2)).cmd == 0x83
    assert error_of(sboard.request(OUT_CHUNK, struct.pack("<IH", 0, 4))) == "NOT_READY"
    stream_infer(sboard, xs(5, 6))
    assert error_of(sboard.request(OUT_CHUNK, struct.pack("<IH", OUT_BYTES - 4, 5))) == "BAD_PAYLOAD"
    assert_clean_exit(sboard)


def test_a_resent_chunk_is_answered_again(sboard):
    sboard.hello()
    x = struct.pack(f"<{N}b", *xs(5, 6, 7, 8))
    for off, n in P.chunk_spans(N - 4, CHUNK):
        assert in_chunk(sboard, off, x[off:off + n]) == off + n
    frame = P.encode_frame(IN_CHUNK, struct.pack("<I", N - 4) + x[N - 4:], 77)
    for _ in range(3):                                   # the host's retries of one chunk
        sboard.send(frame)
        f = sboard.frame()
        assert (f.cmd, f.seq, f.payload) == (IN_CHUNK | P.REPLY_BIT, 77, struct.pack("<I", N))
    f = sboard.request(P.COMMANDS["INFER"])
    assert f.cmd == 0x82
    assert outputs(sboard, 4)[0] == dequant(xs(5, 6, 7, 8))
    assert_clean_exit(sboard)


@given(st.lists(st.tuples(st.integers(0, N + 2), st.binary(min_size=0, max_size=CHUNK)),
                max_size=12),
       st.lists(st.integers(-128, 127), min_size=N, max_size=N))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_firmwares_reassembly_is_the_python_model(stream_builds, writes, x):
    """Chunks at any offsets, gaps, rewinds and chunks beyond the inputs: the C harness answers
    every one as protocol.InputStream does (the agent's), and after the rest is sent in order
    the model computes on exactly the reassembled bytes."""
    exe, env = stream_builds["plain"]
    with Board(exe, env) as b:
        b.hello()
        model = P.InputStream(bytearray(IN_BYTES))
        for off, data in writes:
            f = b.request(IN_CHUNK, struct.pack("<I", off) + data)
            try:
                want = model.write(off, data)
            except ValueError:
                assert error_of(f) == "BAD_PAYLOAD"
                continue
            assert f.cmd == IN_CHUNK | P.REPLY_BIT and struct.unpack("<I", f.payload)[0] == want
        rest = struct.pack(f"<{N}b", *x)
        for off, n in P.chunk_spans(IN_BYTES, CHUNK, model.received):
            assert in_chunk(b, off, rest[off:off + n]) == model.write(off, rest[off:off + n])
        assert model.complete
        assert b.request(P.COMMANDS["INFER"]).cmd == 0x82
        assert outputs(b)[0] == dequant(list(struct.unpack(f"<{N}b", bytes(model.buf))))
        assert_clean_exit(b)


FATES = st.lists(st.sampled_from(["ok", "lost", "twice", "stale"]), max_size=40)


@given(st.integers(1, 2000), st.integers(1, 300), FATES, st.data())
@settings(max_examples=200, deadline=None)
def test_chunking_and_reassembly_survive_loss_duplicates_and_stale_chunks(total, chunk, fates, data):
    """The host's chunking (chunk_spans, resume from the reply's `received`) against the board's
    reassembly (InputStream) when chunks are lost, arrive twice, or an old chunk arrives late
    (`fates`, one per frame sent, then all arrive): the board runs only on a complete input, a
    complete input is always the host's, and the host gets there."""
    payload = data.draw(st.binary(min_size=total, max_size=total))
    board = P.InputStream(bytearray(total))
    sent: list[tuple[int, bytes]] = []
    off, steps, n_chunks = 0, 0, len(P.chunk_spans(total, chunk))
    while off < total:
        fate = fates[steps] if steps < len(fates) else "ok"
        steps += 1
        assert steps <= len(fates) + (fates.count("stale") + 1) * n_chunks, "no progress"
        n = min(chunk, total - off)
        frame = (off, payload[off:off + n])
        sent.append(frame)
        if fate == "lost":       # the host times out and re-sends: the same chunk again
            continue
        received = board.write(*frame)
        if fate == "twice":
            received = board.write(*frame)
        if fate == "stale" and len(sent) > 1:   # an earlier chunk arrives late, then ours
            board.write(*data.draw(st.sampled_from(sent[:-1])))
            received = board.write(*frame)
        assert received <= off + n and (received == off + n or fate == "stale")
        off = received                            # resume where the board says it is
    assert board.complete and bytes(board.buf) == payload
    spans = P.chunk_spans(total, chunk)          # the plain, lossless schedule: contiguous
    assert [o for o, _ in spans] == list(range(0, total, chunk)) and sum(n for _, n in spans) == total


def test_chunk_spans_is_a_clear_error_for_an_empty_chunk():
    with pytest.raises(ValueError, match="at least one byte"):
        P.chunk_spans(10, 0)


def test_a_restart_mid_stream_loses_the_chunks_and_says_so(plain_stream):
    """A board restarted between two chunks (its announcement lost): the next chunk is not
    written (it would leave a gap), INFER and OUT_CHUNK are NOT_READY; nothing stale is used."""
    b = plain_stream
    b.hello()
    stream_infer(b, xs(9, 9))
    assert in_chunk(b, 0, b"\1\2\3\4") == 4
    os.kill(b.proc.pid, signal.SIGUSR1)
    b.expect_boot()                       # which a host that missed it never sees
    assert in_chunk(b, 4, b"\5\6\7\x08") == 0   # resume from 0, says the board
    assert error_of(b.request(P.COMMANDS["INFER"])) == "NOT_READY"
    assert error_of(b.request(OUT_CHUNK, struct.pack("<IH", 0, 4))) == "NOT_READY"
    ys, total = stream_infer(b, xs(1, 2, 3, 4))
    assert ys == dequant(xs(1, 2, 3, 4)) and total == ys[0]     # the model's state is fresh
    assert_clean_exit(b)


@pytest.fixture
def plain_stream(stream_builds):
    exe, env = stream_builds["plain"]
    with Board(exe, env) as b:
        yield b


def test_boardlink_streams_through_a_corrupting_link(stream_builds):
    """BoardLink against the streamed harness, 60 inferences through fault:// flipping 1 % of
    the bytes: every result is the model's, every chunk was retried until it got through, and
    each INFER is one cost."""
    exe, _ = stream_builds["plain"]
    master, slave = os.openpty()
    tty.setraw(slave)
    proc = subprocess.Popen([str(exe)], stdin=master, stdout=master, close_fds=True)
    os.close(master)
    try:
        url = f"fault://?flip=1e-2&seed=4&url={os.ttyname(slave)}"
        with BoardLink(url, alive=lambda: proc.poll() is None) as link:
            link.hello(10)
            rng = np.random.default_rng(1)
            costs = []
            for _ in range(60):
                x = rng.integers(-128, 128, size=(1, N), dtype=np.int8)
                (y, _total), cost = link.infer([x])
                assert y.ravel().tolist() == dequant(x.ravel().tolist())
                costs.append(cost)
            report = link.report()
        assert len(costs) == 60 and all(c > 0 for c in costs)
        assert report["chunks"] == 60 * (N // CHUNK + OUT_BYTES // CHUNK)    # 4 in, 17 out
        assert report["retries"] > 0 and report["faults"]["flipped"] > 20
    finally:
        proc.terminate()
        proc.wait(5)
        os.close(slave)


def test_a_model_that_fits_one_frame_keeps_the_single_frame_infer(stream_builds):
    """The default identity model (4 B in, 20 B out) on a 64-byte max_payload: one INFER frame
    each way per step, byte for byte as in protocol v2 (HIL speed), no chunk."""
    exe, _ = stream_builds["one-frame"]
    master, slave = os.openpty()
    tty.setraw(slave)
    proc = subprocess.Popen([str(exe)], stdin=master, stdout=master, close_fds=True)
    os.close(master)
    try:
        with BoardLink(os.ttyname(slave), alive=lambda: proc.poll() is None) as link:
            link.hello(10)
            sizes, write = [], link.ser.write
            link.ser.write = lambda data: (sizes.append(len(data)), write(data))[1]
            for v in range(1, 6):    # (an all-zero input would go zero-run coded: INFER_Z)
                (y, _), _ = link.infer([np.full((1, 4), v, np.int8)])
                assert y.ravel().tolist() == dequant([v] * 4)
            assert sizes == [len(P.encode_frame(P.COMMANDS["INFER"], bytes(4)))] * 5 == [15] * 5
            assert link.stats["chunks"] == 0
    finally:
        proc.terminate()
        proc.wait(5)
        os.close(slave)


# ------------------------------------------------------------------ real models, real boards
@pytest.fixture(scope="module")
def cnns(tmp_path_factory):
    """A 96x96x1 int8 CNN (int8 in and out: 9,216 input bytes, conv 3x3/2 -> depthwise 3x3 ->
    conv 1x1 -> mean -> dense) and a 16x16x2 float CNN (2,048 input bytes; no softmax head:
    its expf differs from TF Lite Micro's by an ulp, which is not the link's business)."""
    d = tmp_path_factory.mktemp("cnns")
    rng = np.random.default_rng(0)
    big = d / "cnn96_int8.tflite"
    big.write_bytes(convert(random_cnn(7, (96, 96, 1), pool="gap", pointwise=8, hidden=16),
                            "int8_io", rng.uniform(-1, 1, (32, 96, 96, 1))))
    small = d / "cnn16_float.tflite"
    small.write_bytes(convert(random_cnn(8, (16, 16, 2), pool="max", head=None), "float"))
    return {"big": big, "float": small}


@pytest.mark.parametrize("board,n", [("mps2-an386", 20), ("lm3s6965evb", 10)])
def test_a_96x96_int8_cnn_validates_bit_exact(cnns, board, n, tmp_path):
    res = api.validate(cnns["big"], board, random=n, out=tmp_path)
    assert res.bit_exact and res.n == n
    assert res.latency.n == n                    # one cost per INFER, not per chunk
    # each chunk counted once, however often a busy machine's slow emulator made us re-send it
    assert res.link["chunks"] == n * 9216 // 256, res.link
    assert res.memory["ram_bytes"] <= all_boards()[board].ram_bytes


def test_a_model_too_big_for_the_boards_ram_is_refused_with_the_numbers(cnns, tmp_path):
    """The 96x96 CNN's 36,864-byte arena on the micro:bit's 16 KiB: no longer a frame limit,
    the RAM says no, with the numbers."""
    with pytest.raises(QuarlError, match=r"does not fit the board's memory .*RAM.* overflowed by "
                                         r"\d+ bytes.*arena takes 36864 B.* 16384 B of RAM"):
        build_firmware(cnns["big"], all_boards()["microbit"], tmp_path)


def test_a_16x16x2_float_cnn_validates_bit_exact_on_the_microbit(cnns, tmp_path):
    res = api.validate(cnns["float"], "microbit", random=20, out=tmp_path)
    assert res.bit_exact and res.n == 20 and res.latency.n == 20
    assert res.link["chunks"] == 20 * -(-2048 // 252)   # 252 B a chunk: max_payload 256 - offset
    assert res.memory["ram_bytes"] <= 16384


def test_a_big_input_model_validates_through_faults_and_resets_on_the_host_board(cnns, tmp_path):
    board = all_boards()["host"]
    fw = build_firmware(cnns["big"], board, tmp_path / "fw")
    with start(board, fw.elf) as r:
        time.sleep(0.5)
        url = (f"fault://?flip=1e-3&seed=3&reset={r.reset_handle}&reset_at=150,500"
               f"&url={r.url}")
        res = api.validate(cnns["big"], "host", random=20, port=url, out=tmp_path)
    assert res.bit_exact and res.n == 20 and res.latency.n == 20
    link = res.link
    assert link["retries"] > 0 and link["faults"]["flipped"] > 100
    assert link["faults"]["resets"] == 2 and link["resets"] >= 1    # detected mid-stream


def test_the_agent_streams_inputs_and_outputs(tmp_path):
    """The linux agent (tflite-runtime): a float conv whose 96x96x1 input (36,864 B) and
    96x96x2 output (73,728 B) both stream, through a corrupting link: exactly tflite-runtime's."""
    import tensorflow as tf
    from quarl_edge.measure.reference import TFLiteRuntime
    tf.keras.utils.set_random_seed(3)
    inp = tf.keras.Input((96, 96, 1))
    model = tmp_path / "conv.tflite"
    model.write_bytes(convert(tf.keras.Model(inp, tf.keras.layers.Conv2D(2, 3, padding="same")(inp)),
                              "float"))
    master, slave = os.openpty()
    tty.setraw(slave)
    proc = subprocess.Popen([sys.executable, "-m", "quarl_edge.link.agent", str(model), "--stdio"],
                            stdin=master, stdout=master)
    os.close(master)
    try:
        with BoardLink(f"fault://?flip=1e-3&seed=6&url={os.ttyname(slave)}",
                       alive=lambda: proc.poll() is None) as link:
            link.hello(30)
            ref = TFLiteRuntime(model)
            rng = np.random.default_rng(2)
            for _ in range(3):
                x = rng.normal(size=(1, 96, 96, 1)).astype(np.float32)
                (y,), cost = link.infer([x])
                assert cost > 0 and y.tobytes() == ref.run([x])[0].tobytes()
            report = link.report()
        assert report["chunks"] == 3 * (36864 // 256 + 73728 // 256)
        assert report["retries"] > 0
    finally:
        proc.terminate()
        proc.wait(5)
        os.close(slave)
