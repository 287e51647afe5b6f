"""Train an RL policy with TF-Agents on a Gymnasium environment and write a run directory.

The entry point of the rl stage: `train()` picks the algorithm's config (its dataclass
defaults, then the tuned DEFAULTS for (algo, env), then the caller's overrides), runs the
algorithm's loop (one straight-line module per algorithm family, CleanRL style: dqn.py, ppo.py,
off_policy.py) and writes the run directory that quarl_edge/core/run.py describes:

    RUN/run.json          what was trained, how, how well, with which package versions
    RUN/policy/           the best greedy policy (tf_agents PolicySaver SavedModel)
    RUN/qnet.keras        DQN's Q-network as a plain tf.keras model (float32 obs -> Q-values);
    RUN/policy.keras      the other algorithms' greedy actor: what quantization converts
    RUN/train_curve.csv   step, running train episode return, greedy validation return, loss

The greedy policy is evaluated every `eval_every` steps on validation seeds (10_000 + k), never
on the test seeds 0..N that evaluation uses later, and the best checkpoint is kept.
"""
from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Callable

from ..core.errors import QuarlError
from .defaults import DEFAULTS
from .dqn import DQNConfig, train_dqn
from .off_policy import OffPolicyConfig, train_off_policy
from .ppo import PPOConfig, train_ppo
from ..core.envs import make_gym

__all__ = ["ALGOS", "DEFAULTS", "DQNConfig", "OffPolicyConfig", "PPOConfig", "config_changes",
           "resolve_config", "train"]


def _off_policy(algo):
    def fn(env_id, seed, out, config, progress=True, judge=None):
        return train_off_policy(algo, env_id, seed, out, config, progress)
    return fn


def _on_policy(loop):
    def fn(env_id, seed, out, config, progress=True, judge=None):
        return loop(env_id, seed, out, config, progress)
    return fn


# algo -> (config dataclass, training loop(env_id, seed, out, config, progress, judge))
ALGOS = {"dqn": (DQNConfig, train_dqn), "ppo": (PPOConfig, _on_policy(train_ppo)),
         "sac": (OffPolicyConfig, _off_policy("sac")), "td3": (OffPolicyConfig, _off_policy("td3")),
         "ddpg": (OffPolicyConfig, _off_policy("ddpg"))}


def resolve_config(algo: str, env_id: str, steps: int | None = None, **overrides):
    """The config dataclass `train` would use: the dataclass defaults, then DEFAULTS for
    (algo, env_id), then `overrides`, then `steps` (None: keep the default)."""
    if algo not in ALGOS:
        raise QuarlError(f"unknown algorithm {algo!r}; known: {', '.join(ALGOS)}")
    config_cls = ALGOS[algo][0]
    if overrides.get("net", "mlp") != "mlp" and algo != "ppo":
        raise QuarlError(f"--net {overrides['net']}: recurrent policies train with --algo ppo "
                         f"(TF-Agents' ActorDistributionRnnNetwork), not {algo}")
    known = {f.name for f in fields(config_cls)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise QuarlError(f"unknown {algo} option(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(known))}")
    overrides = {**DEFAULTS.get((algo, env_id), {}), **overrides}
    if steps is not None:
        overrides["steps"] = int(steps)
    return config_cls(**overrides)


def config_changes(saved: dict, config) -> dict[str, tuple]:
    """{field: (saved value, config's value)} where a run's saved hyperparameters (run.json)
    differ from `config`. A field the run predates counts as its dataclass default: fields are
    added with the behaviour they replace as the default."""
    now = json.loads(json.dumps(asdict(config)))           # tuples -> lists, as run.json has them
    then = json.loads(json.dumps(asdict(type(config)())))
    then.update(saved)
    return {k: (then.get(k), v) for k, v in now.items() if then.get(k) != v}


def train(env_id: str, algo: str, steps: int | None, seed: int, out: Path,
          progress: bool = True, judge: Callable | None = None, **overrides) -> dict:
    """Train `algo` on Gymnasium `env_id` for `steps` env steps (None: the algo's default) and
    write the run directory `out`. `overrides` set other fields of the algo's config dataclass.
    `judge` ranks DQN checkpoints that tie on the fp32 validation return when its config has
    `select_int8` (quarl_edge.measure.selection.int8_judge; see dqn.py). Returns the contents
    of run.json."""
    config = resolve_config(algo, env_id, steps, **overrides)
    make_gym(env_id).close()  # unknown env ids fail here, before TF-Agents is set up
    return ALGOS[algo][1](env_id, int(seed), Path(out), config, progress=progress, judge=judge)
