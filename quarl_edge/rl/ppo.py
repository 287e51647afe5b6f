"""PPO (TF-Agents' PPOClipAgent, GAE) on discrete or continuous actions, read top to bottom:
the config, the collect/train loop (`train_ppo`), then its steps in the order it takes them: the
envs stepped side by side, the networks, the agent, the update, a round of collection, the
validation, the export.

`net="lstm"` trains a recurrent policy (ActorDistributionRnnNetwork and ValueRnnNetwork:
`hidden` Dense layers, one LSTM of `lstm_units`, the head) for partially observed tasks such as
QuarlEdge/CartPoleNoVel-v0; discrete actions only. The collect policy carries its LSTM state
from step to step (TF-Agents zeroes it at each episode's FIRST step); training unrolls each env
row of the batch from a zero state. Its export is rl/recurrent.py's: RUN/recurrent.npz and the
one-step stateful Keras model RUN/policy.keras."""
from __future__ import annotations

import csv
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..core.errors import QuarlError
from ..core.files import open_new
from ..core.schema import int_sizes
from ..core.run import VALIDATION_SEED_BASE, Run
from .collect import CategoricalSampler
from .common import (StagedReplay, build_optimizers, _agent_env, _save_actor_run, _validation_return, actor_layers,
                     categorical_projection_net, common_function)
from .recurrent import normalization_layer, observation_statistics, play_recurrent, rnn_actor_layers
from .rppo import train_recurrent_ppo
from .recurrent_export import save_recurrent_run


NETS = ("mlp", "lstm")


@dataclass
class PPOConfig:
    """PPO with the clipped objective (PPOClipAgent), GAE; discrete or continuous actions."""
    steps: int = 200_000
    hidden: tuple[int, ...] = (64, 64)     # actor MLP (relu); the value net has the same shape
    learning_rate: float = 3e-4
    collect_steps: int = 2048              # env steps per iteration, all envs together
    epochs: int = 10                       # passes over each batch
    # Environments stepped side by side (one policy call for all: the collection loop, not the
    # network, is what costs time on 2 cores). Each env fills its own row of the batch.
    num_envs: int = 1
    # Gradient steps per epoch: the batch's env rows split into this many minibatches (TF-Agents
    # trains on a whole batch per step, i.e. 1). Must divide num_envs; each row keeps whole
    # trajectories, so GAE is computed over what that env collected.
    minibatches: int = 1
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_ratio: float = 0.2
    entropy_regularization: float = 0.0
    normalize_rewards: bool = True
    eval_episodes: int = 10                # greedy validation after every iteration
    gradient_clipping: float | None = None  # global norm of each gradient step (None: no clip)
    learning_rate_end: float | None = None  # rppo.py: linear decay to this by the last step
    net: str = "mlp"                       # "mlp" or "lstm" (a recurrent policy, see above)
    lstm_units: int = 64                   # the LSTM's size (net="lstm")
    # net="lstm": "own" trains with rl/rppo.py (each row unrolled from the LSTM state it was
    # collected with), "tf-agents" with PPOClipAgent and ActorDistributionRnnNetwork below
    rnn_trainer: str = "own"

    def __post_init__(self):
        self.hidden = int_sizes("hidden", self.hidden)
        if self.steps <= 0 or self.collect_steps <= 0:
            raise QuarlError(f"steps and collect_steps must be positive, got {self.steps}, "
                             f"{self.collect_steps}")
        if self.net not in NETS:
            raise QuarlError(f"unknown net {self.net!r}; known: {', '.join(NETS)}")
        if self.rnn_trainer not in ("own", "tf-agents"):
            raise QuarlError(f"unknown rnn_trainer {self.rnn_trainer!r}; known: own, tf-agents")
        if self.lstm_units <= 0:
            raise QuarlError(f"lstm_units must be positive, got {self.lstm_units}")
        if self.num_envs < 1 or self.minibatches < 1 or self.num_envs % self.minibatches:
            raise QuarlError(f"minibatches ({self.minibatches}) must divide num_envs "
                             f"({self.num_envs}), both positive")



