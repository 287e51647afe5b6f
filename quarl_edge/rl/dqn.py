"""DQN (double DQN, n-step returns, target network) with TF-Agents, read top to bottom:
the config, the training loop (`train_dqn`), then its steps in the order it takes them: the
envs, the agent, the replay buffer, acting, a step, keeping the best checkpoint, the export.

The greedy policy is evaluated every `eval_every` steps on the validation seeds (10_000 + k);
the best checkpoint is kept. With `select_int8`, checkpoints tied on the best fp32 validation
return are ranked by a `judge` the caller passes in (quarl_edge.measure.selection: the
checkpoint's full-int8 model, converted and calibrated as `quantize` does it, played on the
same validation seeds); this module itself knows nothing of quantization."""
from __future__ import annotations

import csv
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..core.errors import QuarlError
from ..core.files import fresh, open_new
from ..core.schema import int_sizes
from ..core.nets import keras_runner, mlp_q_values
from ..core.run import MODEL_FILES, VALIDATION_SEED_BASE, Run, write_run
from .common import GradientRounds, ReplaySamples, StagedReplay, build_optimizers, run_record
from ..core.envs import play_batched


@dataclass
class DQNConfig:
    """Double DQN with n-step returns; defaults reach a greedy return of 500 on CartPole-v1."""
    steps: int = 40_000                 # environment steps
    hidden: tuple[int, ...] = (64, 64)  # Q-network MLP (relu)
    # Convolutions before the MLP, for image observations (MinAtar): (filters, kernel, stride)
    # each, relu, VALID padding, then a flatten; () for none (an MLP).
    conv: tuple[tuple[int, int, int], ...] = ()
    learning_rate: float = 2.3e-3
    learning_rate_end: float | None = None  # linear decay to this by the last step (None: constant)
    batch_size: int = 64
    gamma: float = 0.99
    n_step: int = 3
    double: bool = True                 # DdqnAgent (double DQN) instead of DqnAgent
    # Batched updates: collect `train_every` env steps with fixed weights, then take
    # `updates_per_train` gradient steps, and copy to the target network every
    # `target_update_period` gradient steps (here: once per round).
    train_every: int = 256
    updates_per_train: int = 128
    target_update_period: int = 128
    target_update_tau: float = 1.0      # 1.0 = hard copy
    buffer_size: int = 100_000
    learning_starts: int = 1_000        # env steps before the first update
    epsilon_start: float = 1.0
    epsilon_end: float = 0.04
    epsilon_decay_steps: int = 8_000
    gradient_clipping: float | None = 10.0
    eval_every: int = 1_000             # env steps between greedy validations
    eval_episodes: int = 10             # validation episodes (seeds 10_000 + k)
    # Deployment-aware checkpoint selection: among checkpoints tied on the best fp32 validation
    # return, keep the one whose full-int8 model (the real converter, calibrated exactly like
    # `quantize`) returns most on the validation seeds. DQN's action gap is tiny next to its
    # Q-values, so whether int8 keeps the return varies from checkpoint to checkpoint.
    select_int8: bool = True
    log_every: int = 250                # env steps between train_curve.csv rows

    def __post_init__(self):
        self.hidden = int_sizes("hidden", self.hidden)
        if not isinstance(self.conv, (list, tuple)):
            raise QuarlError(f"'conv' must be a list of [filters, kernel, stride], got "
                             f"{self.conv!r}")
        self.conv = tuple(int_sizes("conv", layer) for layer in self.conv)
        if any(len(layer) != 3 or min(layer) <= 0 for layer in self.conv):
            raise QuarlError(f"conv layers are (filters, kernel, stride), all positive; got "
                             f"{self.conv}")
        if self.steps <= 0:
            raise QuarlError(f"steps must be positive, got {self.steps}")
        if not self.hidden or min(self.hidden) <= 0:
            raise QuarlError(f"hidden layer sizes must be positive, got {self.hidden}")



def validation_return(env_id: str, q_values, episodes: int) -> float:
    """Mean greedy return on the validation seeds 10_000 + k, k < `episodes`: every episode in
    lockstep, one batched `q_values` call a step (envs.play_batched), not one call per step of
    each episode in turn; each episode still depends on its seed alone."""
    seeds = [VALIDATION_SEED_BASE + k for k in range(episodes)]
    return float(np.mean(play_batched(env_id, q_values, seeds, head="argmax")[0]))


