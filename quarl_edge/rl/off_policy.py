"""SAC, TD3 and DDPG (continuous actions) with TF-Agents: one replay-buffer loop for the three,
read top to bottom: the config, the loop (`train_off_policy`), the agent per algorithm, the
exploring policy (numpy, rl/collect.py), an env step, warm-up noise; the export is common.py's."""
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
from ..core.run import Run
from ..core.schema import int_sizes
from .collect import NoisyActorSampler, SacSampler
from .common import (GradientRounds, ReplaySamples, StagedReplay, build_optimizers, _agent_env,
                     _save_actor_run, _validation_return, actor_layers)

DDPG_OU_DAMPING = 0.15   # DdpgAgent's ou_damping (the OU noise's pull back to 0 per step)


@dataclass
class OffPolicyConfig:
    """SAC, TD3 and DDPG (continuous actions): replay buffer, actor and Q critic, soft targets."""
    steps: int = 20_000
    hidden: tuple[int, ...] = (64, 64)     # actor MLP (relu)
    critic_hidden: tuple[int, ...] = (64, 64)
    actor_learning_rate: float = 1e-3
    critic_learning_rate: float = 1e-3
    alpha_learning_rate: float = 3e-4      # SAC's entropy temperature
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    buffer_size: int = 100_000
    learning_starts: int = 1_000           # env steps (random actions) before the first update
    # The random actions of those first steps: "uniform" (independent per step) or "ou", an
    # Ornstein-Uhlenbeck process (theta 0.15, stationary std 0.3 of the half range) whose
    # actions persist for tens of steps, so that a car can rock itself up a hill: in 10
    # MountainCarContinuous episodes uniform noise reached the flag 0 times, this 3 times.
    warmup_noise: str = "uniform"
    train_every: int = 64                  # env steps per round ...
    updates_per_train: int = 64            # ... and gradient steps per round (1 per env step)
    exploration_noise: float = 0.1         # TD3: Gaussian std; DDPG: OU std (action units)
    # Critic TD loss: "mse" or "huber"; None keeps what each algorithm has always used here (SAC:
    # mse; TD3, DDPG: TF-Agents' default huber). TD3 as published: "mse" with policy_delay 2.
    critic_loss: str | None = None
    policy_delay: int = 1                  # TD3: actor and target updates every N critic updates
    # Give weight 0 to the sampled LAST -> FIRST pairs between episodes (stored so that a
    # truncated step bootstraps from its own next state; as a transition they are bogus: the
    # episode's last state "leads" to the next episode's first state, reward 0, discount 1).
    mask_boundaries: bool = False
    eval_every: int = 1_000
    eval_episodes: int = 10

    def __post_init__(self):
        self.hidden = int_sizes("hidden", self.hidden)
        self.critic_hidden = int_sizes("critic_hidden", self.critic_hidden)
        if self.steps <= 0:
            raise QuarlError(f"steps must be positive, got {self.steps}")
        if self.critic_loss not in (None, "mse", "huber"):
            raise QuarlError(f"critic_loss must be 'mse' or 'huber', got {self.critic_loss!r}")
        if self.warmup_noise not in ("uniform", "ou"):
            raise QuarlError(f"warmup_noise must be 'uniform' or 'ou', got {self.warmup_noise!r}")
        if self.policy_delay < 1:
            raise QuarlError(f"policy_delay must be >= 1, got {self.policy_delay}")