def train_ppo(env_id: str, seed: int, out: Path, config: PPOConfig, progress: bool = True) -> dict:
    """Train PPO on `env_id` into the run directory `out`; returns run.json's contents.
    `net="lstm"` with rnn_trainer "own" (the default) trains with rl/rppo.py instead."""
    if config.net == "lstm" and config.rnn_trainer == "own":
        return train_recurrent_ppo(env_id, seed, out, config, progress)
    import tensorflow as tf  # heavy: only when training
    from tf_agents.replay_buffers import tf_uniform_replay_buffer

    cfg = config
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tf.keras.utils.set_random_seed(seed)
    env, envs = _envs(env_id, seed, cfg)
    actor_net, value_net, norm = _make_nets(env_id, seed, env, cfg)
    agent = _make_agent(env, actor_net, value_net, cfg)
    collect = _collect_policy(agent, actor_net, env, cfg, seed)
    train_on = _trainer(agent, cfg, seed)
    per_env = -(-cfg.collect_steps // cfg.num_envs)
    replay = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=cfg.num_envs, max_length=2 * per_env + 16)
    staged = StagedReplay(replay)   # the iteration's add_batch calls, made in one call

    curve_file = open_new(Run(out).train_curve)     # a link there is not followed
    curve = csv.writer(curve_file)
    curve.writerow(["step", "train_return", "greedy_return", "loss"])
    recent: deque[float] = deque(maxlen=20)
    best = {"return": -np.inf, "step": 0, "net_weights": actor_net.get_weights()}
    t0 = time.perf_counter()
    time_step = envs.reset()
    policy_state = agent.collect_policy.get_initial_state(cfg.num_envs)  # () for an MLP
    episode_return = np.zeros(cfg.num_envs)
    step = 0
    bar = tqdm(total=cfg.steps, desc=f"ppo {env_id}", disable=not progress, mininterval=1.0,
               unit="step")
    while step < cfg.steps:
        time_step, policy_state, taken = _collect(
            collect, envs, time_step, policy_state, episode_return, recent, staged,
            want=min(cfg.collect_steps, cfg.steps - step))
        step += taken
        bar.update(taken)
        staged.flush()
        loss = train_on(replay.gather_all())
        replay.clear()
        collect.refresh()   # the next batch is collected with the updated actor
        greedy = _validation(env_id, actor_net, env, cfg, norm)
        if greedy >= best["return"]:
            best = {"return": greedy, "step": step, "net_weights": actor_net.get_weights()}
        curve.writerow([step, float(np.mean(recent)) if recent else "", greedy, f"{loss:.5g}"])
        curve_file.flush()
        bar.set_postfix(greedy=f"{greedy:.0f}", best=f"{best['return']:.0f}")
    bar.close()
    curve_file.close()
    info = _export(out, env_id, seed, cfg, agent, actor_net, env, best, time.perf_counter() - t0,
                   recent, norm)
    envs.close()
    return info


def _envs(env_id: str, seed: int, cfg: PPOConfig):
    """The first env (seeded `seed`) and the batch of `num_envs` envs stepped side by side."""
    from tf_agents.environments import batched_py_environment  # heavy: TF-Agents

    from .tf_env import make_env  # lazy: imports TensorFlow and TF-Agents (the train extra)
    env = _agent_env(env_id, seed, "ppo", continuous_only=False)
    # env k of the batch starts from seed + 1000 k (env 0 is `env` itself, seeded `seed`)
    envs = batched_py_environment.BatchedPyEnvironment(
        [env] + [make_env(env_id, seed=seed + 1000 * k) for k in range(1, cfg.num_envs)],
        multithreading=False)
    return env, envs


