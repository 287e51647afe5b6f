"""The agents of benchmarks/rl_zoo.py: the zoo's run folders at a commit (from a bare mirror or a
checkout), each imported, quantized and played on the boards (play_agent), SB3's returns from
the side venv (run_sb3), and the rows of results/import/rl-zoo.jsonl read and written."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
from rl_zoo_table import fp32_equals_sb3

ROOT = Path(__file__).resolve().parents[1]


def git(git_dir: Path, *args: str, binary: bool = False):
    out = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True,
                         check=False)
    if out.returncode != 0:
        return None
    return out.stdout if binary else out.stdout.decode().strip()


class Zoo:
    """The zoo's run folders at one commit: from a bare mirror (files read with git, written
    under `work`; a blob the mirror lacks is an absent file) or from a checkout."""

    def __init__(self, path: Path, commit: str | None, work: Path):
        self.path = Path(path).resolve()
        # a git directory itself (HEAD, objects/): a mirror without a work tree
        self.mirror = (self.path / "HEAD").is_file() and (self.path / "objects").is_dir()
        if self.mirror:
            self.commit = git(self.path, "rev-parse", f"{commit or 'HEAD'}^{{commit}}")
            if self.commit is None:
                sys.exit(f"{self.path}: no commit {commit or 'HEAD'}")
            self.checkout = work / f"zoo-{self.commit[:7]}"
        else:
            if not self.path.is_dir():
                sys.exit(f"{self.path}: not a directory")
            head = subprocess.run(["git", "-C", str(self.path), "rev-parse", "HEAD"],
                                  capture_output=True, text=True)
            self.commit = commit or (head.stdout.strip() if head.returncode == 0 else "unknown")
            self.checkout = self.path

    def folders(self, algos, envs) -> list[str]:
        """ALGO/ENV_N for every algo and env asked for, in ALGOS then ENVS order."""
        found = []
        for algo in algos:
            if self.mirror:
                names = (git(self.path, "ls-tree", "-d", "--name-only", self.commit,
                             f"{algo}/") or "").split("\n")
                names = [n.split("/", 1)[1] for n in names if "/" in n]
            else:
                d = self.path / algo
                names = sorted(p.name for p in d.iterdir() if p.is_dir()) if d.is_dir() else []
            for env in envs:
                found += [f"{algo}/{n}" for n in sorted(names)
                          if re.fullmatch(re.escape(env) + r"_\d+", n)]
        return found

    def materialize(self, folder: str) -> tuple[Path, list[str]]:
        """The run folder on disk, and the files of it the commit lists but the source lacks."""
        run = self.checkout / folder
        if not self.mirror:
            env = folder.split("/")[1].rsplit("_", 1)[0]
            zip_ = run / f"{env}.zip"
            lfs = zip_.is_file() and zip_.read_bytes()[:40].startswith(b"version https://git-lfs")
            return run, [] if zip_.is_file() and not lfs else [f"{folder}/{env}.zip"]
        listing = git(self.path, "ls-tree", "-r", "--format=%(objectname) %(path)",
                      self.commit, "--", f"{folder}/") or ""
        absent = []
        for line in listing.splitlines():
            sha, path = line.split(" ", 1)
            if path.endswith((".monitor.csv", "evaluations.npz")):   # logs, not needed
                continue
            dest = self.checkout / path
            if dest.is_file():
                continue
            data = git(self.path, "cat-file", "blob", sha, binary=True)
            if data is None:
                absent.append(path)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(dest)
        return run, absent


def sb3_saved(zip_path: Path) -> str | None:
    """The version of SB3 that saved the zip, "none" for one without the file (before 1.0)."""
    try:
        with zipfile.ZipFile(zip_path) as z:
            if "_stable_baselines3_version" not in z.namelist():
                return "none"
            return z.read("_stable_baselines3_version").decode().strip()
    except (OSError, zipfile.BadZipFile):
        return None


def episode_returns(log: str) -> dict[str, list[float]]:
    """hil's episodes log: who (board, tflite-runtime, tflm, fp32) -> returns in seed order."""
    by: dict[str, dict[int, float]] = {}
    for line in Path(log).read_text().splitlines():
        e = json.loads(line)
        by.setdefault(e["who"], {})[e["seed"]] = e["return"]
    return {who: [r[s] for s in sorted(r)] for who, r in by.items()}


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def fit_message(msg: str) -> str:
    """A 'does not fit' error, short: what overflowed and the model's sizes."""
    parts = [f"{m.group(1)} over by {int(m.group(2)):,} B" for m in
             re.finditer(r"region [`'](\w+)' overflowed by (\d+) bytes", msg)]
    m = re.search(r"needs (\d+) B of flash; the board has (\d+) B", msg)
    if m:
        parts.append(f"needs {int(m.group(1)):,} B of flash of {int(m.group(2)):,}")
    m = re.search(r"arena takes (\d+) B, its weights (\d+) B", msg)
    if m:
        parts.append(f"arena {int(m.group(1)):,} B, weights {int(m.group(2)):,} B")
    return "does not fit" + (f" ({'; '.join(parts)})" if parts else f": {msg[:160]}")


