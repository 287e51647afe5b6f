"""The RL Baselines3 Zoo's published agents on a board (issue 23, "a table of the zoo"): every
classic-control and Box2D run folder (ALGO/ENV_N) of DLR-RM/rl-trained-agents is imported
(`quarl-edge import FOLDER`), quantized to fp32 and int8 and played with the int8 model on
mps2-an386 (`quarl-edge hil`, seeds 0..N-1), and on the micro:bit (Cortex-M0, 16 KiB RAM)
where the firmware fits, through the Python API; SB3's own deterministic return on the same
seeds comes from real stable-baselines3 + sb3-contrib in a side venv
(benchmarks/rl_zoo_sb3.py, run from here by --sb3-python). One row per agent:

    SB3 saved       the SB3 version that saved the zip (its _stable_baselines3_version)
    SB3             SB3's return: model.predict(obs, deterministic=True), mean over the seeds
                    (and in float64, policy.double(), in the notes and the jsonl)
    fp32            the imported fp32 network (Keras), same seeds
    int8 TFLM       the int8 model on TF Lite Micro's reference kernels (host)
    int8 board      the int8 model on mps2-an386 (the board choosing every action)
    board = TFLM    the board's return equals TF Lite Micro's on every seed
    fp32 = SB3      the fp32 return equals SB3's on every seed (discrete actions: exactly;
                    continuous: within 1 %, as tests/test_rl_zoo.py)
    instructions    mps2-an386's cost per inference (QEMU -icount), median
    flash, RAM      the int8 firmware's on mps2-an386
    microbit        the int8 return on the microbit board, or "does not fit" and the sizes
    reason          why the import was refused (the QuarlError's first line), or why the
                    row has no figures ("not in the stored snapshot": the zip is listed by the
                    commit but absent from the mirror, e.g. files of 4 MiB and more)

    .venv/bin/python benchmarks/rl_zoo.py --zoo ZOO [--commit REV] [--sb3-python PY]
        [--episodes 5] [--algos a2c,ppo] [--envs CartPole-v1] [--force] [--work DIR]

ZOO is a bare git mirror of rl-trained-agents (each agent's files are read at --commit, HEAD
by default, and written under --work) or a checkout of it. Rows go to
results/import/rl-zoo.jsonl as each agent finishes (the whole file written to a temporary
name, then renamed); an agent already there, made with the same episodes and boards, is
skipped unless --force, so a crash loses no finished row. The Markdown table
(results/import/rl-zoo.md) is made from every row of the jsonl, with the command of each run.
An exception that is not a quarl-edge error is a bug: its row says so with the traceback, and
the script exits 1. The zoo's folders and each agent's figures: rl_zoo_agents.py; the table:
rl_zoo_table.py.
"""
from __future__ import annotations

import argparse
import datetime
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
from rl_zoo_agents import Zoo, first_line, play_agent, read_rows, run_sb3, sb3_saved, write_rows
from rl_zoo_table import ALGOS, ENVS, f1, markdown

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ABSENT = "not in the stored snapshot"
JSONL = ROOT / "results" / "import" / "rl-zoo.jsonl"
MD = ROOT / "results" / "import" / "rl-zoo.md"
SB3_JSON = ROOT / "results" / "import" / "rl-zoo.sb3.json"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zoo", type=Path, required=True,
                   help="a bare git mirror of DLR-RM/rl-trained-agents, or a checkout")
    p.add_argument("--commit", default=None, help="the mirror's commit (default HEAD)")
    p.add_argument("--sb3-python", type=Path, default=None,
                   help="the side venv's python that runs benchmarks/rl_zoo_sb3.py")
    p.add_argument("--sb3", type=Path, default=SB3_JSON, help="SB3's returns (JSON)")
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--board", default="mps2-an386")
    p.add_argument("--small-board", default="microbit", help="'' to leave it out")
    p.add_argument("--algos", default=",".join(ALGOS))
    p.add_argument("--envs", default=",".join(ENVS))
    p.add_argument("--force", action="store_true", help="redo agents already in the jsonl")
    p.add_argument("--jsonl", type=Path, default=JSONL)
    p.add_argument("--md", type=Path, default=MD)
    p.add_argument("--work", type=Path, default=None,
                   help="keep the extracted agents and run directories here (default: a "
                        "temporary folder, removed at the end)")
    return p.parse_args(argv)


