"""The study on a real two-node Ray cluster with a board farm: only one node advertises
board:host, so every board cell must run there; one worker process is killed (SIGKILL) in the
middle of a board cell, Ray retries the task, and the results file ends with every row once.

No training: the run directory is the shipped example run, laid out as the study's cached run
(OUT/runs/<algo>-<env>-s<seed> with the training spec the study would write), so the study
reuses it. The cluster binds to the loopback address only."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the ray extra (pip install -e '.[ray]'; "
                                        "scripts/setup.sh installs it)")

from helpers_models import cached_example_study  # noqa: E402
from quarl_edge.study.config import load_study  # noqa: E402
from quarl_edge.study.farm import RAY_PIN, farm_resources, ray_start_command  # noqa: E402
from quarl_edge.study.plan import plan  # noqa: E402
from quarl_edge.study.results import read_results, row_key  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCHEMES = ["fp32", "int8", "int16x8"]     # cached_example_study's


@pytest.fixture(scope="module")
def cluster():
    """A head node without boards and a worker node with board:host, one CPU each."""
    from ray.cluster_utils import Cluster
    mp = pytest.MonkeyPatch()
    # every Ray address on the loopback interface (Ray otherwise picks the machine's IP)
    mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    mp.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    small = {"object_store_memory": 80 * 1024 ** 2}
    c = Cluster(initialize_head=True,
                head_node_args={"num_cpus": 1, "include_dashboard": False, **small})
    worker = c.add_node(num_cpus=1, resources={"board:host": 1}, **small)
    c.wait_for_nodes()
    try:
        yield c, c.head_node.node_id, worker.node_id
    finally:
        c.shutdown()
        mp.undo()


def _board_workers() -> list[int]:
    """Pids of the Ray worker processes running a board cell now (Ray titles a busy worker
    ray::<function name>)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_bytes().startswith(b"ray::_ray_board"):
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


@pytest.mark.long
def test_board_cells_run_on_the_board_node_and_a_killed_worker_loses_and_repeats_nothing(
        cluster, tmp_path):
    c, head_id, board_node = cluster
    out = tmp_path / "out"
    cfg = cached_example_study(out, ["host"])
    expected = {k for g in plan(load_study(cfg)) for k in g.keys}
    assert len(expected) == 1 + 2 * len(SCHEMES)      # the run, its host cells, its board cells
    results = out / "results.jsonl"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    log = (tmp_path / "study.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "quarl_edge.cli", "study", str(cfg), "--out",
                             str(out), "--resume", "--ray", c.address, "--json"],
                            stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=ROOT)
    killed = None
    try:
        deadline = time.time() + 240
        while killed is None and time.time() < deadline and proc.poll() is None:
            pids = _board_workers()
            if pids:
                time.sleep(1.0)              # into the cell: building, benching, playing
                if pids[0] in _board_workers():
                    os.kill(pids[0], signal.SIGKILL)
                    killed = pids[0]
            time.sleep(0.1)
        stdout, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    stderr = (tmp_path / "study.log").read_text()
    assert killed is not None, "no board cell was seen running: " + stderr[-2000:]
    assert proc.returncode == 0, stderr[-3000:]
    summary = json.loads(stdout)
    assert summary["status"] == {"ok": len(expected)}, summary

    rows = read_results(results)
    keys = [row_key(r) for r in rows]
    assert len(keys) == len(set(keys)), "a row was written twice"
    assert set(keys) == expected, "a row is missing"
    boards = [r for r in rows if r["kind"] == "board"]
    assert {r["scheme"] for r in boards} == set(SCHEMES)
    # every board cell ran on the node that advertises board:host, none on the head
    assert {r["node"] for r in boards} == {board_node} != {head_id}
    # the killed worker's cell was run again by another worker process: no row came from it
    assert killed not in {r["pid"] for r in rows}
    # the rows are the board's measurements
    for r in boards:
        assert r["status"] == "ok" and r["unit"] == "ns" and r["cost_mean"] > 0
        assert r["matches_reference"] is True and r["bit_exact"] is True
        assert r["validate"]["n"] == 32 and r["validate"]["classes"]["mismatch"] == 0
        assert r["episodes"] == 3 and len(r["returns"]) == 3
        assert r["flash_bytes"] > 0 and r["arena_bytes"] > 0 and r["stack_bytes"] > 0
        assert r["us_per_inference"] == pytest.approx(r["cost_mean"] / 1000)
    cells = {r["scheme"]: r for r in rows if r["kind"] == "cell"}
    for r in boards:   # the board returns the host's tflite-runtime returns on these seeds
        assert r["mean_return"] == pytest.approx(r["tflite_mean_return"])
        assert r["fp32_mean_return"] == pytest.approx(cells["fp32"]["mean_return"])

    # resuming the finished study on the cluster does nothing
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "study", str(cfg), "--out",
                        str(out), "--resume", "--ray", c.address, "--json"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert len(read_results(results)) == len(rows)


def test_farm_resources_and_the_ray_start_command():
    res = farm_resources(instances=3, real=False)
    assert res["board:host"] == 3                     # gcc is installed wherever tests run
    assert all(k.startswith("board:") for k in res)
    cmd = ray_start_command(res, address="head.lab:6379", num_cpus=2)
    assert cmd[1:3] == ["start", "--address=head.lab:6379"] and "--num-cpus=2" in cmd
    assert json.loads(cmd[-1].split("=", 1)[1]) == res
    assert ray_start_command({}, head=True)[2:4] == ["--head", "--port=6379"]
    assert ray.__version__ == RAY_PIN.split("==")[1]


