"""A simulated 4-node Ray farm on this machine: the same small study on a cluster of real
`ray start` processes (a head and four workers started with `quarl-edge farm-node`, each with a
fake CPU count and its own board resources) and on the local process pool gives the same rows.

No training: the run directory is the shipped example run, laid out as the study's cached run
(helpers_models.cached_example_study), so both sides quantize, evaluate and run the board cells
of the same network. Every node's address is the loopback address 127.0.0.2 (LOOPBACK): `ray
start` turns 127.0.0.1 (and localhost) into the machine's IP, in --address and in
--node-ip-address, unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, and with that variable it refuses
to start a worker node ("Multi-node Ray clusters are not supported on Windows and OSX"). Ray's
servers then listen on all interfaces (it binds to 127.0.0.1 only for a node whose address is
127.0.0.1), so the cluster asks for a token (RAY_AUTH_MODE=token, a random RAY_AUTH_TOKEN in
the environment of the nodes and of the study). Every
process of the cluster carries a marker in its environment and is stopped by its pid at the end,
even when the test fails: `ray stop` would stop every Ray node of the machine, other users' too.

`make ray-sim` runs it (marker `slow`: 224-231 s on a busy 2-core machine).
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the ray extra (pip install -e '.[ray]'; "
                                        "scripts/setup.sh installs it)")

from helpers_models import cached_example_study  # noqa: E402
from quarl_edge.study.farm import farm_resources  # noqa: E402
from quarl_edge.study.results import read_results, row_key  # noqa: E402
from quarl_edge.targets.boards import get_board  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCHEMES = ["fp32", "int8", "int16x8"]
BOARDS = ["host", "mps2-an386"]
MARKER = "QE_RAY_SIM"        # in the environment of every process of the simulated cluster

# The worker nodes: (fake CPU count, the boards it advertises, one instance each). board:host on
# two nodes, the emulated mps2-an386 on one, a big node with no board at all.
WORKERS = [(2, ["host"]), (4, ["host"]), (1, ["mps2-an386"]), (8, [])]
HEAD_CPUS = 1                 # the head advertises no board
LOOPBACK = "127.0.0.2"        # every node's address (see above: not 127.0.0.1)

# Fields that say where, when or how long, not what was measured: not compared.
WHERE_WHEN = {
    "time": "the writer's timestamp when the row was written",
    "node": "the Ray node id of the task (None in the local pool)",
    "host": "the machine's name",
    "pid": "the process that made the row",
    "seconds": "a cell's wall time",
    "wall_seconds": "the run row's wall time of loading (or training) the run",
}
# A host-board cell's cost is the native build's wall clock (unit "ns"): not compared there.
# Cells of emulated boards count instructions (QEMU -icount), which are compared.
WALL_CLOCK_COST = {
    "cost_first": "ns by the host's clock: the first inference",
    "cost_mean": "ns by the host's clock: the mean over bench_n",
    "cost_min": "ns by the host's clock",
    "cost_max": "ns by the host's clock",
    "us_per_inference": "cost_mean / 1000 on the host",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))          # Ray's servers listen on every interface
        return s.getsockname()[1]


def _procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every process but the zombies (exited, not yet
    reaped by init)."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] != "Z":
                    out[int(d.name)] = (int(fields[1]), fields[19])
            except (OSError, IndexError, ValueError):
                pass
    return out


def _cluster_pids(tag: str) -> dict[int, str]:
    """pid -> start time of the processes of this cluster: those whose environment holds
    MARKER=tag, and their descendants (a Ray agent or worker that sets its process title
    overwrites its environment's memory, so its marker is gone from /proc/PID/environ)."""
    want = f"{MARKER}={tag}".encode()
    procs = _procs()
    found = set()
    for pid in procs:
        if pid != os.getpid():
            try:
                if want in (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0"):
                    found.add(pid)
            except OSError:
                pass
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return {pid: procs[pid][1] for pid in found}


def _stop(tag: str, grace_s: float = 15.0) -> list[int]:
    """SIGTERM every process of the cluster, then SIGKILL what is left after grace_s (a
    process seen before keeps being ours while its pid has the same start time); returns the
    pids still there."""
    seen = _cluster_pids(tag)

    def alive() -> dict[int, str]:
        now = _procs()
        seen.update(_cluster_pids(tag))
        return {pid: t for pid, t in seen.items() if pid in now and now[pid][1] == t}

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace_s
        while alive() and time.time() < deadline:
            time.sleep(0.5)
    return sorted(alive())


def _resources(boards: list[str]) -> str:
    """farm-node --resources: one instance of each board in `boards`, every other board this
    machine could serve set to 0 (Ray leaves a resource of count 0 out)."""
    res = {k: 0 for k in farm_resources(1, real=False)}
    res.update({f"board:{b}": 1 for b in boards})
    return json.dumps(res)


def _nodes(address: str, env: dict) -> list[dict]:
    code = ("import json, ray; ray.init(address=%r, log_to_driver=False); "
            "print(json.dumps([{'id': n['NodeID'], 'alive': n['Alive'], "
            "'resources': n['Resources'], 'ip': n['NodeManagerAddress']} "
            "for n in ray.nodes()])); ray.shutdown()" % address)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return [n for n in json.loads(p.stdout.strip().splitlines()[-1]) if n["alive"]]


@pytest.fixture(scope="module")
def sim_cluster(tmp_path_factory):
    """A head and four worker nodes, each a `quarl-edge farm-node` (so a real `ray start`), on
    127.0.0.2. Ports: the head's GCS, client server and dashboard on free ports; on every node
    the dashboard agent's HTTP port (default 52365 on each node: the second node fails to
    start) and the worker ports (default range 10002-19999 per node, handed out by each raylet
    without knowing the others') are 0 = the OS picks; the node manager, object manager,
    metrics and runtime-env agent ports are 0 by default already."""
    logs = tmp_path_factory.mktemp("ray-sim-logs")
    # a short temp dir: Ray's unix sockets live under it (a socket path has at most 107 bytes)
    temp = Path(tempfile.mkdtemp(prefix="qe-ray-", dir="/tmp"))
    tag = temp.name
    env = {**os.environ, MARKER: tag, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT),
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           # the firmware objects of the cluster's board cells: their own cache, so the pool
           # run does not reuse what the cluster compiled (the timings compare like with like)
           "QUARL_EDGE_CACHE_DIR": str(tmp_path_factory.mktemp("ray-object-cache"))}
    port = _free_port()
    address = f"{LOOPBACK}:{port}"
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    common = [f"--temp-dir={temp}", "--disable-usage-stats", f"--node-ip-address={LOOPBACK}",
              f"--object-store-memory={80 * 1024 ** 2}", "--dashboard-agent-listen-port=0",
              "--min-worker-port=0", "--max-worker-port=0"]
    farm = [sys.executable, "-m", "quarl_edge.cli", "farm-node"]
    head = farm + ["--head-node", "--ray-port", str(port), "--num-cpus", str(HEAD_CPUS),
                   "--resources", _resources([]), "--", *common, "--include-dashboard=false",
                   f"--dashboard-port={_free_port()}", f"--ray-client-server-port={_free_port()}"]
    workers = [farm + ["--address", address, "--num-cpus", str(cpus), "--resources",
                       _resources(boards), "--", *common] for cpus, boards in WORKERS]
    t0 = time.perf_counter()
    try:
        with (logs / "head.log").open("w") as log:
            p = subprocess.run(head, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                               timeout=300)
        assert p.returncode == 0, (logs / "head.log").read_text()[-3000:]
        # The workers join one after the other: `ray start` gives its raylet 30 s to register
        # with the GCS, and four starting at once on a busy 2-core machine took longer ("The
        # current node timed out during startup").
        for i, cmd in enumerate(workers):
            with (logs / f"worker{i}.log").open("w") as log:
                p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                   timeout=300)
            assert p.returncode == 0, (logs / f"worker{i}.log").read_text()[-3000:]
        nodes = _nodes(address, env)
        assert len(nodes) == 1 + len(WORKERS), nodes
        start_s = time.perf_counter() - t0
        yield {"address": address, "env": env, "nodes": nodes, "start_s": start_s,
               "temp": temp}
    finally:
        left = _stop(tag)
        subprocess.run(["rm", "-rf", str(temp)])
        assert not left, f"processes of the simulated cluster still running: {left}"