def hil_figures(res) -> dict:
    per = episode_returns(res.episodes_log)
    return {"returns": per.get("board"), "mean": res.mean_return,
            "tflite_returns": per.get("tflite-runtime"), "tflm_returns": per.get("tflm"),
            "fp32_returns": per.get("fp32"),
            "equals_tflm": bool(res.matches_reference),
            "actions_equal_tflm": bool(res.actions_equal_reference),
            "agreement": res.agreement, "instructions_median": res.latency.median,
            "latency": {"median": res.latency.median, "p99": res.latency.p99,
                        "n": res.latency.n, "unit": res.latency.unit},
            "flash_bytes": res.memory.get("flash_bytes"), "ram_bytes": res.memory.get("ram_bytes"),
            "arena_bytes": res.memory.get("arena_bytes"), "steps_per_s": res.steps_per_s}


def tflm_new_env_per_seed(run: Path, env_id: str, head: str, seeds: list[int]) -> list[float]:
    """TF Lite Micro's int8 returns with each seed played in a new env, as hil plays the
    board's episodes (and play_batched the fp32 network's); hil plays TFLM's seeds one after
    another in one env, and Gymnasium's BipedalWalker keeps its Box2D world across reset, so
    there the two differ (an env's history, not the board)."""
    from quarl_edge.measure.episodes import play
    from quarl_edge.measure.reference import micro_reference
    from quarl_edge.core.envs import make_gym
    from quarl_edge.core.envs import output_to_action as to_action
    from quarl_edge.core.run import Run
    micro = micro_reference(Run(run).tflite("int8"))
    space = make_gym(env_id).action_space
    return [play(env_id, lambda o: to_action(micro.run([o])[0], space, head), [s])[0][0]
            for s in seeds]