def test_farm_node_bad_input_is_one_line(tmp_path):
    for args, msg in ((["--head-node", "--resources", "{bad"], "--resources must be a JSON object"),
                      (["--head-node", "--resources", '{"board:x": -1}'], "counts >= 0")):
        p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "farm-node", *args,
                            "--print"], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert p.returncode == 2 and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_study_ray_address_that_does_not_answer_is_one_line(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text('[study]\nname = "t"\nepisodes = 2\nboards = ["host"]\n[[task]]\n'
                   'algo = "dqn"\nenv = "CartPole-v1"\nsteps = 100\n')
    for address, msg in (("127.0.0.1:1", "no Ray cluster answers at 127.0.0.1:1"),
                         ("nonsense", "--ray takes the head's HOST:PORT")):
        p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "study", str(cfg), "--out",
                            str(tmp_path / "out"), "--ray", address], capture_output=True,
                           text=True, cwd=ROOT, timeout=120)
        assert p.returncode == 2 and msg in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_farm_node_auth_says_where_the_token_is_and_makes_it_once(tmp_path, monkeypatch):
    """The head makes its token file (owner only, 256 random bits) when there is none and
    keeps it; a joining node without the head's token is refused, naming where it looked;
    --print makes nothing; RAY_AUTH_MODE=disabled is the user's explicit choice."""
    from quarl_edge.core.errors import QuarlError
    from quarl_edge.study.farm import ray_auth
    monkeypatch.setenv("HOME", str(tmp_path))
    for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(k, raising=False)
    token = tmp_path / ".ray" / "auth_token"
    assert ray_auth(head=True, dry_run=True) == ({"RAY_AUTH_MODE": "token"},
                                                 {"mode": "token", "token": str(token)})
    assert not token.exists()
    with pytest.raises(QuarlError, match=f"no Ray token at {token}: copy the head's"):
        ray_auth(head=False)
    env, auth = ray_auth(head=True)
    assert env == {"RAY_AUTH_MODE": "token"} and auth["token"] == str(token)
    first = token.read_text()
    assert len(bytes.fromhex(first)) == 32 and token.stat().st_mode & 0o777 == 0o600
    ray_auth(head=True)
    assert token.read_text() == first                        # kept, not made again
    assert ray_auth(head=False)[1]["token"] == str(token)    # a node on the same machine
    monkeypatch.setenv("RAY_AUTH_TOKEN", "x" * 64)
    assert ray_auth(head=False)[1] == {"mode": "token", "token": "$RAY_AUTH_TOKEN"}
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert ray_auth(head=True) == ({}, {"mode": "disabled", "token": None})


@pytest.mark.long
def test_a_farm_head_asks_for_its_token(tmp_path):
    """`farm-node --head` with no token anywhere: it makes one, says where (never the token
    itself), and the head it starts refuses a driver without the token and takes one with
    it. The node's processes are stopped by their marker (not `ray stop`: other users' too)."""
    from test_ray_sim import LOOPBACK, MARKER, _free_port, _stop
    import tempfile
    home = tmp_path / "home"
    temp = Path(tempfile.mkdtemp(prefix="qe-ray-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update({"HOME": str(home), MARKER: temp.name, "PYTHONPATH": str(ROOT)})
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    port = _free_port()
    head = [sys.executable, "-m", "quarl_edge.cli", "farm-node", "--head-node", "--ray-port",
            str(port), "--num-cpus", "1", "--", f"--temp-dir={temp}", "--disable-usage-stats",
            f"--node-ip-address={LOOPBACK}", f"--object-store-memory={80 * 1024 ** 2}",
            "--dashboard-agent-listen-port=0", "--min-worker-port=0", "--max-worker-port=0",
            "--include-dashboard=false", f"--ray-client-server-port={_free_port()}"]
    probe = ("import ray; ray.init(address=%r, log_to_driver=False); "
             "print('connected', ray.cluster_resources().get('CPU'))" % f"{LOOPBACK}:{port}")
    try:
        p = subprocess.run(head, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        token = home / ".ray" / "auth_token"
        assert f"Ray token authentication: the token is in {token}" in p.stderr
        assert token.read_text() not in p.stdout + p.stderr
        without = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                 env={**env, "HOME": str(tmp_path / "elsewhere")}, cwd=ROOT,
                                 timeout=120)
        assert without.returncode != 0 and "connected" not in without.stdout, without.stdout
        assert "authentication" in without.stderr.lower(), without.stderr[-2000:]
        with_token = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                                    text=True, env={**env, "RAY_AUTH_MODE": "token"}, cwd=ROOT,
                                    timeout=120)
        assert with_token.returncode == 0, with_token.stderr[-3000:]
        assert "connected 1.0" in with_token.stdout
        cfg = tmp_path / "s.toml"
        cfg.write_text('[study]\nname = "t"\nepisodes = 2\n[[task]]\nalgo = "dqn"\n'
                       'env = "CartPole-v1"\nsteps = 100\n')
        study = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "study", str(cfg),
                                "--out", str(tmp_path / "out"), "--ray", f"{LOOPBACK}:{port}"],
                               capture_output=True, text=True, cwd=ROOT, timeout=300,
                               env={**env, "HOME": str(tmp_path / "elsewhere")})
        assert study.returncode == 2, study.stderr[-3000:]
        assert study.stderr.strip().splitlines()[-1].startswith(
            f"quarl-edge: error: the Ray cluster at {LOOPBACK}:{port} refuses this study: its "
            "token is missing or wrong (RAY_AUTH_MODE is not set); export RAY_AUTH_MODE=token")
    finally:
        # 5 s for SIGTERM, not _stop's 15: a process of the head outlived SIGTERM for the
        # whole 15 s here (the test spent them waiting); this throwaway head may be SIGKILLed
        left = _stop(temp.name, grace_s=5.0)
        subprocess.run(["rm", "-rf", str(temp)])
        assert not left, f"processes of the head still running: {left}"
