"""The linux-tflite agent: the protocol of the firmware, answered by tflite-runtime, tested
through the same BoardLink over a real pty, and over TCP."""
import os
import shutil
import socket
import subprocess
import sys
import time
import tty
from pathlib import Path

import numpy as np
import pytest

from quarl_edge import protocol as P
from quarl_edge.agent import Agent
from quarl_edge.launch import model_hash
from quarl_edge.reference import TFLiteRuntime
from quarl_edge.runner import BoardLink

MODELS = Path(__file__).resolve().parents[1] / "examples" / "cartpole_dqn" / "models"


@pytest.fixture(scope="module")
def agent_link(tmp_path_factory):
    model = tmp_path_factory.mktemp("m") / "int8.tflite"
    shutil.copy(MODELS / "int8.tflite", model)
    master, slave = os.openpty()
    tty.setraw(slave)
    proc = subprocess.Popen([sys.executable, "-m", "quarl_edge.agent", str(model), "--stdio"],
                            stdin=master, stdout=master)
    os.close(master)
    link = BoardLink(os.ttyname(slave), alive=lambda: proc.poll() is None)
    link.hello(total_timeout=30)
    yield link, model
    link.close()
    proc.terminate()
    proc.wait(5)
    os.close(slave)


def test_hello_describes_the_model(agent_link):
    link, model = agent_link
    info = link.info
    assert info.board_id == "linux-tflite" and info.cost_unit == "ns"
    assert info.model_hash == model_hash(model)
    assert info.inputs[0].dtype == "float32" and info.inputs[0].shape == (1, 4)
    assert info.outputs[0].shape == (1, 2)


def test_infer_equals_tflite_runtime(agent_link):
    link, model = agent_link
    ref = TFLiteRuntime(model)
    rng = np.random.default_rng(0)
    for _ in range(50):
        x = rng.normal(size=(1, 4)).astype(np.float32)
        (y,), cost = link.infer([x])
        assert cost > 0
        assert y.tobytes() == ref.run([x])[0].tobytes()


def test_bench_mem_echo(agent_link):
    link, _ = agent_link
    b = link.bench(20)
    assert b.n == 20 and 0 < b.min <= b.mean <= b.max
    m = link.mem()
    assert m.flash_bytes == (MODELS / "int8.tflite").stat().st_size and m.ram_bytes > 0
    assert link.echo(b"\x00\xa5\x5a") == b"\x00\xa5\x5a"


def raw_exchange(link, data: bytes, want: int, timeout: float = 5.0) -> list:
    link.ser.write(data)
    frames, deadline = [], time.monotonic() + timeout
    while len(frames) < want and time.monotonic() < deadline:
        frames += link._read_frames()
    return frames


@pytest.mark.parametrize("data, error", [
    (P.encode_frame(0x33, b"", 200), "UNKNOWN_CMD"),
    (b"\xa5\x5a\x01\x02\x07\x04\x00abcd\x00\x00", "BAD_CRC"),
    (P.encode_frame(P.COMMANDS["HELLO"], b"1234", 9, version=9), "BAD_VERSION"),
    (P.encode_frame(P.COMMANDS["INFER"], b"\x00" * 3, 10), "BAD_PAYLOAD"),
    (P.encode_frame(P.COMMANDS["BENCH"], b"\x00\x00", 11), "BAD_PAYLOAD"),
])
def test_bad_frames_get_error_frames_and_the_agent_survives(agent_link, data, error):
    link, _ = agent_link
    (f,) = raw_exchange(link, b"noise" + data, want=1)
    assert f.is_error and f.error()[0] == error
    link.hello(total_timeout=5)       # still answers


def test_agent_unit_errors_without_transport():
    agent = Agent(MODELS / "fp32.tflite")
    out = agent.feed(P.encode_frame(0x42, b"", 5) + b"\xa5\x5a\x01\x02\x07\xff\xff")
    frames = P.FrameDecoder().feed(out)
    assert [(f.cmd, f.payload[0]) for f in frames] == [(P.CMD_ERROR, 3), (P.CMD_ERROR, 2)]
    assert agent.feed(P.encode_frame(0x81, b"", 1)) == b""      # replies are never answered


def test_tcp_transport(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "quarl_edge.agent", str(MODELS / "fp32.tflite"),
                             "--tcp", f"127.0.0.1:{port}"], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        with BoardLink(f"socket://127.0.0.1:{port}") as link:
            info = link.hello(total_timeout=10)
            assert info.outputs[0].dtype == "float32"
            (y,), _ = link.infer([np.zeros((1, 4), np.float32)])
            assert y.shape == (1, 2)
    finally:
        proc.terminate()
        proc.wait(5)


def test_linux_board_validate_and_hil_through_the_cli(tmp_path):
    import json
    run = tmp_path / "run"
    shutil.copytree(MODELS.parent, run, ignore=shutil.ignore_patterns("build", "results"))
    def cli(*args):
        p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", *map(str, args)],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        return json.loads(p.stdout)
    v = cli("validate", run / "models" / "int8.tflite", "--board", "linux-tflite", "--random", "50",
            "--json")
    # tflite-runtime's int8 kernels vs TF Lite Micro's: the same reference arithmetic
    assert v["board"] == "linux-tflite" and v["bit_exact"] is True and v["latency"]["unit"] == "ns"
    h = cli("hil", run, "--model", "int8", "--board", "linux-tflite", "--episodes", "2", "--json")
    assert h["mean_return"] == h["host_mean_return"]


def test_ssh_deploy_commands_are_argument_lists_that_start_the_agent(tmp_path):
    from quarl_edge.boards import get_board
    from quarl_edge.launch import AGENT_FILES, ssh_deploy_commands
    board = get_board("linux-tflite")
    cmds, url = ssh_deploy_commands(board, MODELS / "int8.tflite", "pi@raspberrypi.local")
    assert url == "socket://raspberrypi.local:5555"
    assert all(isinstance(c, list) and c[0] in ("ssh", "scp") for c in cmds)
    copied = [Path(a).name for c in cmds if c[0] == "scp" for a in c[2:-1]]
    assert set(AGENT_FILES) <= set(copied) and "int8.tflite" in copied
    for name in AGENT_FILES:   # every file the agent imports exists and is what we copy
        assert (Path(__file__).resolve().parents[1] / "quarl_edge" / name).is_file()
    assert "quarl_edge.agent model.tflite --tcp 0.0.0.0:5555" in cmds[-1][-1]
