"""The board farm on Ray: what boards a machine can serve, as Ray custom resources.

    quarl-edge farm-node --head-node [--instances N] [--print]   # the first machine
    quarl-edge farm-node --address HEAD:6379 [--instances N]     # every other machine

Each node advertises, per board it can serve, a custom resource `board:<id>` with the number of
board cells it can run at once:

    board:host          the native build behind a pty (gcc installed): N instances
    board:<emulated>    each emulated board (boards/*.toml kind "emulated") whose compiler and
                        emulator are installed (QEMU, simavr): N instances
    board:<real>        1 per real board `quarl-edge ports` sees by its USB VID:PID (its port is
                        found the same way when the cell runs, so one board of an id per machine)

N is --instances (default: the machine's CPU count: an emulator is one busy core). A study's
board cells ask for {"board:<id>": 1} (run_ray below), so Ray runs each on a node that has
the board; training and host cells ask for a CPU only. `--print` shows the
`ray start` command instead of running it; `--resources JSON` adds or overrides resources.

The driver's side, `quarl-edge study --ray ADDRESS` (run_ray): the groups are Ray tasks
(training and host rows, streamed back as made) and each board cell is a task asking for the
resource board:<id>, which only the nodes serving that board advertise; a task whose worker
died is retried, and the writer drops a row whose key it already wrote. Ray itself is the
optional `ray` extra (RAY_PIN): the driver is handed the imported module.
"""
from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from ..core.errors import QuarlError
from ..core.files import loads_json
from ..targets.boards import all_boards
from ..targets.ports import list_ports
from .cells import error_reason, limit_threads, quiet, run_group, run_on_board, where_row
from .plan import BOARD_KINDS, Group
from .results import Writer

RAY_PIN = "ray==2.60.0"
RAY_RETRIES = 3     # a Ray task whose worker process died is run again, up to this often


def board_resource(board_id: str) -> str:
    """The Ray custom resource a node advertises for each instance of a board it can serve."""
    return f"board:{board_id}"


def farm_resources(instances: int | None = None, real: bool = True) -> dict[str, float]:
    """{"board:<id>": count} for the boards this machine can serve now (see the module
    docstring); `real`: look for attached real boards too."""
    n = int(instances or os.cpu_count() or 1)
    if n < 1:
        raise QuarlError(f"--instances must be >= 1, got {instances}")
    boards = all_boards()
    out: dict[str, float] = {}
    for b in boards.values():
        if b.kind in ("host", "emulated") and not b.missing_build_tools():
            out[board_resource(b.id)] = n
    if real:
        try:
            ports = list_ports(boards)
        except Exception:    # no pyserial port listing on this system: no real boards
            ports = []
        for p in ports:
            for bid in p.boards:
                if boards[bid].kind == "real" and not boards[bid].missing_build_tools():
                    out[board_resource(bid)] = 1
    return out


def ray_start_command(resources: dict, head: bool = False, address: str | None = None,
                      ray_port: int = 6379, num_cpus: int | None = None,
                      extra: list[str] = ()) -> list[str]:
    """The `ray start` command line of a farm node (a head, or one joining `address`)."""
    if head == bool(address):
        raise QuarlError("farm-node needs either --head-node (the first machine) or --address "
                         "HEAD:PORT (the others)")
    ray = shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")
    cmd = [ray, "start"]
    cmd += ["--head", f"--port={ray_port}"] if head else [f"--address={address}"]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    cmd.append("--resources=" + json.dumps(resources, sort_keys=True, separators=(",", ":")))
    return cmd + list(extra)


def farm_node(head: bool = False, address: str | None = None, ray_port: int = 6379,
              instances: int | None = None, num_cpus: int | None = None,
              resources_json: str | None = None, dry_run: bool = False,
              extra: list[str] = ()) -> dict:
    """Compute this machine's board resources and start (or, `dry_run`, only show) its Ray
    node with token authentication (ray_auth); returns {"resources": ..., "command": [...],
    "returncode": int | None, "auth": {"mode", "token"}}."""
    resources = farm_resources(instances)
    if resources_json:
        more = loads_json(resources_json, "--resources must be a JSON object, e.g. "
                                          "'{\"board:nucleo-f446re\": 1}'")
        if not isinstance(more, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
                for v in more.values()):
            raise QuarlError("--resources must be a JSON object of names to counts >= 0, got "
                             f"{resources_json!r}")
        resources.update(more)
    cmd = ray_start_command(resources, head, address, ray_port, num_cpus, extra)
    if dry_run:
        return {"resources": resources, "command": cmd, "returncode": None,
                "auth": ray_auth(head, dry_run=True)[1]}
    if not os.path.exists(cmd[0]):
        raise QuarlError(f"ray is not installed: pip install {RAY_PIN} (or pip install -e "
                         "'.[ray]')")
    env, auth = ray_auth(head)
    print(shlex.join(cmd), flush=True)
    code = subprocess.run(cmd, env={**os.environ, **env}).returncode
    return {"resources": resources, "command": cmd, "returncode": code, "auth": auth}


