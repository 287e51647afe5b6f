"""Collect policies in numpy: TF-Agents' exploring policies of an MLP actor, computed from the
actor's weights, for the loops whose policy is fixed between gradient rounds (64 env steps per
round for SAC, TD3 and DDPG; PPO's collection of a batch).

A traced TF-Agents policy call costs 0.6-0.7 ms of Python and TensorFlow dispatch per env step
on this machine, more than the env step and the network together; these take tens of
microseconds. Each reads the actor's weights in `refresh()`, which the loop calls after every
gradient round. Their noise comes from a numpy Generator seeded by the run's seed, so a seed
still gives the same run (other draws than TF's random ops would have given, from the same
distribution)."""
from __future__ import annotations

import numpy as np

from ..core.nets import mlp_forward
from .common import actor_layers, network_layers


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax of logits (in their dtype: pass float64 for sampling)."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sample_categorical(p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row of the probabilities `p`: the first whose cumulative sum exceeds a
    uniform draw (one draw per row)."""
    return (p.cumsum(axis=1) > rng.random((len(p), 1))).argmax(axis=1)


def _bounds(act_spec) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of a bounded action spec, float32, in the spec's shape."""
    return tuple(np.broadcast_to(np.asarray(b, np.float32), act_spec.shape)
                 for b in (act_spec.minimum, act_spec.maximum))


class CategoricalSampler:
    """PPO's collect policy for discrete actions (PPOPolicy over ActorDistributionNetwork with a
    CategoricalProjectionNetwork): logits = the MLP's output, action ~ Categorical(logits); the
    PolicyStep carries the logits as `info["dist_params"]`, as PPOPolicy's does (PPO's
    importance ratio reads them). Batched: one row per env."""

    def __init__(self, actor_net, rng: np.random.Generator, action_dtype=np.int64):
        self.net, self.rng, self.dtype = actor_net, rng, action_dtype
        self.refresh()

    def refresh(self) -> None:
        self.layers = network_layers(self.net)

    def __call__(self, time_step, policy_state=()):
        from tf_agents.trajectories import policy_step  # heavy: TF-Agents
        logits = mlp_forward(self.layers, time_step.observation)
        action = sample_categorical(softmax(logits.astype(np.float64)), self.rng)
        return policy_step.PolicyStep(action.astype(self.dtype), policy_state,
                                      {"dist_params": {"logits": logits}})


class SacSampler:
    """SAC's collect policy (TF-Agents' ActorPolicy over the TanhNormalProjectionNetwork) in
    numpy: a = center + half * tanh(mean + exp(log_std) * N(0, 1)), clipped to the bounds, with
    (mean, log_std) the two halves of the projection layer's output.

    The actor's weights change only in the gradient rounds, so `refresh()` reads them once per
    round; one traced policy call per env step cost 0.66 ms, more than a third of SAC's loop on
    Pendulum, against tens of microseconds here. The noise comes from `rng` (a run's seed gives
    the same actions), not from TF's random ops."""

    def __init__(self, actor_net, act_spec, rng: np.random.Generator):
        self.net, self.rng = actor_net, rng
        self.low, self.high = _bounds(act_spec)
        self.shape = tuple(act_spec.shape)
        self.center, self.half = (self.high + self.low) / 2, (self.high - self.low) / 2
        self.n = int(np.prod(act_spec.shape))
        self.refresh()

    def refresh(self) -> None:
        self.layers = network_layers(self.net)

    def params(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std) of the Normal before the squash, per row of `obs`."""
        out = mlp_forward(self.layers, obs)
        return out[:, :self.n], np.exp(out[:, self.n:])

    def squash(self, x: np.ndarray) -> np.ndarray:
        """SquashToSpecNormal's bijector: center + half * tanh(x)."""
        return self.center.reshape(-1) + self.half.reshape(-1) * np.tanh(x)

    def __call__(self, nts) -> np.ndarray:
        """One action for a time step of batch 1 (the loop's one env)."""
        mean, std = self.params(nts.observation)
        x = mean[0] + std[0] * self.rng.standard_normal(self.n).astype(np.float32)
        return np.clip(self.squash(x).reshape(self.shape), self.low, self.high).astype(np.float32)


class NoisyActorSampler:
    """TD3's and DDPG's collect policies in numpy: the deterministic actor (ActorNetwork: its
    tanh layer scaled to the bounds, common.actor_layers) plus noise, clipped to the bounds.

    - "gaussian" (TD3's GaussianPolicy): independent N(0, stddev) per step.
    - "ou" (DDPG's OUNoisePolicy): x <- (1 - damping) x + N(0, stddev), x starting at 0 and
      carried across episodes, as TF-Agents' OUProcess does."""

    def __init__(self, actor_net, act_spec, rng: np.random.Generator, kind: str,
                 stddev: float, damping: float):
        if kind not in ("gaussian", "ou"):
            raise ValueError(f"noise kind must be 'gaussian' or 'ou', got {kind!r}")
        self.net, self.spec, self.rng = actor_net, act_spec, rng
        self.kind, self.stddev, self.damping = kind, np.float32(stddev), np.float32(damping)
        self.low, self.high = _bounds(act_spec)
        self.shape = tuple(act_spec.shape)
        self.x = np.zeros(self.shape, np.float32)
        self.refresh()

    def refresh(self) -> None:
        self.layers = actor_layers(self.net, self.spec)

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The actor's actions, per row of `obs` (TF-Agents' ActorPolicy, before any noise)."""
        return mlp_forward(self.layers, obs).reshape(len(obs), *self.shape)

    def __call__(self, nts) -> np.ndarray:
        """One action for a time step of batch 1 (the loop's one env)."""
        noise = self.stddev * self.rng.standard_normal(self.shape).astype(np.float32)
        if self.kind == "ou":
            self.x = (1 - self.damping) * self.x + noise
            noise = self.x
        a = self.greedy(nts.observation)[0] + noise
        return np.clip(a, self.low, self.high).astype(np.float32)