def agent_row(folder: str, dirs: dict, zoo: Zoo, sb3: dict, play_on: dict, a,
              command: str) -> dict:
    """One agent's row: absent from the mirror, or imported, quantized and played; an
    exception that is not a quarl-edge error makes a row of status "bug" with its traceback."""
    import quarl_edge as qe
    run_dir, absent = dirs[folder]
    zoo_env = folder.split("/")[1].rsplit("_", 1)[0]
    s = sb3.get("agents", {}).get(folder, {})
    s = s if s.get("seeds") == list(range(a.episodes)) and s.get("env") == play_on[folder] \
        else {}
    row = {"agent": folder, "algo": folder.split("/")[0], "env": zoo_env,
           "played_on": play_on[folder], "zoo_commit": zoo.commit,
           "episodes": a.episodes, "seeds": list(range(a.episodes)),
           "boards": [a.board, a.small_board], "command": command,
           "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "quarl_edge": qe.__version__}
    t0 = time.time()
    if absent:
        row.update(status="absent", reason=ABSENT, absent_files=absent)
    else:
        zips = sorted(run_dir.glob(f"{zoo_env}.zip")) or sorted(run_dir.glob("*.zip"))
        row["sb3_saved"] = sb3_saved(zips[0]) if zips else None
        if "returns" in s:
            row.update(sb3_returns=s["returns"], sb3_mean=float(np.mean(s["returns"])))
        if "returns_float64" in s:
            row.update(sb3_float64_returns=s["returns_float64"],
                       sb3_float64_mean=float(np.mean(s["returns_float64"])))
        elif "error" in s:
            row["sb3_error"] = s["error"]
        try:
            row.update(play_agent(folder, run_dir, a.work, a, s))
        except Exception as e:     # not a quarl-edge error: a bug, reported as one
            row.update(status="bug", reason=f"BUG {type(e).__name__}: {first_line(e)}",
                       traceback=traceback.format_exc())
            print(row["traceback"], file=sys.stderr)
    row["seconds"] = round(time.time() - t0, 1)
    return row


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv)
    algos = [x for x in a.algos.split(",") if x]
    envs = [x for x in a.envs.split(",") if x]
    command = "python benchmarks/rl_zoo.py " + shlex.join(argv)
    tmp = None
    if a.work is None:
        tmp = tempfile.TemporaryDirectory(prefix="rl-zoo-")
        a.work = Path(tmp.name)
    a.work.mkdir(parents=True, exist_ok=True)
    zoo = Zoo(a.zoo, a.commit, a.work)
    from quarl_edge.importers.common import current_env_id
    folders = zoo.folders(algos, envs)
    rows = read_rows(a.jsonl)
    play_on = {f: current_env_id(f.split("/")[1].rsplit("_", 1)[0])[0] for f in folders}
    todo = [f for f in folders if a.force or f not in rows
            or rows[f].get("episodes") != a.episodes or rows[f].get("boards") !=
            [a.board, a.small_board]]
    print(f"{len(folders)} run folders at {zoo.commit[:7]}, {len(todo)} to do",
          file=sys.stderr, flush=True)
    dirs = {f: zoo.materialize(f) for f in todo}
    sb3 = run_sb3(a, zoo, [(f, play_on[f]) for f in todo if not dirs[f][1]])
    n_bugs = 0
    t_all = time.time()
    for i, folder in enumerate(todo):
        row = agent_row(folder, dirs, zoo, sb3, play_on, a, command)
        n_bugs += row["status"] == "bug"
        rows[folder] = row
        write_rows(a.jsonl, rows, folders)
        b = row.get("board") or {}
        figs = "" if not b else (f" sb3 {f1(row.get('sb3_mean'))} fp32 {f1(row.get('fp32_mean'))}"
                                 f" tflm {f1(row.get('tflm_mean'))} board {f1(b.get('mean'))}")
        print(f"[{i + 1}/{len(todo)}] {folder}: {row['status']} {row.get('reason', '')}{figs}"
              f" ({row['seconds']:.0f} s)", file=sys.stderr, flush=True)
    print(f"{len(todo)} agents in {time.time() - t_all:.0f} s", file=sys.stderr)
    order = {f: k for k, f in enumerate(zoo.folders(ALGOS, ENVS))}
    all_rows = sorted(rows.values(), key=lambda r: order.get(r["agent"], 10 ** 6))
    everything = zoo.folders(ALGOS, ENVS)
    text = markdown(all_rows, zoo.commit, sb3, a, everything)
    from quarl_edge.core.files import write_atomic
    a.md.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(a.md, text)
    print(text)
    if tmp is not None:
        tmp.cleanup()
    return 1 if n_bugs or any(r["status"] == "bug" for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
