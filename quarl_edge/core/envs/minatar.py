"""MinAtar (Young & Tian, 2019): five Atari games on a 10 x 10 grid with one channel per kind of
object, the pixel tasks of the study at microcontroller scale (issue 14).

Registered here as QuarlEdge/MinAtar-<Game>-v0 (Breakout, SpaceInvaders, Freeway, Asterix,
Seaquest) with the `minatar` package's games underneath:

- observations float32 0/1, shape (10, 10, channels): what a policy network (and the board's
  float input) takes; the package gives bool;
- the minimal action set of each game (3 actions for Breakout, 4 for SpaceInvaders, ...);
- sticky actions (0.1) and difficulty ramping as in the MinAtar paper;
- seeded by reset(seed=...) through the game's own RandomState;
- at most MAX_STEPS steps an episode (a truncation: a game that never ends, e.g. SpaceInvaders
  played well, would stall a HIL run).

The `minatar` package is optional: scripts/setup.sh installs it (`pip install --no-deps
MinAtar==1.0.15`: its declared dependencies would replace numpy 1.26 with numpy 2, which
TensorFlow 2.15 cannot import, and bring seaborn and pandas for its GUI; the games need numpy
only). Without it, making one of these envs says how to install it."""
from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np

GAMES = {"Breakout": "breakout", "SpaceInvaders": "space_invaders", "Freeway": "freeway",
         "Asterix": "asterix", "Seaquest": "seaquest"}
ENV_IDS = tuple(f"QuarlEdge/MinAtar-{name}-v0" for name in GAMES)
MAX_STEPS = 5000
INSTALL = "pip install --no-deps MinAtar==1.0.15 (scripts/setup.sh does)"


def _environment(game: str):
    """The package's Environment for `game`, without its GUI's import warnings."""
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)      # "Cannot import matplotlib and/or seaborn": no GUI here
    try:
        from minatar import Environment
    except ImportError as e:
        raise gym.error.DependencyNotInstalled(f"MinAtar is not installed ({e}); {INSTALL}") \
            from None
    finally:
        logger.setLevel(level)
    return Environment(game, sticky_action_prob=0.1, difficulty_ramping=True)


class MinAtarEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, game: str):
        self.game = _environment(game)
        self.actions = self.game.minimal_action_set()
        self.action_space = gym.spaces.Discrete(len(self.actions))
        self.observation_space = gym.spaces.Box(0.0, 1.0, self.game.state_shape(), np.float32)

    def _obs(self) -> np.ndarray:
        return self.game.state().astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:       # else the game's RandomState goes on
            self.game.seed(int(seed))
        self.game.reset()
        return self._obs(), {}

    def step(self, action):
        reward, done = self.game.act(self.actions[int(action)])
        return self._obs(), float(reward), bool(done), False, {}


for _name, _game in GAMES.items():
    _id = f"QuarlEdge/MinAtar-{_name}-v0"
    if _id not in gym.envs.registry:
        gym.register(_id, entry_point=MinAtarEnv, kwargs={"game": _game},
                     max_episode_steps=MAX_STEPS)
