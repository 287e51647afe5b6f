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

from quarl_edge.link import protocol as P
from quarl_edge.link.agent import Agent
from quarl_edge.core.errors import BoardError, QuarlError
from quarl_edge.link.session import model_hash
from quarl_edge.measure.reference import TFLiteRuntime
from quarl_edge.link.runner import BoardLink

MODELS = Path(__file__).resolve().parents[1] / "examples" / "cartpole_dqn" / "models"


@pytest.fixture(scope="module")
def agent_link(tmp_path_factory):
    model = tmp_path_factory.mktemp("m") / "int8.tflite"
    shutil.copy(MODELS / "int8.tflite", model)
    master, slave = os.openpty()
    tty.setraw(slave)
    proc = subprocess.Popen([sys.executable, "-m", "quarl_edge.link.agent", str(model), "--stdio"],
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
    (P.SYNC + bytes([P.VERSION]) + b"\x02\x07\x04\x00abcd\x00\x00", "BAD_CRC"),
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
    out = agent.feed(P.encode_frame(0x42, b"", 5) + P.SYNC + bytes([P.VERSION]) + b"\x02\x07\xff\xff")
    frames = P.FrameDecoder().feed(out)
    assert [(f.cmd, f.payload[0]) for f in frames] == [(P.CMD_ERROR, 3), (P.CMD_ERROR, 2)]
    assert agent.feed(P.encode_frame(0x81, b"", 1)) == b""      # replies are never answered


def test_tcp_transport(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "quarl_edge.link.agent", str(MODELS / "fp32.tflite"),
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
    h = cli("hil", run, "--scheme", "int8", "--board", "linux-tflite", "--episodes", "2", "--json")
    assert h["mean_return"] == h["tflite_mean_return"]


def test_ssh_deploy_commands_are_argument_lists_that_start_the_agent(tmp_path):
    from quarl_edge.targets.boards import get_board
    import quarl_edge.converters
    from quarl_edge.targets.launch import AGENT_FILES, ssh_deploy_commands
    board = get_board("linux-tflite")
    cmds, url = ssh_deploy_commands(board, MODELS / "int8.tflite", "pi@raspberrypi.local")
    assert url == "socket://raspberrypi.local:5555"
    assert all(isinstance(c, list) and c[0] in ("ssh", "scp") for c in cmds)
    # quarl_edge's files from its package, the tensor spec from quarl_edge.converters (quarl_edge/converters/)
    homes = {"": Path(quarl_edge.__file__).resolve().parent,
             "converters/": Path(quarl_edge.converters.__file__).resolve().parent}
    copied = {}
    for c in (c for c in cmds if c[0] == "scp" and not c[-1].endswith("model.tflite")):
        for a in c[2:-1]:
            if not a.startswith("-") and Path(a).is_absolute():
                home = max((h for h in homes if Path(a).is_relative_to(homes[h])), key=len)
                copied[home + str(Path(a).relative_to(homes[home]))] = c[-1]
    assert set(copied) == set(AGENT_FILES) >= {"link/protocol.py", "converters/tensor.py"}
    for name in AGENT_FILES:   # each file lands in its package directory on the board
        assert copied[name] == f"pi@raspberrypi.local:quarl-edge-agent/quarl_edge/{Path(name).parent}/"
    assert any(a.endswith("int8.tflite") for c in cmds if c[0] == "scp" for a in c)
    assert "python3 -m quarl_edge.link.agent model.tflite --tcp 0.0.0.0:5555" in cmds[-1][-1]
    assert all("BatchMode=yes" in c for c in cmds)           # never a password prompt
    cmds, url = ssh_deploy_commands(board, MODELS / "int8.tflite", "pi@10.0.0.7:2222",
                                    ["IdentityFile=/k"])
    assert url == "socket://10.0.0.7:5555"
    assert cmds[0][cmds[0].index("-p") + 1] == "2222" and cmds[1][cmds[1].index("-P") + 1] == "2222"
    assert all(c[c.index("IdentityFile=/k") - 1] == "-o" for c in cmds)
    with pytest.raises(QuarlError, match="USER@HOST:PORT"):
        ssh_deploy_commands(board, MODELS / "int8.tflite", "pi@host:ssh")
    import dataclasses       # the board file's remote_dir: plain path characters only
    elsewhere = dataclasses.replace(board, connect={**board.connect, "remote_dir": "/opt/qe"})
    cmds, _ = ssh_deploy_commands(elsewhere, MODELS / "int8.tflite", "pi@pi")
    assert cmds[-2][-1] == "pi@pi:/opt/qe/model.tflite" and cmds[-1][-1].startswith("cd /opt/qe ")
    for bad in ("a b", "x;rm -rf ~", "../up", "$(id)"):
        hostile = dataclasses.replace(board, connect={**board.connect, "remote_dir": bad})
        with pytest.raises(QuarlError, match="remote_dir"):
            ssh_deploy_commands(hostile, MODELS / "int8.tflite", "pi@pi")


# ------------------------------------------------------- a real SSH deploy to this machine
SSHD = Path("/usr/sbin/sshd")


@pytest.fixture
def sshd(tmp_path):
    """A real OpenSSH server on a free localhost port, key authentication for this user only,
    its own host key and config (the machine's sshd, if any, is untouched)."""
    import getpass
    import os
    import socket
    import subprocess
    import time
    if not SSHD.is_file() or os.geteuid() != 0:
        pytest.skip("needs openssh-server (scripts/setup.sh installs it) and root to run sshd")
    d = tmp_path / "ssh"
    d.mkdir(mode=0o700)
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\n"
        f"KbdInteractiveAuthentication no\nPidFile {d / 'sshd.pid'}\nUsePAM no\n"
        f"StrictModes no\nAllowUsers {getpass.getuser()}\n"
        "Subsystem sftp /usr/lib/openssh/sftp-server\n")   # today's scp speaks SFTP
    os.makedirs("/run/sshd", exist_ok=True)   # sshd's privilege-separation directory
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(d / "sshd_config")],
                            stderr=subprocess.PIPE)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    opts = [f"IdentityFile={d / 'client_key'}", f"UserKnownHostsFile={d / 'known_hosts'}",
            "StrictHostKeyChecking=accept-new"]
    yield f"{getpass.getuser()}@127.0.0.1:{port}", opts
    proc.terminate()
    proc.wait(timeout=10)


