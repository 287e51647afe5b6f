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
the script exits 1.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ALGOS = ("a2c", "ppo", "dqn", "qrdqn", "sac", "td3", "ddpg", "tqc", "trpo", "ars", "ppo_lstm")
ENVS = ("CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Acrobot-v1",
        "Pendulum-v1", "LunarLander-v2", "LunarLanderContinuous-v2", "BipedalWalker-v3",
        "BipedalWalkerHardcore-v3", "CarRacing-v0", "CarRacing-v1", "CarRacing-v2",
        "CarRacing-v3")
ABSENT = "not in the stored snapshot"
RTOL = 0.01                  # continuous actions: fp32 within 1 % of SB3's return per seed
# SB3 in float64 plays another episode than in float32 when their returns are more than 0.1 %
# apart (as tests/test_rl_zoo.py's robust_seeds): one episode rounded otherwise keeps its return
# to ~1e-6, and two episodes can end within RTOL of each other (a2c/LunarLanderContinuous-v2_1,
# seed 4: 199.1 in float32, 200.8 in float64, 402 and 385 steps)
ROUNDING_RTOL = 1e-3
# agents whose fp32 ≠ SB3 episode was traced step by step: a note each under the table's notes
TRACED = {
    "a2c/LunarLanderContinuous-v2_1": (
        "a2c/LunarLanderContinuous-v2_1, seed 4 (fp32 94.4, SB3 199.1), played step by step by "
        "both (issue 23): the same LunarLanderContinuous-v3 episode (observations identical "
        "through step 5) until float32 rounding shows in the actions, at step 3 (the side "
        "engine's 0.16098595 against SB3's 0.16098624, below its 0.5 threshold: no effect) and "
        "step 5 (-0.6062814 against -0.6062807: 7.2e-7, 12 float32 ulps, relative 1.2e-6; the "
        "side engine fires). Observations differ from step 6 (4e-8), by 1e-4 from step 31; from "
        "step 135 one side fires an engine the other does not; SB3 lands on the pad at step 402, "
        "the fp32 network off it (x = -0.44) at step 784, with twice the main-engine steps "
        "(619 against 313). SB3 in float64 parts from SB3 in float32 at the same steps (step 5: "
        "5.7e-7) and lands at step 385 (200.8: another episode, within 1 % by chance; its "
        "float64 actions rounded to float32 before each step: -42.5). SB3 "
        "itself, its step-5 side-engine action moved by +5 or -5 float32 ulps, returns 95.0 or "
        "71.3 (by ±1 or ±2 ulps 193.3 to 199.9, by +10/-10 109.3/-63.6, by +20/-20 59.9/197.4); "
        "the fp32 network played alone (a batch of 1, not the 5 seeds in lockstep) returns "
        "70.4, in numpy (keras_runner) 68.0 in lockstep and 184.1 alone. "
        "On SB3's 402 observations the fp32 network's outputs are within 3.5e-6 of SB3's in "
        "float64 (SB3 in float32: 1.4e-6), each within its float32 rounding bound; no "
        "normalised observation nears clip_obs (at most 4.3 of 10); SB3's actions replayed in "
        "quarl-edge's env return 199.1 exactly. Rounding, amplified by the env; not the import "
        "(benchmarks/rl_zoo_trace.py)."),
}
JSONL = ROOT / "results" / "import" / "rl-zoo.jsonl"
MD = ROOT / "results" / "import" / "rl-zoo.md"
SB3_JSON = ROOT / "results" / "import" / "rl-zoo.sb3.json"


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
    from quarl_edge.rl.envs import make_gym
    from quarl_edge.rl.envs import output_to_action as to_action
    micro = micro_reference(Path(run) / "models" / "int8.tflite")
    space = make_gym(env_id).action_space
    return [play(env_id, lambda o: to_action(micro.run([o])[0], space, head), [s])[0][0]
            for s in seeds]


def same(x: float, y: float, discrete: bool) -> bool:
    """Two returns of one seed equal, as fp32 = SB3 counts them: exactly for discrete actions,
    within RTOL for continuous ones."""
    return x == y if discrete else abs(x - y) <= RTOL * abs(y)


def within(a: list[float], b: list[float], discrete: bool = False) -> int:
    """How many seeds' returns of `a` are the same as `b`'s (see same)."""
    return sum(same(x, y, discrete) for x, y in zip(a, b))