def keras_q_model(obs_shape: tuple[int, ...], hidden: tuple[int, ...], n_actions: int,
                  conv: tuple[tuple[int, int, int], ...] = ()):
    """The plain tf.keras twin of the QNetwork: float32 [None, *obs_shape] -> [None, n_actions]
    (TF-Agents' EncodingNetwork: its Conv2D layers, VALID and relu, then a flatten)."""
    import tensorflow as tf
    inp = tf.keras.Input(shape=obs_shape, dtype=tf.float32, name="observation")
    x = inp
    for i, (filters, kernel, stride) in enumerate(conv):
        x = tf.keras.layers.Conv2D(filters, kernel, strides=stride, activation="relu",
                                   name=f"conv_{i}")(x)
    x = tf.keras.layers.Flatten()(x) if len(obs_shape) != 1 else x
    for i, h in enumerate(hidden):
        x = tf.keras.layers.Dense(h, activation="relu", name=f"dense_{i}")(x)
    out = tf.keras.layers.Dense(n_actions, name="q_values")(x)
    return tf.keras.Model(inp, out, name="qnet")



def train_dqn(env_id: str, seed: int, out: Path, config: DQNConfig, progress: bool = True,
              judge=None) -> dict:
    """Train DQN on `env_id` into the run directory `out`; returns run.json's contents.

    `judge(env_id, val_env, model, n_actions, episodes, workdir) -> float` scores a candidate
    checkpoint (a Keras Q-network) for `select_int8`; required when it is set."""
    import tensorflow as tf  # heavy: only when training

    cfg = config
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tf.keras.utils.set_random_seed(seed)  # python, numpy and TF seeds
    rng = np.random.default_rng(seed)
    env, val_env, n_actions, obs_shape = _envs(env_id, seed, cfg, judge)
    q_net, agent = _make_agent(env, cfg)
    staged, gradient_round = _make_replay(agent, cfg)

    # --- the loop
    curve_file = open_new(Run(out).train_curve)     # a link there is not followed
    curve = csv.writer(curve_file)
    curve.writerow(["step", "train_return", "greedy_return", "loss"])
    recent_returns: deque[float] = deque(maxlen=20)
    episode_return, loss = 0.0, float("nan")
    best = {"return": -np.inf, "int8_return": None, "step": 0, "weights": q_net.get_weights()}
    candidate = keras_q_model(obs_shape, cfg.hidden, n_actions, cfg.conv)   # what `judge` plays
    q_function = _acting_q_function(obs_shape, cfg, n_actions)

    t0 = time.perf_counter()
    weights = q_net.get_weights()  # numpy copy used for acting; refreshed after each update round
    q_values = q_function(weights)
    time_step = env.reset()
    bar = tqdm(range(1, cfg.steps + 1), desc=f"dqn {env_id}", disable=not progress,
               mininterval=1.0, unit="step")
    for step in bar:
        if rng.random() < epsilon(cfg, step):
            action = np.int64(rng.integers(n_actions))
        else:
            action = np.int64(np.argmax(q_values(time_step.observation[None])[0]))
        time_step, reward, episode_end = _env_step(env, time_step, action, staged)
        episode_return += reward
        if episode_end:
            recent_returns.append(episode_return)
            episode_return = 0.0

        if step % cfg.train_every == 0:
            staged.flush()   # the buffer as the steps so far left it, before any sample
        if step >= cfg.learning_starts and step % cfg.train_every == 0:
            loss = gradient_round(cfg.updates_per_train)
            weights = q_net.get_weights()
            q_values = q_function(weights)

        greedy = None
        if step % cfg.eval_every == 0 or step == cfg.steps:
            greedy = validation_return(env_id, q_values, cfg.eval_episodes)
            best = _keep_best(best, greedy, step, weights, cfg, candidate,
                              lambda model: judge(env_id, val_env, model, n_actions,
                                                  cfg.eval_episodes, out))
            bar.set_postfix(train=f"{np.mean(recent_returns) if recent_returns else 0:.0f}",
                            greedy=f"{greedy:.0f}", best=f"{best['return']:.0f}")
        if greedy is not None or step % cfg.log_every == 0:
            train_ret = float(np.mean(recent_returns)) if recent_returns else ""
            curve.writerow([step, train_ret, "" if greedy is None else greedy,
                            "" if np.isnan(loss) else f"{loss:.5g}"])
            curve_file.flush()
    bar.close()
    curve_file.close()
    train_seconds = time.perf_counter() - t0

    _export(out, agent, q_net, best["weights"], obs_shape, n_actions, cfg, seed)
    info = run_record(env_id, "dqn", seed, cfg, best, train_seconds, recent_returns, obs_shape,
                      env.gym_env.action_space, _network_info(cfg),
                      best_int8_validation_return=best["int8_return"])
    write_run(out, info)
    env.close()
    val_env.close()
    return info