def play_agent(folder: str, run_dir: Path, work: Path, a, sb3: dict | None) -> dict:
    """Import, quantize, HIL on the board and the small board: the row's figures."""
    import quarl_edge as qe
    from quarl_edge.core.envs import make_gym
    row: dict = {}
    out = work / "runs" / folder.replace("/", "-")
    if out.exists():
        import shutil
        shutil.rmtree(out)
    t = time.time()
    try:
        imp = qe.import_policy(run_dir, out=out)
    except qe.QuarlError as e:
        return {"status": "refused", "reason": first_line(e), "error": str(e),
                "seconds_import": round(time.time() - t, 1)}
    row.update(status="imported", seconds_import=round(time.time() - t, 1),
               import_algo=imp.algo, fidelity=imp.fidelity,
               network=imp.info.get("network"), env_renamed=imp.source.get("env_renamed"))
    stage = "quantize"
    try:
        t = time.time()
        qe.quantize(out, ["fp32", "int8"])
        row["seconds_quantize"] = round(time.time() - t, 1)
        stage = f"hil {a.board}"
        t = time.time()
        res = qe.hil(out, a.board, scheme="int8", episodes=a.episodes)
        row["seconds_hil"] = round(time.time() - t, 1)
    except qe.QuarlError as e:
        row.update(status="failed", stage=stage, reason=f"{stage}: {first_line(e)}",
                   error=str(e))
        return row
    board = hil_figures(res)
    row.update(fp32_returns=board.pop("fp32_returns"), fp32_mean=res.fp32_mean_return,
               tflite_returns=board.pop("tflite_returns"), tflite_mean=res.tflite_mean_return,
               tflm_returns=board.pop("tflm_returns"), tflm_mean=res.micro_mean_return,
               board=board)
    if not board["equals_tflm"]:
        fresh = tflm_new_env_per_seed(out, imp.env, res.action_head, res.seeds)
        row.update(tflm_new_env_returns=fresh, tflm_new_env_mean=float(np.mean(fresh)))
        board["equals_tflm_new_env"] = fresh == board["returns"]
    discrete = hasattr(make_gym(imp.env).action_space, "n")
    row["discrete"] = discrete
    if sb3 and "returns" in sb3:
        row["fp32_equals_sb3"] = fp32_equals_sb3(row["fp32_returns"], sb3["returns"], discrete)
    if a.small_board:
        t = time.time()
        try:
            small = qe.hil(out, a.small_board, scheme="int8", episodes=a.episodes)
            fig = hil_figures(small)
            for k in ("tflite_returns", "tflm_returns", "fp32_returns"):
                fig.pop(k)
            if not fig["equals_tflm"] and "tflm_new_env_returns" in row:
                fig["equals_tflm_new_env"] = fig["returns"] == row["tflm_new_env_returns"]
            row["small_board"] = {"board": a.small_board, "status": "ok", **fig}
        except qe.QuarlError as e:
            fits = "does not fit" in str(e)
            row["small_board"] = {"board": a.small_board,
                                  "status": "does not fit" if fits else "failed",
                                  "reason": fit_message(str(e)) if fits else first_line(e),
                                  "error": str(e)}
        row["small_board"]["seconds"] = round(time.time() - t, 1)
    return row


def run_sb3(a, zoo: Zoo, todo: list[tuple[str, str]]) -> dict:
    """SB3's returns (rl_zoo_sb3.py in the side venv) for the agents still missing there."""
    data = json.loads(a.sb3.read_text()) if a.sb3.is_file() else {"agents": {}}
    seeds = list(range(a.episodes))
    need = [(f, e) for f, e in todo if a.force or data["agents"].get(f, {}).get("env") != e
            or data["agents"][f].get("seeds") != seeds]
    if need and a.sb3_python:
        cmd = [str(a.sb3_python), str(ROOT / "benchmarks" / "rl_zoo_sb3.py"),
               "--zoo", str(zoo.checkout), "--out", str(a.sb3), "--episodes", str(a.episodes),
               *(["--force"] if a.force else []), *[f"{f}={e}" for f, e in need]]
        print(f"SB3 side venv: {len(need)} agents", file=sys.stderr, flush=True)
        t = time.time()
        subprocess.run(cmd, check=True, stdout=sys.stderr)
        print(f"SB3 side venv: {time.time() - t:.0f} s", file=sys.stderr, flush=True)
        data = json.loads(a.sb3.read_text())
    elif need:
        print(f"no SB3 returns for {len(need)} agents (give --sb3-python)", file=sys.stderr)
    return data


def read_rows(path: Path) -> dict[str, dict]:
    rows = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                rows[r["agent"]] = r
    return rows


def write_rows(path: Path, rows: dict[str, dict], order: list[str]) -> None:
    from quarl_edge.core.files import write_atomic
    keys = [k for k in order if k in rows] + sorted(k for k in rows if k not in order)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(json.dumps(rows[k]) + "\n" for k in keys))
