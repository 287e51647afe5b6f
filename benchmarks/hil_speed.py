"""HIL speed: CartPole steps per second with the board choosing every action, per board, and where
a step's wall time goes. Optionally side by side with another revision of quarl-edge (`--vs REV`,
extracted with `git archive`), the two run in turn, round after round, so that a busy machine
slows both alike; medians are printed.

    .venv/bin/python benchmarks/hil_speed.py [RUN] [--boards host,mps2-an386] [--episodes 2]
                                             [--rounds 3] [--vs REV] [--md FILE]
    .venv/bin/python benchmarks/hil_speed.py --render --md FILE

With --md FILE the raw measurements go to FILE's .jsonl beside it (a first line for the run:
model, episodes, rounds, load, CPUs; then one line per board, tree and round, as measured), and
the printed table is rendered into FILE between the two marker lines (RENDER_BEGIN, RENDER_END;
the hand-written text around them is kept). --render renders FILE from its .jsonl alone.

Per board and revision (medians over the rounds):
  steps/s         environment steps per second of the HIL loop (measure/episodes.py's
                  BoardPlayer.act: INFER, dequantize, action, env.step), timed around the loop only
  B/step          bytes on the wire per step, host -> board + board -> host (counted at the port)
  env             host time per step outside the link (action head, env.step)
  link            host time per step inside BoardLink.infer (the round trip), split into
    host CPU        the host process's CPU time in it (encode, syscalls, decode)
    board compute   the inference on the board in host wall time (BENCH of 1000, per run)
    transport       the rest: bytes through the UART model, the emulator and the kernel, and
                    waiting for CPU on a busy machine
  us/B            round-trip time per payload byte (ECHO of 128 B minus ECHO of 0 B, / 128: one
                  byte each way), and the fixed cost of an empty ECHO (22 bytes of framing)
  board CPU       CPU time per step of the board's process (the emulator: all its threads)
  cost            instructions (or the board's unit) per inference (BENCH): must not change
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from revtree import tree_of

ROOT = Path(__file__).resolve().parents[1]


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(run: Path, board_id: str, episodes: int) -> dict:
    """One board, this process's quarl-edge: the HIL loop and its breakdown."""
    import gymnasium as gym
    import numpy as np

    from quarl_edge import pipeline
    from quarl_edge.measure.episodes import dequantized
    from quarl_edge.core.envs import output_to_action
    from quarl_edge.core.run import Run
    from quarl_edge.targets.boards import get_board

    model = Run(run).tflite("int8")
    env_id = Run(run).load()["env"]
    with tempfile.TemporaryDirectory() as tmp, \
            pipeline.session_for(model, get_board(board_id), Path(tmp)) as s:
        link, spec_in, spec_out = s.link, s.info.inputs[0], s.info.outputs[0]
        ser = link.ser
        counted = {"tx": 0, "rx": 0}
        write, read = ser.write, ser.read

        def counting_write(data):
            counted["tx"] += len(data)
            return write(data)

        def counting_read(size=1):
            data = read(size)
            counted["rx"] += len(data)
            return data

        ser.write, ser.read = counting_write, counting_read
        zero = np.zeros(spec_in.shape, np.float32)
        for _ in range(20):                      # warm up (round-trip history, caches)
            link.infer([zero])

        def echo_rtt(n: int) -> float:
            link.echo(bytes(n))
            ts = []
            for _ in range(30):
                t = time.perf_counter()
                link.echo(bytes(n))
                ts.append(time.perf_counter() - t)
            return statistics.median(ts)

        rtt0, rtt128 = echo_rtt(0), echo_rtt(128)
        link.infer([zero])
        t = time.perf_counter()
        bench = link.bench(1000)
        compute_s = max(0.0, time.perf_counter() - t - rtt0) / 1000

        env = gym.make(env_id)
        space = env.action_space
        t_link = cpu_link = 0.0
        steps = 0
        counted["tx"] = counted["rx"] = 0
        board_cpu0, host_cpu0 = _proc_cpu_s(s.running.proc.pid), time.process_time()
        t0 = time.perf_counter()
        for seed in range(episodes):
            obs, _ = env.reset(seed=seed)
            done = False
            while not done:
                a, c = time.perf_counter(), time.process_time()
                (y,), _cost = link.infer([obs.reshape(spec_in.shape)])
                t_link += time.perf_counter() - a
                cpu_link += time.process_time() - c
                action = output_to_action(dequantized(y, spec_out), space, "argmax")
                obs, _r, term, trunc, _ = env.step(action)
                done = term or trunc
                steps += 1
        wall = time.perf_counter() - t0
        board_cpu = _proc_cpu_s(s.running.proc.pid) - board_cpu0
        host_cpu = time.process_time() - host_cpu0
        env.close()
        us = 1e6 / steps
        return {"board": board_id, "steps": steps, "steps_per_s": steps / wall,
                "tx_bytes_per_step": counted["tx"] / steps, "rx_bytes_per_step": counted["rx"] / steps,
                "wall_us": wall * us, "env_us": (wall - t_link) * us, "link_us": t_link * us,
                "link_host_cpu_us": cpu_link * us, "compute_us": compute_s * 1e6,
                "transport_us": t_link * us - cpu_link * us - compute_s * 1e6,
                "host_cpu_us": host_cpu * us, "board_cpu_us": board_cpu * us,
                "echo0_us": rtt0 * 1e6, "us_per_byte": (rtt128 - rtt0) / 128 * 1e6,
                "cost": bench.mean, "cost_unit": s.info.cost_unit,
                "link": link.report()}