def _envs(env_id: str, seed: int, cfg: DQNConfig, judge):
    """The training env (seeded), the judge's validation env, the number of actions and the
    observation shape; refuses what DQN cannot train."""
    from .tf_env import make_env  # lazy: imports TensorFlow and TF-Agents (the train extra)
    env = make_env(env_id, seed=seed)
    val_env = make_env(env_id)
    obs_spec, act_spec = env.observation_spec(), env.action_spec()
    if act_spec.shape != () or not np.issubdtype(act_spec.dtype, np.integer):
        raise QuarlError(f"dqn needs a Discrete action space; {env_id} has "
                         f"{env.gym_env.action_space}")
    if int(act_spec.minimum) != 0:
        raise QuarlError(f"dqn needs actions starting at 0; {env_id} starts at {act_spec.minimum}")
    n_actions = int(act_spec.maximum) + 1
    if cfg.select_int8 and judge is None:
        raise QuarlError("dqn's select_int8 ranks tied checkpoints by their int8 return: pass "
                         "judge=quarl_edge.measure.selection.int8_judge, or set select_int8=False")
    obs_shape = tuple(int(d) for d in obs_spec.shape)
    return env, val_env, n_actions, obs_shape


def _make_agent(env, cfg: DQNConfig):
    """The agent: Q-network, target network, (double) DQN loss with n-step returns."""
    import tensorflow as tf  # heavy: only when training
    from tf_agents.agents.dqn import dqn_agent
    from tf_agents.networks import q_network
    from tf_agents.specs import tensor_spec
    from tf_agents.utils import common

    obs_spec, act_spec = env.observation_spec(), env.action_spec()
    q_net = q_network.QNetwork(tensor_spec.from_spec(obs_spec), tensor_spec.from_spec(act_spec),
                               conv_layer_params=cfg.conv or None, fc_layer_params=cfg.hidden)
    lr = cfg.learning_rate
    if cfg.learning_rate_end is not None:  # decays per gradient step
        rounds = (cfg.steps - cfg.learning_starts) // cfg.train_every
        n_updates = max(1, rounds * cfg.updates_per_train)
        lr = tf.keras.optimizers.schedules.PolynomialDecay(cfg.learning_rate, n_updates,
                                                           cfg.learning_rate_end)
    agent_cls = dqn_agent.DdqnAgent if cfg.double else dqn_agent.DqnAgent
    agent = agent_cls(
        tensor_spec.from_spec(env.time_step_spec()),
        tensor_spec.from_spec(act_spec),
        q_network=q_net,
        optimizer=tf.keras.optimizers.Adam(learning_rate=lr),
        epsilon_greedy=None,  # exploration is done in the training loop
        n_step_update=cfg.n_step,
        target_update_period=cfg.target_update_period,
        target_update_tau=cfg.target_update_tau,
        td_errors_loss_fn=common.element_wise_huber_loss,
        gamma=cfg.gamma,
        gradient_clipping=cfg.gradient_clipping,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
    )
    agent.initialize()
    return q_net, agent


def _make_replay(agent, cfg: DQNConfig):
    """The replay buffer, as (staged adds, a round of gradient steps on its samples)."""
    from tf_agents.replay_buffers import tf_uniform_replay_buffer  # heavy: TF-Agents

    replay = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=1, max_length=cfg.buffer_size)
    staged = StagedReplay(replay)   # each step's add_batch, made in one call per round
    # drawn 2 batches ahead, and each round waits for those draws (ReplaySamples says why)
    samples = ReplaySamples(replay, cfg.batch_size, cfg.n_step + 1)
    build_optimizers(agent)
    gradient_round = GradientRounds(agent, samples)   # a round's updates in one traced call
    return staged, gradient_round