def train_off_policy(algo: str, env_id: str, seed: int, out: Path, config: OffPolicyConfig,
                     progress: bool = True) -> dict:
    """Train `algo` ("sac", "td3" or "ddpg") on `env_id` into the run directory `out`; returns
    run.json's contents."""
    import tensorflow as tf  # heavy: only when training
    from tf_agents.replay_buffers import tf_uniform_replay_buffer

    cfg = config
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tf.keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    env = _agent_env(env_id, seed, algo, continuous_only=True)
    agent, actor_net = _make_agent(algo, env, cfg)
    replay = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=1, max_length=cfg.buffer_size)
    # drawn 2 batches ahead, and each round waits for those draws (ReplaySamples says why)
    samples = ReplaySamples(replay, cfg.batch_size, 2)
    staged = StagedReplay(replay)   # each step's add_batch, made in one call per round
    gradient_round = GradientRounds(agent, samples,   # a round's updates in one traced call
                                    boundary_weights if cfg.mask_boundaries else None)
    space = env.gym_env.action_space
    warmup = WarmupNoise(cfg.warmup_noise, space.low, space.high, rng)
    policy = _collect_policy(algo, actor_net, env.action_spec(), cfg, seed)

    curve_file = open_new(Run(out).train_curve)     # a link there is not followed
    curve = csv.writer(curve_file)
    curve.writerow(["step", "train_return", "greedy_return", "loss"])
    recent: deque[float] = deque(maxlen=20)
    best = {"return": -np.inf, "step": 0, "net_weights": actor_net.get_weights()}
    loss = float("nan")
    t0 = time.perf_counter()
    time_step, episode_return = env.reset(), 0.0
    bar = tqdm(range(1, cfg.steps + 1), desc=f"{algo} {env_id}", disable=not progress,
               mininterval=1.0, unit="step")
    warm = lambda _ts: warmup.next()   # noqa: E731 (the first steps' random actions)
    for step in bar:
        act = warm if step <= cfg.learning_starts else policy
        time_step, reward, episode_end = _env_step(env, time_step, staged, act)
        episode_return += reward
        if episode_end:
            recent.append(episode_return)
            episode_return = 0.0
        if step % cfg.train_every == 0:
            staged.flush()   # the buffer as the steps so far left it, before any sample
        if step >= cfg.learning_starts and step % cfg.train_every == 0:
            loss = gradient_round(cfg.updates_per_train)
            policy.refresh()   # the actor's new weights act from here on
        if step % cfg.eval_every == 0 or step == cfg.steps:
            greedy = _validation_return(env_id, actor_layers(actor_net, env.action_spec()),
                                        cfg.eval_episodes)
            if greedy >= best["return"]:
                best = {"return": greedy, "step": step, "net_weights": actor_net.get_weights()}
            bar.set_postfix(greedy=f"{greedy:.0f}", best=f"{best['return']:.0f}")
            curve.writerow([step, float(np.mean(recent)) if recent else "", greedy,
                            "" if np.isnan(loss) else f"{loss:.5g}"])
            curve_file.flush()
    bar.close()
    curve_file.close()
    info = _save_actor_run(out, algo, env_id, seed, cfg, agent, actor_net, env, best,
                           time.perf_counter() - t0, recent, {})
    env.close()
    return info


def _make_agent(algo: str, env, cfg: OffPolicyConfig):
    """(agent, actor network): SAC's tanh-Gaussian actor, or TD3's and DDPG's deterministic
    one, with a Q critic of `critic_hidden`; its optimizers' variables built."""
    import tensorflow as tf  # heavy: only when training
    from tf_agents.agents.ddpg import actor_network, critic_network, ddpg_agent
    from tf_agents.agents.sac import sac_agent, tanh_normal_projection_network
    from tf_agents.agents.td3 import td3_agent
    from tf_agents.networks import actor_distribution_network
    from tf_agents.specs import tensor_spec
    from tf_agents.utils import common

    obs_spec = tensor_spec.from_spec(env.observation_spec())
    act_spec = tensor_spec.from_spec(env.action_spec())
    ts_spec = tensor_spec.from_spec(env.time_step_spec())
    critic_kw = dict(joint_fc_layer_params=cfg.critic_hidden)
    if algo == "sac":
        critic_kw.update(kernel_initializer="glorot_uniform", last_kernel_initializer="glorot_uniform")
    critic_net = critic_network.CriticNetwork((obs_spec, act_spec), **critic_kw)
    adam = tf.keras.optimizers.Adam
    counter = tf.Variable(0, dtype=tf.int64)
    td_loss = {None: None, "mse": tf.math.squared_difference,
               "huber": common.element_wise_huber_loss}[cfg.critic_loss]
    if algo == "sac":
        actor_net = actor_distribution_network.ActorDistributionNetwork(
            obs_spec, act_spec, fc_layer_params=cfg.hidden,
            continuous_projection_net=tanh_normal_projection_network.TanhNormalProjectionNetwork)
        agent = sac_agent.SacAgent(
            ts_spec, act_spec, critic_network=critic_net, actor_network=actor_net,
            actor_optimizer=adam(cfg.actor_learning_rate),
            critic_optimizer=adam(cfg.critic_learning_rate),
            alpha_optimizer=adam(cfg.alpha_learning_rate), target_update_tau=cfg.tau,
            target_update_period=1, td_errors_loss_fn=td_loss or tf.math.squared_difference,
            gamma=cfg.gamma, train_step_counter=counter)
    else:
        actor_net = actor_network.ActorNetwork(obs_spec, act_spec, fc_layer_params=cfg.hidden)
        common_kw = dict(actor_network=actor_net, critic_network=critic_net,
                         actor_optimizer=adam(cfg.actor_learning_rate),
                         critic_optimizer=adam(cfg.critic_learning_rate),
                         target_update_tau=cfg.tau, gamma=cfg.gamma, train_step_counter=counter,
                         td_errors_loss_fn=td_loss)
        if algo == "td3":
            agent = td3_agent.Td3Agent(ts_spec, act_spec, exploration_noise_std=cfg.exploration_noise,
                                       actor_update_period=cfg.policy_delay,
                                       target_update_period=cfg.policy_delay, **common_kw)
        else:
            agent = ddpg_agent.DdpgAgent(ts_spec, act_spec, ou_stddev=cfg.exploration_noise,
                                         ou_damping=DDPG_OU_DAMPING, **common_kw)
    agent.initialize()
    build_optimizers(agent)   # one trace of the train step, not two
    return agent, actor_net