def _study(cfg: Path, out: Path, env: dict, *args: str) -> tuple[dict, float, str]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", "study", str(cfg), "--out",
                        str(out), "--resume", "--json", *args], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=1800)
    wall = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout), wall, p.stderr


def _measured(row: dict, out: Path) -> dict:
    """A row without its where/when/how-long fields; run_dir relative to the study's --out."""
    r = {k: v for k, v in row.items() if k not in WHERE_WHEN}
    if r.get("kind") == "board" and r.get("unit") == "ns":
        r = {k: v for k, v in r.items() if k not in WALL_CLOCK_COST}
    if "run_dir" in r:
        r["run_dir"] = str(Path(r["run_dir"]).relative_to(out.resolve()))
    return r


def _diff(a, b, path="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only in {'ray' if k in a else 'pool'}" for k in set(a) ^ set(b)]
        for k in sorted(set(a) & set(b)):
            out += _diff(a[k], b[k], f"{path}.{k}")
        return out
    return [] if a == b else [f"{path}: ray {a!r} != pool {b!r}"]


def test_a_4_node_cluster_and_the_local_pool_make_the_same_rows(sim_cluster, tmp_path):
    c = sim_cluster
    nodes = {n["id"]: n["resources"] for n in c["nodes"]}
    # each node advertises what its farm-node line gave it, on the loopback address
    assert {n["ip"] for n in c["nodes"]} == {LOOPBACK}
    boards_of = {nid: {k for k, v in res.items() if k.startswith("board:") and v > 0}
                 for nid, res in nodes.items()}
    assert sorted(sorted(b) for b in boards_of.values()) == sorted(
        [[]] + [sorted(f"board:{b}" for b in bs) for _, bs in WORKERS])
    assert sorted(res.get("CPU") for res in nodes.values()) == sorted(
        [HEAD_CPUS] + [cpus for cpus, _ in WORKERS])
    for b in BOARDS:
        assert not get_board(b).missing_build_tools(), f"{b}: its tools are not installed"

    cfg_ray = cached_example_study(tmp_path / "ray" / "out", BOARDS, name="sim", schemes=SCHEMES)
    cfg_pool = cached_example_study(tmp_path / "pool" / "out", BOARDS, name="sim",
                                    schemes=SCHEMES)
    assert cfg_ray.read_text() == cfg_pool.read_text()
    out_ray, out_pool = tmp_path / "ray" / "out", tmp_path / "pool" / "out"

    sum_ray, wall_ray, _ = _study(cfg_ray, out_ray, c["env"], "--ray", c["address"])
    pool_env = {k: v for k, v in c["env"].items() if k != MARKER}
    pool_env["QUARL_EDGE_CACHE_DIR"] = str(tmp_path / "pool-object-cache")
    sum_pool, wall_pool, _ = _study(cfg_pool, out_pool, pool_env, "--workers", "2")

    rows_ray = read_results(out_ray / "results.jsonl")
    rows_pool = read_results(out_pool / "results.jsonl")
    # the run, its cells, its board cells, and its per-op cells (fp32 and int8 on mps2-an386,
    # the grid's one exactly counting emulated board: study/plan.perop_plan)
    n = 1 + len(SCHEMES) + len(SCHEMES) * len(BOARDS) + 2
    assert sum_ray["status"] == sum_pool["status"] == {"ok": n}, (sum_ray, sum_pool)
    keys_ray = [row_key(r) for r in rows_ray]
    keys_pool = [row_key(r) for r in rows_pool]
    assert len(set(keys_ray)) == len(keys_ray) == n and len(set(keys_pool)) == n
    assert set(keys_ray) == set(keys_pool)
    by_pool = {row_key(r): r for r in rows_pool}
    diffs = []
    for r in rows_ray:
        d = _diff(_measured(r, out_ray), _measured(by_pool[row_key(r)], out_pool))
        diffs += [f"{row_key(r)}{x}" for x in d]
    assert not diffs, "\n".join(diffs)

    # the board cells ran on nodes that advertise their board; the local pool's on no node
    ran_on = {}
    for r in rows_ray:
        if r["kind"] in ("board", "perop"):
            assert f"board:{r['board']}" in boards_of[r["node"]], (r["board"], r["node"])
            ran_on.setdefault(r["board"], set()).add(r["node"][:8])
    assert all(r["node"] is None for r in rows_pool if r["kind"] in ("board", "perop"))
    perop = [r for r in rows_ray if r["kind"] == "perop"]
    assert sorted(r["scheme"] for r in perop) == ["fp32", "int8"]
    assert all(r["board"] == "mps2-an386" and r["within"] is True for r in perop)
    # the comparison compared what it says: instruction counts on the emulated board, the HIL
    # returns and bit-exactness on both boards
    emu = [r for r in rows_ray if r.get("board") == "mps2-an386" and r["kind"] == "board"]
    assert emu and all(r["unit"] == "instructions" and r["cost_mean"] > 0 for r in emu)
    assert all(r["bit_exact"] is True and r["matches_reference"] is True
               for r in rows_ray if r["kind"] == "board")
    print(f"\nray-sim: {len(nodes)} nodes ({c['start_s']:.1f} s to start), {n} rows each, "
          f"equal: yes; study wall time: cluster {wall_ray:.1f} s, local pool (--workers 2) "
          f"{wall_pool:.1f} s; board cells ran on {ran_on}")