def epsilon(cfg: DQNConfig, step: int) -> float:
    """The exploration rate at `step`: linear from epsilon_start to epsilon_end, then flat."""
    frac = min(1.0, step / max(1, cfg.epsilon_decay_steps))
    return cfg.epsilon_start + frac * (cfg.epsilon_end - cfg.epsilon_start)


def _acting_q_function(obs_shape: tuple[int, ...], cfg: DQNConfig, n_actions: int):
    """weights -> the Q-values function the loop acts with: an MLP in numpy from its weights,
    a CNN through its Keras twin (one traced call)."""
    acting = keras_q_model(obs_shape, cfg.hidden, n_actions, cfg.conv) if cfg.conv else None
    acting_call = keras_runner(acting) if acting is not None else None

    def q_function(w):
        if acting is None:
            return lambda x: mlp_q_values(w, x)
        acting.set_weights(w)
        return acting_call
    return q_function


def _env_step(env, time_step, action, staged: StagedReplay):
    """Step `env` with `action` and stage the transition; returns (the next time step, the
    reward, whether the episode ended). At an episode's end the boundary LAST -> FIRST
    trajectory is stored too (DQN masks it out of the loss) and the next time step is FIRST."""
    import tensorflow as tf  # heavy: only when training
    from tf_agents.trajectories import policy_step, trajectory

    def stage(before, after):
        traj = trajectory.from_transition(before, policy_step.PolicyStep(action, (), ()), after)
        staged.add(tf.nest.map_structure(lambda x: np.asarray(x)[None], traj))

    next_time_step = env.step(action)
    stage(time_step, next_time_step)
    reward, end = float(next_time_step.reward), bool(next_time_step.is_last())
    if end:
        first = env.step(action)  # auto reset: the action is ignored
        stage(next_time_step, first)
        next_time_step = first
    return next_time_step, reward, end


def _keep_best(best: dict, greedy: float, step: int, weights, cfg: DQNConfig, candidate,
               score_int8) -> dict:
    """The best checkpoint after a validation return of `greedy` at `step`: ties keep the later,
    longer-trained one, and with select_int8 tied checkpoints are ranked by `score_int8(model)`
    (the checkpoint's weights in `candidate`, a Keras Q-network)."""
    if greedy < best["return"]:
        return best
    int8 = None
    if cfg.select_int8:
        candidate.set_weights(weights)
        int8 = score_int8(candidate)
    if greedy > best["return"] or int8 is None or int8 >= (best["int8_return"] or 0):
        return {"return": greedy, "int8_return": int8, "step": step, "weights": weights}
    return best


def _export(out: Path, agent, q_net, weights, obs_shape, n_actions: int, cfg: DQNConfig,
            seed: int) -> None:
    """Keep the best checkpoint: policy/ (SavedModel) and its plain Keras twin qnet.keras,
    checked against the agent's network on random observations."""
    import tensorflow as tf  # heavy: only when training
    from tf_agents.policies import policy_saver

    q_net.set_weights(weights)
    policy_dir = Run(out).policy_dir
    policy_saver.PolicySaver(agent.policy, batch_size=None).save(str(fresh(policy_dir)))

    model = keras_q_model(obs_shape, cfg.hidden, n_actions, cfg.conv)
    model.set_weights(weights)
    probe = np.random.default_rng(seed + 1).normal(size=(256, *obs_shape)).astype(np.float32)
    agent_q = q_net(tf.constant(probe), training=False)[0].numpy()
    keras_q = model(probe, training=False).numpy()
    if not np.allclose(agent_q, keras_q, rtol=1e-5, atol=1e-5):
        raise RuntimeError("the Keras copy of the Q-network disagrees with the TF-Agents network")
    model.save(fresh(Run(out).network_file(MODEL_FILES["dqn"])))


def _network_info(cfg: DQNConfig) -> dict:
    """run.json's "network": the Q-network's shape."""
    if cfg.conv:
        return {"type": "cnn", "conv": [list(c) for c in cfg.conv], "hidden": list(cfg.hidden),
                "activation": "relu"}
    return {"type": "mlp", "hidden": list(cfg.hidden), "activation": "relu"}