def also_differ(r: dict) -> int:
    """Of the seeds where the fp32 return is not SB3's, on how many SB3's own episode in
    float64 is another one than in float32 (rounding alone): returns more than ROUNDING_RTOL
    apart, not RTOL (within RTOL, two episodes may still be two)."""
    d = bool(r.get("discrete"))
    return sum(not same(f, s, d) and (x != s if d else abs(x - s) > ROUNDING_RTOL * abs(s))
               for f, s, x in zip(r["fp32_returns"], r["sb3_returns"], r["sb3_float64_returns"]))


def fp32_equals_sb3(fp32: list[float], sb3: list[float], discrete: bool) -> bool:
    if len(fp32) != len(sb3):
        return False
    if discrete:
        return all(a == b for a, b in zip(fp32, sb3))
    return all(abs(a - b) <= RTOL * abs(b) for a, b in zip(fp32, sb3))


def play_agent(folder: str, run_dir: Path, work: Path, a, sb3: dict | None) -> dict:
    """Import, quantize, HIL on the board and the small board: the row's figures."""
    import quarl_edge as qe
    from quarl_edge.rl.envs import make_gym
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
        res = qe.hil(out, a.board, model="int8", episodes=a.episodes)
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
            small = qe.hil(out, a.small_board, model="int8", episodes=a.episodes)
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
    from quarl_edge.files import write_atomic
    keys = [k for k in order if k in rows] + sorted(k for k in rows if k not in order)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(json.dumps(rows[k]) + "\n" for k in keys))


# ------------------------------------------------------------------------------ the table
def f1(x) -> str:
    return "—" if x is None else f"{x:.1f}"


def yes(x) -> str:
    return "—" if x is None else "yes" if x else "NO"


def same_as_tflm(b: dict) -> str:
    """yes, yes† (equal to TFLM played with a new env per seed, as the board was), NO, —."""
    if "equals_tflm" not in b:
        return "—"
    return "yes" if b["equals_tflm"] else "yes†" if b.get("equals_tflm_new_env") else "NO"


