"""One seed of a zoo agent played step by step by SB3 and by quarl-edge's fp32 network, to find
where the two episodes part (issue 23: a2c/LunarLanderContinuous-v2_1, seed 4; the figures of
its note in results/import/rl-zoo.md). Two steps, SB3's in the side venv of rl_zoo_sb3.py:

    /tmp/sb3venv/bin/python benchmarks/rl_zoo_trace.py sb3 --out /tmp/trace
    .venv/bin/python benchmarks/rl_zoo_trace.py compare --out /tmp/trace

`sb3` plays the seed with SB3 in float32 and float64 (tests/fixtures/rl-zoo/make_expected.py's
Agent, as rl_zoo_sb3.py) and again with one action moved by a few float32 ulps, and writes
sb3.npz (observations, actions, rewards; the policy's means in float32 and float64 on the
float32 episode's observations). `compare` imports the run folder, plays the seed with the fp32
Keras network as `hil` does (play_batched over seeds 0..SEED in lockstep, keras_call), alone,
and in numpy (keras_runner), and prints where each run first differs from SB3's."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "rl-zoo"


def episode(env_id, seed, act, nudge=None):
    """obs, actions, rewards of one episode; nudge(step, action) may change an action."""
    import gymnasium
    env = gymnasium.make(env_id)
    o, _ = env.reset(seed=seed)
    obs, acts, rews, done = [], [], [], False
    while not done:
        a = np.array(act(o))        # its own dtype: SB3 in float64 steps with float64 actions
        if nudge:
            a = nudge(len(acts), a)
        obs.append(np.array(o))
        acts.append(a)
        o, r, term, trunc, _ = env.step(a)
        rews.append(float(r))
        done = term or trunc
    return np.array(obs), np.array(acts), np.array(rews)


def sb3(a) -> None:
    import torch
    sys.path.insert(0, str(FIXTURE))
    from make_expected import Agent
    agent = Agent(FIXTURE / a.agent, a.env)
    obs, acts, rews = episode(a.env, a.seed, agent.act)
    print(f"SB3 float32: {rews.sum():.2f} in {len(rews)} steps")
    normed = agent.normalize(obs.astype(np.float32))
    print(f"max |normalised obs| {np.abs(normed).max():.2f} (clip_obs {agent.vn.clip_obs})")
    with torch.no_grad():
        mean32 = agent.model.policy.get_distribution(
            torch.as_tensor(normed)).distribution.mean.numpy()
    for k in (1, -1, 2, -2, 5, -5, 10, -10, 20, -20):
        def nudge(t, act, k=k):
            if t == a.step:
                for _ in range(abs(k)):
                    act[a.dim] = np.nextafter(act[a.dim], np.float32(np.sign(k) * np.inf))
            return act
        r = episode(a.env, a.seed, agent.act, nudge)[2]
        print(f"SB3 float32, step {a.step} action[{a.dim}] moved {k:+d} ulps: {r.sum():.2f} "
              f"in {len(r)} steps", flush=True)
    agent.use_float64()
    obs64, acts64, rews64 = episode(a.env, a.seed, agent.act)
    print(f"SB3 float64: {rews64.sum():.2f} in {len(rews64)} steps")
    with torch.no_grad():
        mean64 = agent.model.policy.get_distribution(torch.as_tensor(
            agent.normalize(obs.astype(np.float32)))).distribution.mean.numpy()
    a.out.mkdir(parents=True, exist_ok=True)
    np.savez(a.out / "sb3.npz", obs=obs, acts=acts, rews=rews, obs64=obs64, acts64=acts64,
             rews64=rews64, mean32=mean32, mean64=mean64)


def report(name, obs, acts, rews, ref_obs, ref_acts) -> None:
    n = min(len(obs), len(ref_obs))
    do = np.abs(obs[:n].astype(np.float64) - ref_obs[:n]).max(axis=1)
    da = np.abs(acts[:n].astype(np.float64) - ref_acts[:n]).max(axis=1)
    first = {f"obs > {t:g}": int(np.argmax(do > t)) if (do > t).any() else None
             for t in (0, 1e-4, 1e-2)}
    first.update({f"action > {t:g}": int(np.argmax(da > t)) if (da > t).any() else None
                  for t in (0, 0.5)})
    print(f"{name}: {rews.sum():.2f} in {len(rews)} steps, final x {obs[-1][0]:+.3f}; first "
          "step where it differs from SB3 float32: " +
          ", ".join(f"{k} {v}" for k, v in first.items()))
    t = first["action > 0"]
    if t is not None:
        for s in range(t, min(t + 3, n)):
            d = np.abs(acts[s].astype(np.float64) - ref_acts[s])
            print(f"    step {s}: {acts[s]} against {ref_acts[s]}: abs {d.max():.2e}")


def compare(a) -> None:
    import quarl_edge as qe
    from quarl_edge.importers.common import rounding_bound
    from quarl_edge.measure.hil import fp32_policy
    from quarl_edge.core.envs import make_gym, outputs_to_actions, play_batched
    from quarl_edge.core.nets import keras_runner, mlp_layers
    from quarl_edge.core.run import load_keras
    s = np.load(a.out / "sb3.npz")
    run = a.out / "run"
    if not (run / "run.json").is_file():
        qe.import_policy(FIXTURE / a.agent, out=run)
    space = make_gym(a.env).action_space
    fn = fp32_policy(run).fn           # hil's fp32 network: the Keras model, keras_call
    rows = []

    def recording(batch):              # the seed is the last one: the batch's last row
        y = fn(batch)
        rows.append((batch[-1].copy(), y[-1].copy()))
        return y
    ends = {}
    play_batched(a.env, recording, list(range(a.seed + 1)),
                 on_episode=lambda seed, r, n: ends.__setitem__(seed, n))
    n = ends[a.seed]
    obs = np.array([r[0] for r in rows[:n]])
    acts = outputs_to_actions(np.array([r[1] for r in rows[:n]]), space)
    rews = episode(a.env, a.seed, lambda _, it=iter(acts): next(it))[2]
    report(f"fp32 (hil: seeds 0..{a.seed} in lockstep)", obs, acts, rews, s["obs"], s["acts"])
    for name, f in (("fp32 alone (batch of 1)", fn),
                    ("fp32 in numpy (keras_runner)", keras_runner(load_keras(run)))):
        o, ac, r = episode(a.env, a.seed,
                           lambda x, f=f: outputs_to_actions(f(np.float32(x)[None]), space)[0])
        report(name, o, ac, r, s["obs"], s["acts"])
    report("SB3 float64", s["obs64"], s["acts64"], s["rews64"], s["obs"], s["acts"])
    o, ac, r = episode(a.env, a.seed, lambda _, it=iter(s["acts"]): next(it))
    print(f"SB3 float32's actions replayed here: {r.sum():.2f}, observations identical: "
          f"{np.array_equal(o, s['obs'])}")
    ref = s["mean64"].astype(np.float64)
    ours = fn(s["obs"].astype(np.float32))
    bound = np.maximum(1e-5, rounding_bound(mlp_layers(load_keras(run)),
                                            s["obs"].astype(np.float32)).reshape(ours.shape))
    for name, y in (("fp32 network", ours), ("SB3 float32", s["mean32"])):
        e = np.abs(y - ref)
        print(f"on SB3 float32's {len(ref)} observations, {name} against SB3 float64: max "
              f"{e.max():.2e}, median {np.median(e):.2e}, within the rounding bound "
              f"{np.mean(e <= bound):.3f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("sb3", "compare"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--agent", default="a2c/LunarLanderContinuous-v2_1",
                   help="a run folder of tests/fixtures/rl-zoo")
    p.add_argument("--env", default="LunarLanderContinuous-v3", help="the id it is played on")
    p.add_argument("--seed", type=int, default=4)
    p.add_argument("--step", type=int, default=5, help="the step whose action sb3 moves")
    p.add_argument("--dim", type=int, default=1, help="the action component it moves")
    a = p.parse_args(argv)
    (sb3 if a.what == "sb3" else compare)(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