def _collect_policy(algo: str, actor_net, act_spec, cfg: OffPolicyConfig, seed: int):
    """The exploring policy the loop acts with (numpy time step [1, ...] -> action), in numpy
    (rl/collect.py): SAC's tanh-Gaussian sample; TD3's actor plus Gaussian noise (Td3Agent's
    exploration_noise_std), DDPG's plus Ornstein-Uhlenbeck noise (ou_stddev, ou_damping 0.15)."""
    rng = np.random.default_rng([seed, 1])
    if algo == "sac":
        return SacSampler(actor_net, act_spec, rng)
    return NoisyActorSampler(actor_net, act_spec, rng, "gaussian" if algo == "td3" else "ou",
                             cfg.exploration_noise, damping=DDPG_OU_DAMPING)


def _env_step(env, time_step, staged: StagedReplay, act):
    """One env step with the action `act(time step)`, its transition staged. Returns (the next
    time step, the reward, whether the episode ended); at an episode's end the LAST -> FIRST
    pair is staged too and the next time step is FIRST."""
    from tf_agents.trajectories import policy_step, trajectory  # heavy: TF-Agents

    nts = _numpy_batch(time_step)   # [1, ...]: the policy's input and the staged transition
    action = np.asarray(act(nts), np.float32)
    pstep = policy_step.PolicyStep(action[None], (), ())
    next_ts = env.step(action)
    staged.add(trajectory.from_transition(nts, pstep, _numpy_batch(next_ts)))
    reward, end = float(next_ts.reward), bool(next_ts.is_last())
    if end:
        first = env.step(action)
        staged.add(trajectory.from_transition(_numpy_batch(next_ts), pstep,
                                              _numpy_batch(first)))
        next_ts = first
    return next_ts, reward, end


def _numpy_batch(x):
    """A nest of numpy arrays with a batch axis of 1 (what add_batch takes for one env)."""
    import tensorflow as tf
    return tf.nest.map_structure(lambda v: np.asarray(v)[None], x)


class WarmupNoise:
    """Random actions within [low, high] for an off-policy run's first steps: independent
    uniform draws, or an Ornstein-Uhlenbeck process x += -theta x + sigma sqrt(2 theta) N(0, 1)
    around the range's middle (stationary std sigma = 0.3 of the half range), clipped."""

    THETA, SIGMA = 0.15, 0.3

    def __init__(self, kind: str, low, high, rng: np.random.Generator):
        self.kind, self.rng = kind, rng
        self.low, self.high = np.asarray(low, np.float64), np.asarray(high, np.float64)
        self.x = np.zeros_like(self.low)

    def next(self) -> np.ndarray:
        if self.kind == "uniform":
            return self.rng.uniform(self.low, self.high)
        self.x += (-self.THETA * self.x
                   + self.SIGMA * np.sqrt(2 * self.THETA) * self.rng.normal(size=self.x.shape))
        mid, half = (self.high + self.low) / 2, (self.high - self.low) / 2
        return np.clip(mid + half * self.x, self.low, self.high)


def boundary_weights(experience):
    """Per-sample loss weights of a [B, 2] batch of trajectories: 0 where the pair starts at a
    LAST step (the boundary pair to the next episode's FIRST step), 1 elsewhere."""
    import tensorflow as tf
    return tf.cast(tf.logical_not(experience.is_boundary()[:, 0]), tf.float32)