# ------------------------------------------------------------------ who may use the farm
# A Ray node runs whatever code a client sends it: a head open to the network without
# authentication lets anyone who reaches its ports run code here. farm-node therefore starts
# every node with Ray's token authentication (Ray >= 2.52; RAY_PIN): RAY_AUTH_MODE=token, the
# token from $RAY_AUTH_TOKEN, else the file $RAY_AUTH_TOKEN_PATH or Ray's default
# ~/.ray/auth_token, which the head makes (256 random bits, readable by its owner only) when
# it has none. Only an explicit RAY_AUTH_MODE other than "token" turns it off.
AUTH_MODE_ENV, TOKEN_ENV, TOKEN_PATH_ENV = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"


def token_path() -> Path:
    """Where Ray reads its token from when $RAY_AUTH_TOKEN is not set."""
    return Path(os.environ.get(TOKEN_PATH_ENV) or Path.home() / ".ray" / "auth_token")


def ray_auth(head: bool, dry_run: bool = False) -> tuple[dict, dict]:
    """(the environment `ray start` gets, {"mode", "token": where it is}). The head makes the
    token file if there is none; a node that joins needs the head's token. `dry_run`: only
    say where it is (or would be)."""
    mode = os.environ.get(AUTH_MODE_ENV) or None      # (set but empty: Ray's default)
    if mode is not None and mode.lower() != "token":
        return {}, {"mode": mode, "token": None}      # the user's explicit choice
    if os.environ.get(TOKEN_ENV):
        return {AUTH_MODE_ENV: "token"}, {"mode": "token", "token": f"${TOKEN_ENV}"}
    path = token_path()
    if not path.is_file() and not dry_run:
        if not head:
            raise QuarlError(f"no Ray token at {path}: copy the head's token file there (or "
                             f"set {TOKEN_ENV} to its content); the farm's nodes authenticate "
                             "with the head's token (docs/boards.md: Board farm on Ray)")
        _new_token(path)
    return {AUTH_MODE_ENV: "token"}, {"mode": "token", "token": str(path)}


def _new_token(path: Path) -> None:
    """A new token file, readable and writable by its owner only; never through a link."""
    import secrets
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise QuarlError(f"cannot make the Ray token file {path}: {e.strerror or e}") from None
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))


# ------------------------------------------------------------------ the study's driver
def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """A HOST:PORT --ray address must answer before ray.init, which would otherwise retry for
    minutes; "auto" and ray:// addresses are left to Ray."""
    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise QuarlError(f"--ray takes the head's HOST:PORT (e.g. 127.0.0.1:6379) or 'auto', "
                         f"got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise QuarlError(f"no Ray cluster answers at {address} ({e.strerror or e}): start its "
                         "head node with `quarl-edge farm-node --head-node` (docs/boards.md: "
                         "Board farm on Ray)") from None


def run_ray(ray, address: str, todo: list[Group], out: Path, done: set, writer: Writer,
            say: Callable[[str], None]) -> None:
    """The groups as Ray tasks on an existing cluster: one per run (training and host cells,
    one CPU, any node), then one per board cell, which asks for {"board:<id>": 1} and so runs
    only on a node that advertises that board (farm_node above, `quarl-edge farm-node`). OUT
    must be on a filesystem every node sees (run directories are written and read there). Rows
    stream back as they are made and only this process writes them; a task whose worker died
    is retried (RAY_RETRIES) and the writer drops rows already written."""
    real = sys.stdout

    def say_out(s: str) -> None:    # the study's own lines still go to its stdout
        with contextlib.redirect_stdout(real):
            say(s)

    # What Ray itself prints in this process (e.g. "(raylet) A worker died ...") goes to
    # stderr: stdout is the study's (--json prints only the summary there).
    echo = writer.echo

    def echo_out(row: dict) -> None:
        with contextlib.redirect_stdout(real):
            echo(row)

    writer.echo = echo_out
    with contextlib.redirect_stdout(sys.stderr):
        _connect(ray, address)
        try:
            _drive_ray(ray, todo, out, done, writer, say_out)
        finally:
            ray.shutdown()
            writer.echo = echo


