"""SB3's own deterministic returns for the RL Zoo agents of benchmarks/rl_zoo.py (the table
results/import/rl-zoo.md), run by a SIDE venv's python, never the project's: real
stable-baselines3 and sb3-contrib with torch.

    python3.11 -m venv /tmp/sb3venv && /tmp/sb3venv/bin/pip install torch==2.13.0 \\
        stable-baselines3==2.9.2 sb3-contrib==2.9.2 gymnasium==1.3.0 box2d==2.3.10 pygame pyyaml
    /tmp/sb3venv/bin/python benchmarks/rl_zoo_sb3.py --zoo CHECKOUT --out FILE.json \\
        [--episodes 5] [--force] ALGO/ENV_N=PLAYED_ON_ID ...

benchmarks/rl_zoo.py runs this itself (--sb3-python) with the agents it needs and the id each
is played on (quarl-edge's mapping of retired ids: LunarLander-v2 -> -v3). Each agent is loaded
and played by tests/fixtures/rl-zoo/make_expected.py's Agent and greedy_returns (as the zoo's
enjoy.py loads it: custom_objects for the spaces and schedules, ENV/vecnormalize.pkl with
training=False, norm_reward=False; model.predict(obs, deterministic=True); seeds 0..N-1 by
reset(seed=k) of a new env per seed), then again with SB3's policy in float64 (Agent.use_float64:
policy.double() on float64 observations), which differs from the first by rounding alone.
FILE.json is {"versions": {...}, "agents": {"ALGO/ENV_N": {"env", "seeds", "returns",
"returns_float64", "seconds"} or {"env", "error"}}}, rewritten (temp name, then rename) after
every agent; an agent already in it with the same env and seeds is skipped unless --force.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "rl-zoo"))
from make_expected import Agent, greedy_returns  # noqa: E402


def versions() -> dict:
    import gymnasium
    import sb3_contrib
    import stable_baselines3
    import torch
    return {"stable-baselines3": stable_baselines3.__version__,
            "sb3-contrib": sb3_contrib.__version__, "torch": torch.__version__,
            "gymnasium": gymnasium.__version__, "python": sys.version.split()[0]}


def write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zoo", type=Path, required=True, help="a checkout of rl-trained-agents")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--force", action="store_true", help="play agents already in --out again")
    p.add_argument("agents", nargs="+", help="ALGO/ENV_N=ID (the id it is played on)")
    a = p.parse_args(argv)
    data = json.loads(a.out.read_text()) if a.out.is_file() else {}
    data["versions"] = versions()
    agents = data.setdefault("agents", {})
    seeds = list(range(a.episodes))
    for spec in a.agents:
        folder, env_id = spec.split("=", 1)
        old = agents.get(folder, {})
        if not a.force and old.get("env") == env_id and old.get("seeds") == seeds and \
                "returns_float64" in old:
            continue
        t0 = time.time()
        try:
            agent = Agent(a.zoo / folder, env_id)
            returns = greedy_returns(env_id, agent.act, seeds)
            agent.use_float64()
            returns64 = greedy_returns(env_id, agent.act, seeds)
            agents[folder] = {"env": env_id, "seeds": seeds, "returns": returns,
                              "returns_float64": returns64,
                              "seconds": round(time.time() - t0, 1)}
        except Exception as e:   # SB3 itself cannot play it: said in the table, not hidden
            agents[folder] = {"env": env_id, "seeds": seeds,
                              "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                              "traceback": traceback.format_exc()}
        print(json.dumps({"agent": folder, **{k: v for k, v in agents[folder].items()
                                              if k != "traceback"}}), flush=True)
        write_atomic(a.out, data)
    write_atomic(a.out, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