def table(rows: list[dict], algos, envs) -> str:
    head = ["algo", "env (played on)", "SB3 saved", "SB3", "fp32", "int8 TFLM", "int8 board",
            "board = TFLM", "fp32 = SB3", "instructions", "flash B", "RAM B", "microbit int8",
            "reason / note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        env = r["env"] if r.get("played_on") in (None, r["env"]) else \
            f"{r['env']} ({r['played_on']})"
        b = r.get("board") or {}
        s = r.get("small_board") or {}
        if s.get("status") == "ok":
            micro = f1(s["mean"]) + ("" if s.get("equals_tflm") else "†" if
                                     s.get("equals_tflm_new_env") else " (≠ TFLM)")
        else:
            micro = s.get("reason", "—")
        note = r.get("reason") or ""
        if r.get("sb3_error"):
            note = (note + "; " if note else "") + f"SB3 could not play it: {r['sb3_error']}"
        lines.append("| " + " | ".join([
            r["algo"], env, r.get("sb3_saved") or "—", f1(r.get("sb3_mean")), f1(r.get("fp32_mean")),
            f1(r.get("tflm_mean")) if "tflm_new_env_mean" not in r else
            f"{f1(r['tflm_new_env_mean'])}† ({f1(r['tflm_mean'])})", f1(b.get("mean")),
            same_as_tflm(b),
            yes(r.get("fp32_equals_sb3")),
            "—" if b.get("instructions_median") is None else f"{b['instructions_median']:,.0f}",
            "—" if b.get("flash_bytes") is None else f"{b['flash_bytes']:,}",
            "—" if b.get("ram_bytes") is None else f"{b['ram_bytes']:,}",
            micro.replace("|", "/"), note.replace("|", "/")]) + " |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> list[str]:
    algos = sorted({r["algo"] for r in rows}, key=lambda x: ALGOS.index(x) if x in ALGOS else 99)
    head = ["algo", "run folders", "imported", "refused", "failed after import", "bug", "absent",
            "% imported of present", "fp32 = SB3 (every seed)", "board = TFLM",
            "microbit: fits / does not fit", "microbit = TFLM"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def counts(rs, name):
        n = lambda st: sum(r["status"] == st for r in rs)  # noqa: E731
        present = len(rs) - n("absent")
        imported = [r for r in rs if r["status"] == "imported"]
        played = [r for r in imported if r.get("board")]
        with_sb3 = [r for r in played if r.get("fp32_equals_sb3") is not None]
        fits = sum((r.get("small_board") or {}).get("status") == "ok" for r in played)
        nofit = sum((r.get("small_board") or {}).get("status") == "does not fit" for r in played)
        small_same = sum(same_as_tflm(r["small_board"]).startswith("yes") for r in played
                         if (r.get("small_board") or {}).get("status") == "ok")
        return [name, str(len(rs)), str(len(imported)), str(n("refused")), str(n("failed")),
                str(n("bug")), str(n("absent")),
                f"{100 * len(imported) / present:.0f} %" if present else "—",
                f"{sum(bool(r['fp32_equals_sb3']) for r in with_sb3)} of {len(with_sb3)}",
                f"{sum(same_as_tflm(r['board']).startswith('yes') for r in played)} of "
                f"{len(played)}" + (f" ({dag} †)" if (dag := sum(
                    same_as_tflm(r['board']) == 'yes†' for r in played)) else ""),
                f"{fits} / {nofit}", f"{small_same} of {fits}"]
    for algo in algos:
        out.append("| " + " | ".join(counts([r for r in rows if r["algo"] == algo], algo)) + " |")
    out.append("| " + " | ".join(f"**{c}**" for c in counts(rows, "all")) + " |")
    return out


def markdown(rows: list[dict], zoo_commit: str, sb3: dict, a, folders_seen) -> str:
    sb3_versions = sb3.get("versions") or {}
    sb3_seconds = sum(sb3.get("agents", {}).get(r["agent"], {}).get("seconds", 0) for r in rows)
    commands = list(dict.fromkeys(r["command"] for r in rows))
    dates = sorted({r["date"][:10] for r in rows}) or ["-"]
    episodes = sorted({r.get("episodes") for r in rows if r.get("episodes")})
    seconds = sum(r.get("seconds", 0) for r in rows)
    eps = "/".join(map(str, episodes))
    in_scope = set(folders_seen)
    scope = (f"all {len(in_scope)} classic-control and Box2D run folders" if
             in_scope <= {r["agent"] for r in rows} else
             f"{len(rows)} of its classic-control and Box2D run folders (those the command's "
             "--algos/--envs select)")
    lines = [
        "# The RL Baselines3 Zoo on a board",
        "",
        "Made by " + ", then ".join(f"`{c}`" for c in commands) +
        f" ({dates[0]}{'..' + dates[-1] if len(dates) > 1 else ''}; {seconds / 60:.0f} min of "
        "agent time on a loaded 2-core machine), from "
        f"[DLR-RM/rl-trained-agents](https://github.com/DLR-RM/rl-trained-agents) at commit "
        f"`{zoo_commit}` (MIT): {scope}, "
        f"{eps} episodes each (seeds 0..{max(episodes) - 1 if episodes else 0}). "
        "SB3's returns: " + ", ".join(f"{k} {v}" for k, v in sb3_versions.items()
                                      if k != "python") +
        f" in a side venv (`benchmarks/rl_zoo_sb3.py`, {sb3_seconds / 60:.0f} min); "
        "machine-readable rows with every "
        "seed's returns: `rl-zoo.jsonl`, SB3's: `rl-zoo.sb3.json`. Columns: see "
        "`benchmarks/rl_zoo.py`'s docstring; fp32 = SB3 is per seed, exactly for discrete "
        "actions, within 1 % for continuous ones; absent rows (the zip is listed by the commit "
        "but not in the stored snapshot of the repository) are not counted as present.",
        "",
        *summary(rows),
        "",
    ]
    missing = [f"{al}" for al in ALGOS if not any(r["algo"] == al for r in rows)]
    notes = []
    if missing:
        notes.append(f"No run folder of {', '.join(missing)} for these envs at this commit.")
    if not any(r["env"].startswith("CarRacing") for r in rows):
        notes.append("No CarRacing agent at this commit.")
    renamed = sorted({f"{r['env']} -> {r['played_on']}" for r in rows
                      if r.get("played_on") and r["played_on"] != r["env"]})
    if renamed:
        notes.append("Retired ids are played on their successor, as quarl-edge maps them "
                     f"({', '.join(renamed)}), by SB3 and quarl-edge alike; the dynamics "
                     "may differ from those the agent was trained on.")
    if any("tflm_new_env_mean" in r for r in rows):
        notes.append("† TF Lite Micro played with a new env per seed, as the board's and the "
                     "fp32 network's (and SB3's) episodes are; `hil` plays TFLM's seeds one "
                     "after another in one env, whose return is in brackets. Gymnasium's "
                     "BipedalWalker keeps its Box2D world from one reset to the next (LunarLander "
                     "makes a new one), so reset(seed=k) after another episode is not the "
                     "episode a new env plays: the difference is the env's history, not the "
                     "board.")
    differ = [r for r in rows if r.get("fp32_equals_sb3") is False]
    if differ:
        notes.append("fp32 ≠ SB3: " + "; ".join(
            f"{r['agent']} ({within(r['fp32_returns'], r['sb3_returns'], r.get('discrete'))}"
            f" of {len(r['sb3_returns'])} seeds "
            + ("equal, the import check's argmax agreement "
               f"{r['fidelity'].get('argmax_agreement', float('nan')):g}" if r.get("discrete")
               else "within 1 %, the import check's max abs action error "
               f"{r['fidelity'].get('max_abs_error_actions', float('nan')):.1e}")
            + (f"; on {also_differ(r)} of the "
               f"{len(r['sb3_returns']) - within(r['fp32_returns'], r['sb3_returns'], r.get('discrete'))}"
               " seeds where fp32 ≠ SB3, SB3 in float64 plays another episode than in "
               "float32 too (returns more than 0.1 % apart)"
               if r.get("sb3_float64_returns") else "") + ")"
            for r in differ) + ". A continuous policy's fp32 network (TensorFlow) differs from "
            "SB3's (torch) by float32 rounding, which is what the import check measures; "
            "where the env amplifies a difference of that size, the episode is another one.")
        notes += [TRACED[r["agent"]] for r in differ if r["agent"] in TRACED]
    rounding = [r for r in rows if r.get("sb3_float64_returns") and
                within(r["sb3_float64_returns"], r["sb3_returns"], r.get("discrete")) <
                len(r["sb3_returns"])]
    with64 = [r for r in rows if r.get("sb3_float64_returns")]
    if with64:
        notes.append(f"SB3 in float64 (`policy.double()` on float64 observations, the same "
                     f"seeds; `rl-zoo.sb3.json`'s returns_float64): of {len(with64)} agents SB3 "
                     f"plays, {len(with64) - len(rounding)} return what SB3 in float32 returns "
                     "(as fp32 = SB3 counts) on every seed" + (
                         "; not so " + ", ".join(
                             f"{r['agent']} ({within(r['sb3_float64_returns'], r['sb3_returns'], r.get('discrete'))}"
                             f" of {len(r['sb3_returns'])} seeds, mean "
                             f"{f1(r['sb3_float64_mean'])} against {f1(r['sb3_mean'])})"
                             for r in rounding) +
                         ": there, rounding alone (SB3 against itself) changes episodes, as "
                         "it does between the fp32 network (TensorFlow, float32) and SB3 "
                         "(torch, float32)" if rounding else "") + ".")
    notb = [r for r in rows if r.get("board") and not same_as_tflm(r["board"]).startswith("yes")]
    if notb:
        notes.append("board ≠ TFLM: " + ", ".join(r["agent"] for r in notb) + ".")
    bugs = [r for r in rows if r["status"] == "bug"]
    if bugs:
        notes.append("**Bugs** (exceptions that are not quarl-edge errors): " +
                     "; ".join(f"{r['agent']}: {r['reason']}" for r in bugs))
    for note in notes:                 # one paragraph each
        lines += [note, ""]
    lines.append(table(rows, ALGOS, ENVS))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
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
    a = p.parse_args(argv)
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
    import quarl_edge as qe
    n_bugs = 0
    t_all = time.time()
    for i, folder in enumerate(todo):
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
                n_bugs += 1
                row.update(status="bug", reason=f"BUG {type(e).__name__}: {first_line(e)}",
                           traceback=traceback.format_exc())
                print(row["traceback"], file=sys.stderr)
        row["seconds"] = round(time.time() - t0, 1)
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
    from quarl_edge.files import write_atomic
    a.md.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(a.md, text)
    print(text)
    if tmp is not None:
        tmp.cleanup()
    return 1 if n_bugs or any(r["status"] == "bug" for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