def test_ssh_deploy_to_a_real_sshd_then_validate_over_tcp(sshd, tmp_path):
    """The linux board's one-command deploy through a real ssh/scp/sshd: the agent files and
    the model land in the remote home, the agent starts with the board's python and answers
    on TCP; validate then runs bit-exact against it through that port."""
    import dataclasses
    import socket
    import subprocess
    from quarl_edge.targets.boards import get_board
    from quarl_edge.targets.launch import ssh_deploy
    from quarl_edge.measure.validate import validate
    target, opts = sshd
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        agent_port = s.getsockname()[1]
    base = get_board("linux-tflite")
    # the "board" is this machine: its agent runs under this venv's python (tflite-runtime),
    # from a folder of this test's own (two test runs at once, e.g. two Pythons, do not clash)
    remote = tmp_path / "remote"
    board = dataclasses.replace(base, connect={**base.connect, "tcp_port": agent_port,
                                               "python": sys.executable,
                                               "remote_dir": str(remote)})
    try:
        url = ssh_deploy(board, MODELS / "int8.tflite", target, opts)
        assert url == f"socket://127.0.0.1:{agent_port}"
        res = validate(MODELS / "int8.tflite", board, tmp_path / "build", random_n=50, port=url)
        assert res["bit_exact"] and res["n"] == 50 and res["board"] == "linux-tflite"
    finally:
        assert (remote / "model.tflite").read_bytes() == (MODELS / "int8.tflite").read_bytes()
        pid = remote / "agent.pid"                          # what the deploy wrote
        subprocess.run(["kill", pid.read_text().strip()] if pid.is_file() else ["true"])
    # a board whose python lacks the agent's packages: the deploy fails with the agent's log
    broken = dataclasses.replace(board, connect={**board.connect, "python": "/bin/false"})
    with pytest.raises(BoardError, match="not listening"):
        ssh_deploy(broken, MODELS / "int8.tflite", target, opts, wait_s=3)
    # wrong key: ssh refuses, and we say where
    with pytest.raises(BoardError, match="deploying to .* failed at `ssh"):
        ssh_deploy(board, MODELS / "int8.tflite", target,
                   [f"IdentityFile={tmp_path / 'nokey'}", *opts[1:]])