def _make_nets(env_id: str, seed: int, env, cfg: PPOConfig):
    """(actor network, value network, the observation normalization (net="lstm"; else None))."""
    from tf_agents.specs import tensor_spec  # heavy: TF-Agents
    from tf_agents.networks import (actor_distribution_network, actor_distribution_rnn_network,
                                    value_network, value_rnn_network)

    obs_spec = tensor_spec.from_spec(env.observation_spec())
    act_spec = tensor_spec.from_spec(env.action_spec())
    if cfg.net != "lstm":
        actor_net = actor_distribution_network.ActorDistributionNetwork(
            obs_spec, act_spec, fc_layer_params=cfg.hidden,
            discrete_projection_net=categorical_projection_net)
        value_net = value_network.ValueNetwork(obs_spec, fc_layer_params=cfg.hidden)
        return actor_net, value_net, None
    if not act_spec.dtype.is_integer:
        raise QuarlError(f"ppo --net lstm needs a Discrete action space; {env_id} has "
                         f"{env.gym_env.action_space}")
    # inputs normalized by fixed statistics of random play (a preprocessing layer of both
    # networks; the export folds it into the first layer)
    norm = observation_statistics(env_id, seed)
    actor_net = actor_distribution_rnn_network.ActorDistributionRnnNetwork(
        obs_spec, act_spec, preprocessing_layers=normalization_layer(*norm),
        input_fc_layer_params=cfg.hidden, lstm_size=(cfg.lstm_units,),
        output_fc_layer_params=None, discrete_projection_net=categorical_projection_net)
    value_net = value_rnn_network.ValueRnnNetwork(
        obs_spec, preprocessing_layers=normalization_layer(*norm),
        input_fc_layer_params=cfg.hidden, lstm_size=(cfg.lstm_units,),
        output_fc_layer_params=None)
    return actor_net, value_net, norm


def _make_agent(env, actor_net, value_net, cfg: PPOConfig):
    """TF-Agents' PPOClipAgent with GAE, its optimizer's variables built."""
    import tensorflow as tf  # heavy: only when training
    from tf_agents.agents.ppo import ppo_clip_agent
    from tf_agents.specs import tensor_spec

    split = cfg.minibatches > 1
    agent = ppo_clip_agent.PPOClipAgent(
        tensor_spec.from_spec(env.time_step_spec()), tensor_spec.from_spec(env.action_spec()),
        optimizer=tf.keras.optimizers.Adam(learning_rate=cfg.learning_rate),
        actor_net=actor_net, value_net=value_net,
        importance_ratio_clipping=cfg.clip_ratio, lambda_value=cfg.gae_lambda,
        discount_factor=cfg.gamma, entropy_regularization=cfg.entropy_regularization,
        num_epochs=1 if split else cfg.epochs, use_gae=True, normalize_observations=False,
        normalize_rewards=cfg.normalize_rewards, update_normalizers_in_train=not split,
        gradient_clipping=cfg.gradient_clipping,
        train_step_counter=tf.Variable(0, dtype=tf.int64))
    agent.initialize()
    build_optimizers(agent)   # one trace of the train step, not two
    return agent


def _collect_policy(agent, actor_net, env, cfg: PPOConfig, seed: int):
    """(time step, policy state) -> PolicyStep, the policy that collects a batch: for an MLP
    actor over discrete actions PPOPolicy's sampling in numpy (rl/collect.py), else TF-Agents'
    traced collect policy (an LSTM's state, a continuous head's Normal)."""
    if cfg.net == "mlp" and np.issubdtype(env.action_spec().dtype, np.integer):
        return CategoricalSampler(actor_net, np.random.default_rng([seed, 1]),
                                  env.action_spec().dtype)
    return TracedCollect(agent.collect_policy)


class TracedCollect:
    """TF-Agents' collect policy as one traced call per step, with CategoricalSampler's
    interface; `refresh()` has nothing to do, since the traced policy reads the variables."""

    def __init__(self, policy):
        self._action = common_function(policy.action)

    def __call__(self, time_step, policy_state):
        return self._action(time_step, policy_state)

    def refresh(self) -> None:
        pass


