"""CartPole-v1 with the velocities masked: a partially observed task for recurrent policies.

The observation is [cart position, pole angle] (CartPole's indices 0 and 2); the cart and pole
velocities are hidden, so a policy has to infer them from successive observations (an LSTM can,
a feed-forward policy of one observation cannot balance the pole for long). Dynamics, reward,
termination and the 500-step time limit are CartPole-v1's. Registered as
QuarlEdge/CartPoleNoVel-v0 when this module is imported (quarl_edge.core.envs does)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np

ENV_ID = "QuarlEdge/CartPoleNoVel-v0"
KEPT = (0, 2)   # x, theta of CartPole's [x, x_dot, theta, theta_dot]


class MaskVelocity(gym.ObservationWrapper):
    """Keeps the observation components KEPT of a CartPole observation."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(box.low[list(KEPT)], box.high[list(KEPT)],
                                                dtype=np.float32)

    def observation(self, obs):
        return np.asarray(obs, np.float32)[list(KEPT)]


def make_cartpole_novel(**kwargs) -> gym.Env:
    return MaskVelocity(gym.make("CartPole-v1", **kwargs))


if ENV_ID not in gym.envs.registry:
    gym.register(ENV_ID, entry_point=make_cartpole_novel, reward_threshold=475.0)