def _connect(ray, address: str) -> None:
    """ray.init on the cluster at `address`; a cluster that wants the token we do not send
    (or another one) is one line that says how to pass it."""
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    except ConnectionError as e:
        # Ray's own AuthenticationError is inside: as a cause, or as text (the GCS client's
        # last error, a traceback, is the message of the RuntimeError behind the
        # ConnectionError)
        cause, auth = e, False
        while cause is not None and not auth:
            auth = (type(cause).__name__ == "AuthenticationError"
                    or "InvalidAuthToken" in str(cause))
            cause = cause.__cause__ or cause.__context__
        if not auth:
            raise QuarlError(f"cannot connect to the Ray cluster at {address}: {e}") from None
        mode = os.environ.get(AUTH_MODE_ENV) or "not set"
        raise QuarlError(f"the Ray cluster at {address} refuses this study: its token is "
                         f"missing or wrong (RAY_AUTH_MODE is {mode}); export "
                         f"RAY_AUTH_MODE=token with the head's token in {token_path()} or "
                         f"${TOKEN_ENV} (docs/boards.md: Board farm on Ray)") from None


def _drive_ray(ray, todo, out, done, writer, say) -> None:
    group_task = ray.remote(num_cpus=1, max_retries=RAY_RETRIES)(_ray_group)
    board_task = ray.remote(_ray_board)
    have = set(ray.cluster_resources())
    out_dir = str(out.resolve())
    done_keys = sorted(done, key=str)
    active: dict = {}     # ObjectRefGenerator or ObjectRef -> (what, group, key)
    failed: set = set()   # id() of the groups whose training failed

    def submit_boards(g):
        for k in map(tuple, g.keys):
            if k[0] not in BOARD_KINDS or k in writer.finished:
                continue
            res = board_resource(k[5])
            if res not in have:
                writer.write({"kind": k[0], "study": g.study, "algo": k[1],
                              "env": k[2], "seed": k[3], "scheme": k[4], "board": k[5],
                              "status": "error",
                              "reason": f"no node of the Ray cluster advertises {res} "
                                        "(run `quarl-edge farm-node` on the machine that has "
                                        "the board)"})
                continue
            ref = board_task.options(num_cpus=1, resources={res: 1},
                                     max_retries=RAY_RETRIES).remote(g, k, out_dir)
            active[ref] = ("board", g, k)

    for g in todo:
        if any(k[0] not in BOARD_KINDS and tuple(k) not in done for k in g.keys):
            active[group_task.remote(g, out_dir, done_keys)] = ("group", g, None)
        else:               # its run and host rows are done: only board cells to do
            submit_boards(g)
    say(f"ray: {len(active)} tasks on {len(ray.nodes())} nodes; boards advertised: "
        + (", ".join(sorted(r for r in have if r.startswith("board:"))) or "none"))
    while active:
        ready, _ = ray.wait(list(active), num_returns=1)
        handle = ready[0]
        what, g, key = active[handle]
        if what == "board":
            del active[handle]
            try:
                writer.write(ray.get(handle))
            except ray.exceptions.RayError as e:   # its worker died RAY_RETRIES + 1 times
                writer.write({"kind": key[0], "study": g.study, "algo": key[1],
                              "env": key[2], "seed": key[3], "scheme": key[4], "board": key[5],
                              "status": "error", "reason": _ray_reason(e)})
            continue
        try:
            row = ray.get(next(handle))
        except StopIteration:
            del active[handle]
            if id(g) not in failed:    # a failed training has no models for the boards
                submit_boards(g)
            continue
        except ray.exceptions.RayError as e:
            del active[handle]
            writer.fail_group(g, _ray_reason(e))
            continue
        if row.get("kind") == "_fail":
            failed.add(id(g))
            writer.fail_group(g, row["reason"])
        else:
            writer.write(row)


def _ray_reason(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"ray: {type(e).__name__}: {text[0] if text else ''}"[:300]


def _ray_group(group: Group, out_dir: str, done_keys: list):
    """A Ray task (a streaming generator): one run's training and host rows, each yielded as
    it is made, so the driver writes it at once. Board cells are tasks of their own. A failed
    training yields one {"kind": "_fail"} item."""
    quiet()
    limit_threads(1)     # the task's one CPU
    items: queue.Queue = queue.Queue()

    def work():
        try:
            run_group(group, Path(out_dir), {tuple(k) for k in done_keys},
                      lambda r: items.put(("row", r)), boards=False)
            items.put(("end", None))
        except BaseException as e:    # noqa: BLE001 (the driver gets the reason)
            items.put(("fail", error_reason(e)))

    threading.Thread(target=work, daemon=True).start()
    where = where_row()
    while True:
        what, x = items.get()
        if what == "row":
            yield {**x, **where}
        elif what == "fail":
            yield {"kind": "_fail", "reason": x}
            return
        else:
            return


def _ray_board(group: Group, key: tuple, out_dir: str) -> dict:
    """A Ray task on a node that advertises board:<key's board>: one board or per-op cell's
    row."""
    quiet()
    limit_threads(1)
    return run_on_board(group, tuple(key), Path(out_dir))
