"""The board farm on Ray: what boards a machine can serve, as Ray custom resources.

    quarl-edge farm-node --head [--instances N] [--print]        # the first machine
    quarl-edge farm-node --address HEAD:6379 [--instances N]     # every other machine

Each node advertises, per board it can serve, a custom resource `board:<id>` with the number of
board cells it can run at once:

    board:host          the native build behind a pty (gcc installed): N instances
    board:<emulated>    each emulated board (boards/*.toml kind "emulated") whose compiler and
                        emulator are installed (QEMU, simavr): N instances
    board:<real>        1 per real board `quarl-edge ports` sees by its USB VID:PID (its port is
                        found the same way when the cell runs, so one board of an id per machine)

N is --instances (default: the machine's CPU count: an emulator is one busy core). A study's
board cells ask for {"board:<id>": 1} (quarl_edge/study/grid.py, _run_ray), so Ray runs each on
a node that has the board; training and host cells ask for a CPU only. `--print` shows the
`ray start` command instead of running it; `--resources JSON` adds or overrides resources.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import sys

from ..errors import QuarlError
from .grid import RAY_PIN, board_resource


def farm_resources(instances: int | None = None, real: bool = True) -> dict[str, float]:
    """{"board:<id>": count} for the boards this machine can serve now (see the module
    docstring); `real`: look for attached real boards too."""
    from ..targets.boards import all_boards
    n = int(instances or os.cpu_count() or 1)
    if n < 1:
        raise QuarlError(f"--instances must be >= 1, got {instances}")
    boards = all_boards()
    out: dict[str, float] = {}
    for b in boards.values():
        if b.kind in ("host", "emulated") and not b.missing_build_tools():
            out[board_resource(b.id)] = n
    if real:
        from ..targets.ports import list_ports
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
                      port: int = 6379, num_cpus: int | None = None,
                      extra: list[str] = ()) -> list[str]:
    """The `ray start` command line of a farm node (a head, or one joining `address`)."""
    if head == bool(address):
        raise QuarlError("farm-node needs either --head (the first machine) or --address "
                         "HEAD:PORT (the others)")
    ray = shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")
    cmd = [ray, "start"]
    cmd += ["--head", f"--port={port}"] if head else [f"--address={address}"]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    cmd.append("--resources=" + json.dumps(resources, sort_keys=True, separators=(",", ":")))
    return cmd + list(extra)


def farm_node(head: bool = False, address: str | None = None, port: int = 6379,
              instances: int | None = None, num_cpus: int | None = None,
              resources_json: str | None = None, dry_run: bool = False,
              extra: list[str] = ()) -> dict:
    """Compute this machine's board resources and start (or, `dry_run`, only show) its Ray
    node; returns {"resources": ..., "command": [...], "returncode": int | None}."""
    resources = farm_resources(instances)
    if resources_json:
        try:
            more = json.loads(resources_json)
        except json.JSONDecodeError as e:
            raise QuarlError(f"--resources must be a JSON object, e.g. "
                             f"'{{\"board:nucleo-f446re\": 1}}': {e}") from None
        if not isinstance(more, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
                for v in more.values()):
            raise QuarlError("--resources must be a JSON object of names to counts >= 0, got "
                             f"{resources_json!r}")
        resources.update(more)
    cmd = ray_start_command(resources, head, address, port, num_cpus, extra)
    if dry_run:
        return {"resources": resources, "command": cmd, "returncode": None}
    if not os.path.exists(cmd[0]):
        raise QuarlError(f"ray is not installed: pip install {RAY_PIN} (or pip install -e "
                         "'.[ray]')")
    import subprocess
    print(shlex.join(cmd), flush=True)
    code = subprocess.run(cmd).returncode
    return {"resources": resources, "command": cmd, "returncode": code}