def _trainer(agent, cfg: PPOConfig, seed: int):
    """experience -> loss: one iteration's updates, `epochs` passes, each over the shuffled
    minibatches of env rows (or, with one minibatch, PPOClipAgent's own epochs)."""
    import tensorflow as tf  # heavy: only when training

    # An iteration's batch is [rows, T] with T = the steps each env took plus its episode
    # boundaries: T changes from iteration to iteration, and a trace per shape was two thirds
    # of PPO CartPole's time. One trace, with T unknown.
    train_rows = cfg.num_envs // cfg.minibatches
    agent_train = common_function(agent.train, input_signature=[tf.nest.map_structure(
        lambda s: tf.TensorSpec([train_rows, None, *s.shape], s.dtype), agent.collect_data_spec)])
    rows = np.arange(cfg.num_envs)
    shuffle = np.random.default_rng(seed)

    def train_on(experience) -> float:
        if cfg.minibatches == 1:
            return float(agent_train(experience).loss)
        agent.update_reward_normalizer(experience.reward)     # once per batch, not per pass
        losses = []
        for _ in range(cfg.epochs):
            for part in np.array_split(shuffle.permutation(rows), cfg.minibatches):
                sub = tf.nest.map_structure(lambda t: tf.gather(t, part), experience)
                losses.append(float(agent_train(sub).loss))
        return float(np.mean(losses))
    return train_on


def _collect(collect, envs, time_step, policy_state, episode_return: np.ndarray, recent,
             staged: StagedReplay, want: int):
    """Step the envs with the collect policy until `want` transitions are staged; returns the
    time step and policy state to go on from and how many transitions were staged.
    `episode_return` (per env) is updated in place; finished episodes' returns go to `recent`."""
    import tensorflow as tf  # heavy: only when training
    from tf_agents.trajectories import trajectory

    # Every env step is a transition, except the auto reset after an episode's last step:
    # that one is stored as the LAST -> FIRST boundary (PPO masks it) and not counted.
    taken = 0
    while taken < want:
        pstep = collect(time_step, policy_state)
        policy_state = pstep.state
        next_ts = envs.step(np.asarray(pstep.action))
        staged.add(trajectory.from_transition(
            time_step, tf.nest.map_structure(np.asarray, pstep), next_ts))
        real = ~np.asarray(time_step.is_last())
        taken += int(real.sum())
        episode_return += np.where(real, next_ts.reward, 0.0)
        for k in np.flatnonzero(np.asarray(next_ts.is_last())):
            recent.append(float(episode_return[k]))
            episode_return[k] = 0.0
        time_step = next_ts
    return time_step, policy_state, taken


def _validation(env_id: str, actor_net, env, cfg: PPOConfig, norm) -> float:
    """The greedy actor's mean return on the validation seeds."""
    if norm is not None:   # net="lstm"
        layers = rnn_actor_layers(actor_net, *norm)
        seeds = [VALIDATION_SEED_BASE + k for k in range(cfg.eval_episodes)]
        return float(np.mean(play_recurrent(env_id, layers, seeds)[0]))
    return _validation_return(env_id, actor_layers(actor_net, env.action_spec()),
                              cfg.eval_episodes)


def _export(out: Path, env_id: str, seed: int, cfg: PPOConfig, agent, actor_net, env, best: dict,
            train_seconds: float, recent, norm) -> dict:
    """Write the best actor's run directory (rl/recurrent_export.py's for net="lstm")."""
    import tensorflow as tf  # heavy: only when training

    if norm is not None:
        actor_net.set_weights(best["net_weights"])
        return save_recurrent_run(out, env_id, seed, cfg, agent, actor_net, env, best,
                                  train_seconds, recent, norm)
    extra = {}
    if not np.issubdtype(env.action_spec().dtype, np.integer):
        # the Gaussian's std, a bias of the actor: the exported network computes only the mean
        actor_net.set_weights(best["net_weights"])
        dist, _ = actor_net(tf.zeros((1, *env.observation_spec().shape)), step_type=(),
                            network_state=(), training=False)
        extra["action_std"] = dist.stddev().numpy().reshape(-1).tolist()
    return _save_actor_run(out, "ppo", env_id, seed, cfg, agent, actor_net, env, best,
                           train_seconds, recent, extra)
