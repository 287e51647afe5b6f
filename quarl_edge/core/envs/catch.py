"""Catch, a small pixel task (as in DeepMind's bsuite): a ball falls from a random column of the
top row, one row per step, and the agent moves a paddle on the bottom row left, not at all, or
right (actions 0, 1, 2). Reward +1 when the ball lands on the paddle, -1 when it misses; the
episode then ends (ROWS - 1 steps).

Observations are an image, uint8 [ROWS * CELL, COLS * CELL, 1], 255 where the ball or the
paddle is: big enough for Stable-Baselines3's CnnPolicy (its NatureCNN needs >= 36 x 36) and
small enough for a Cortex-M4's RAM. Registered as QuarlEdge/Catch-v0 when this module is
imported (quarl_edge.core.envs does), with gymnasium and numpy only."""
from __future__ import annotations

import gymnasium as gym
import numpy as np

ROWS, COLS, CELL = 10, 10, 4
ENV_ID = "QuarlEdge/Catch-v0"


class Catch(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 255, (ROWS * CELL, COLS * CELL, 1), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.ball = self.paddle = (0, 0)

    def _obs(self) -> np.ndarray:
        grid = np.zeros((ROWS, COLS), np.uint8)
        grid[self.ball] = 255
        grid[ROWS - 1, self.paddle] = 255
        return np.kron(grid, np.ones((CELL, CELL), np.uint8))[..., None]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ball = (0, int(self.np_random.integers(COLS)))
        self.paddle = int(self.np_random.integers(COLS))
        return self._obs(), {}

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + int(action) - 1, 0, COLS - 1))
        self.ball = (self.ball[0] + 1, self.ball[1])
        done = self.ball[0] == ROWS - 1
        reward = (1.0 if self.ball[1] == self.paddle else -1.0) if done else 0.0
        return self._obs(), reward, done, False, {}


if ENV_ID not in gym.envs.registry:
    gym.register(ENV_ID, entry_point=Catch)