def _one(tree: Path, run: Path, board: str, episodes: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), str(run), "--one", board,
                          "--episodes", str(episodes)], env=env, capture_output=True, text=True,
                         cwd=tree)
    if out.returncode != 0:
        raise SystemExit(f"{board} on {tree}: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _row(label: str, rs: list[dict]) -> str:
    def med(key):
        return statistics.median(r[key] for r in rs)
    return (f"{rs[0]['board']:12s} {label:10s} {med('steps_per_s'):7.0f} "
            f"{med('tx_bytes_per_step'):4.0f}+{med('rx_bytes_per_step'):<3.0f} {med('wall_us'):7.0f} "
            f"{med('env_us'):5.0f} {med('link_us'):6.0f} {med('link_host_cpu_us'):6.0f} "
            f"{med('compute_us'):7.0f} {med('transport_us'):9.0f} {med('us_per_byte'):6.1f} "
            f"{med('echo0_us'):6.0f} {med('host_cpu_us'):6.0f} {med('board_cpu_us'):6.0f} "
            f"{med('cost'):8.0f} {rs[0]['cost_unit']}")


RENDER_BEGIN = ("<!-- below: rendered by benchmarks/hil_speed.py from the .jsonl beside this "
                "file (--render) -->")
RENDER_END = "<!-- above: rendered; edit outside the markers only -->"


def render(meta: dict, rows: list[dict]) -> str:
    """The console table of one run: its header line, medians per board and tree, the
    per-round steps/s and the last round's link counters."""
    results: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        results.setdefault((r["board"], r["tree"]), []).append(r)
    load = meta["load"]
    L = [f"HIL speed, {meta['run']} int8, {meta['episodes']} episodes x {meta['rounds']} rounds "
         f"per cell (medians); load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
         f"{meta['cpus']} CPUs",
         f"{'board':12s} {'tree':10s} {'steps/s':>7s} {'B/step':>8s} {'us/step':>7s} {'env':>5s} "
         f"{'link':>6s} {'hostCPU':>6s} {'compute':>7s} {'transport':>9s} {'us/B':>6s} "
         f"{'echo0':>6s} {'hostCPU':>6s} {'brdCPU':>6s} {'cost':>8s}",
         f"{'':12s} {'':10s} {'':>7s} {'tx+rx':>8s} {'':>7s} {'':>5s} {'':>6s} {'in link':>6s} "
         f"{'':>7s} {'':>9s} {'':>6s} {'':>6s} {'/step':>6s} {'/step':>6s}"]
    for (board, label), rs in results.items():
        L.append(_row(label, rs))
    for (board, label), rs in results.items():
        L.append(f"{board} {label}: steps/s per round {[round(r['steps_per_s']) for r in rs]}, "
                 f"link {rs[-1]['link']}")
    return "\n".join(L)


def write_md(md: Path, meta: dict, rows: list[dict]) -> None:
    """The table between the markers of md (appended, with the markers, to a file without them)."""
    text = md.read_text() if md.exists() else ""
    block = f"{RENDER_BEGIN}\n\n```\n{render(meta, rows)}\n```\n\n{RENDER_END}"
    if RENDER_BEGIN in text and RENDER_END in text:
        head, rest = text.split(RENDER_BEGIN, 1)
        text = head + block + rest.split(RENDER_END, 1)[1]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block + "\n"
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", default=ROOT / "examples" / "cartpole_dqn", type=Path)
    ap.add_argument("--boards", default="host,mps2-an386")
    ap.add_argument("--episodes", type=int, default=2, help="episodes per round (CartPole: up to 500 steps each)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vs", metavar="REV", help="also measure this git revision, in turn with this tree")
    ap.add_argument("--md", type=Path, help="write the rows to its .jsonl and render the table into it")
    ap.add_argument("--render", action="store_true", help="only render --md from the .jsonl beside it")
    ap.add_argument("--one", metavar="BOARD", help=argparse.SUPPRESS)   # a child: one measurement
    a = ap.parse_args()
    run = a.run.resolve()
    if a.one:
        print(json.dumps(measure(run, a.one, a.episodes)))
        return
    if a.render:
        if a.md is None:
            ap.error("--render needs --md FILE")
        lines = [json.loads(ln) for ln in a.md.with_suffix(".jsonl").read_text().splitlines() if ln.strip()]
        write_md(a.md, lines[0], lines[1:])
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this": ROOT}
        if a.vs:
            trees[a.vs[:10]] = tree_of(a.vs, Path(tmp))
        for k in range(a.rounds):
            for board in a.boards.split(","):
                for label, tree in trees.items():
                    rows.append({"tree": label, "round": k, **_one(tree, run, board, a.episodes)})
        load = os.getloadavg()
    meta = {"kind": "run", "run": run.name, "episodes": a.episodes, "rounds": a.rounds,
            "boards": a.boards.split(","), "vs": a.vs, "load": list(load), "cpus": os.cpu_count()}
    # the table lists boards in --boards order, each tree in turn (rows are kept as measured)
    order = {(b, t): i for i, (b, t) in enumerate((b, t) for b in a.boards.split(",") for t in trees)}
    print(render(meta, sorted(rows, key=lambda r: order[(r["board"], r["tree"])])))
    if a.md:
        a.md.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in [meta] + rows))
        write_md(a.md, meta, sorted(rows, key=lambda r: order[(r["board"], r["tree"])]))


if __name__ == "__main__":
    main()
