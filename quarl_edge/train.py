"""Train an RL policy with TF-Agents on a Gymnasium environment and write a run directory.

One straight-line training loop per algorithm (CleanRL style), configured by a dataclass.
`train()` writes into the run directory RUN:

    RUN/run.json          what was trained, how, how well, with which package versions
    RUN/policy/           the best greedy policy (tf_agents PolicySaver SavedModel)
    RUN/qnet.keras        the same Q-network as a plain tf.keras model (float32 obs -> Q-values);
                          this is what quantize.py converts
    RUN/train_curve.csv   step, running train episode return, greedy validation return, loss

The greedy policy is evaluated every `eval_every` steps on validation seeds (10_000 + k), never
on the test seeds 0..N that evaluation uses later, and the best checkpoint is kept.
"""
from __future__ import annotations

import csv
import json
import platform
import shutil
import time
from collections import deque
from dataclasses import asdict, dataclass, fields
from importlib import metadata
from pathlib import Path

import numpy as np

from .errors import QuarlError

VALIDATION_SEED_BASE = 10_000


@dataclass
class DQNConfig:
    """Double DQN with n-step returns; defaults reach a greedy return of 500 on CartPole-v1."""
    steps: int = 40_000                 # environment steps
    hidden: tuple[int, ...] = (64, 64)  # Q-network MLP (relu)
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
        self.hidden = tuple(int(h) for h in self.hidden)
        if self.steps <= 0:
            raise QuarlError(f"steps must be positive, got {self.steps}")
        if not self.hidden or min(self.hidden) <= 0:
            raise QuarlError(f"hidden layer sizes must be positive, got {self.hidden}")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("tensorflow-cpu", "tensorflow", "tf-agents", "tensorflow-probability",
                 "gymnasium", "numpy", "tflite-runtime", "quarl-edge"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def mlp_q_values(weights: list[np.ndarray], obs: np.ndarray) -> np.ndarray:
    """Q-values of an MLP given its [W1, b1, ..., Wout, bout] (relu hidden layers), in numpy.

    Used for fast greedy evaluation during training (no TF call per step)."""
    x = obs.reshape(obs.shape[0], -1).astype(np.float32)
    for i in range(0, len(weights) - 2, 2):
        x = np.maximum(x @ weights[i] + weights[i + 1], 0.0)
    return x @ weights[-2] + weights[-1]


def greedy_return(env, weights: list[np.ndarray], seed: int) -> float:
    """Undiscounted return of one greedy episode of the MLP `weights` from reset(seed=seed)."""
    from .envs import run_episode
    return run_episode(env, lambda obs: int(np.argmax(mlp_q_values(weights, obs[None])[0])),
                       seed)[0]


def int8_validation_return(env_id: str, val_env, model, n_actions: int, episodes: int,
                           workdir: Path) -> float:
    """Greedy validation return of `model` converted to full int8 as `quantize` would do it."""
    from .envs import run_episode
    from .quantize import convert_keras, rollout_observations, tflite_runner

    calibration = rollout_observations(env_id, model.get_weights(), n_actions)
    path = workdir / "candidate-int8.tflite"
    path.write_bytes(convert_keras(model, "int8", calibration))
    run = tflite_runner(path)
    returns = [run_episode(val_env, lambda obs: int(np.argmax(run(obs))), VALIDATION_SEED_BASE + k)[0]
               for k in range(episodes)]
    path.unlink()
    return float(np.mean(returns))


def keras_q_model(obs_shape: tuple[int, ...], hidden: tuple[int, ...], n_actions: int):
    """The plain tf.keras twin of the QNetwork: float32 [None, *obs_shape] -> [None, n_actions]."""
    import tensorflow as tf
    inp = tf.keras.Input(shape=obs_shape, dtype=tf.float32, name="observation")
    x = tf.keras.layers.Flatten()(inp) if len(obs_shape) != 1 else inp
    for i, h in enumerate(hidden):
        x = tf.keras.layers.Dense(h, activation="relu", name=f"dense_{i}")(x)
    out = tf.keras.layers.Dense(n_actions, name="q_values")(x)
    return tf.keras.Model(inp, out, name="qnet")


ACTIVATIONS = {"linear": lambda x: x, "relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh}


def mlp_layers(model) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """The Dense layers of a plain Keras MLP as (kernel, bias, activation name)."""
    layers = []
    for layer in model.layers:
        if layer.__class__.__name__ in ("InputLayer", "Flatten"):
            continue
        if layer.__class__.__name__ != "Dense":
            raise QuarlError(f"layer {layer.name} ({layer.__class__.__name__}) is not Dense: "
                             "only MLPs are supported")
        act = layer.get_config()["activation"]
        if act not in ACTIVATIONS:
            raise QuarlError(f"layer {layer.name}: activation {act!r} is not supported")
        kernel, bias = layer.get_weights()
        layers.append((kernel, bias, act))
    return layers


def mlp_forward(layers: list[tuple[np.ndarray, np.ndarray, str]], obs: np.ndarray) -> np.ndarray:
    """Outputs of the MLP `layers` (from mlp_layers) for a batch of observations, in numpy."""
    x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
    for kernel, bias, act in layers:
        x = ACTIVATIONS[act](x @ kernel + bias)
    return x


# The plain Keras network each algorithm exports into the run directory (what gets converted).
MODEL_FILES = {"dqn": "qnet.keras", "ppo": "policy.keras", "sac": "policy.keras",
               "td3": "policy.keras", "ddpg": "policy.keras"}


def model_path(run_dir: Path) -> Path:
    """RUN/<model file>: run.json's "model_file" (qnet.keras for runs that predate it)."""
    meta = Path(run_dir) / "run.json"
    name = "qnet.keras"
    if meta.is_file():
        name = json.loads(meta.read_text()).get("model_file", name)
    return Path(run_dir) / name


def load_keras(run_dir: Path):
    """The run's policy network (RUN/qnet.keras for DQN, RUN/policy.keras for the actor of the
    other algorithms) as a tf.keras model: float32 observations -> Q-values, logits or actions."""
    import tensorflow as tf
    path = model_path(run_dir)
    if not path.is_file():
        raise QuarlError(f"no trained model at {path}: run `train` into {run_dir} first")
    return tf.keras.models.load_model(path, compile=False)


def load_run(run_dir: Path) -> dict:
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise QuarlError(f"{run_dir} is not a run directory (no run.json)")
    return json.loads(path.read_text())


# --------------------------------------------------------------------------------------- DQN
def train_dqn(env_id: str, seed: int, out: Path, config: DQNConfig, progress: bool = True) -> dict:
    import tensorflow as tf
    from tf_agents.agents.dqn import dqn_agent
    from tf_agents.networks import q_network
    from tf_agents.policies import policy_saver
    from tf_agents.replay_buffers import tf_uniform_replay_buffer
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import policy_step, trajectory
    from tf_agents.utils import common
    from tqdm import tqdm

    from .envs import make_env

    cfg = config
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tf.keras.utils.set_random_seed(seed)  # python, numpy and TF seeds
    rng = np.random.default_rng(seed)

    env = make_env(env_id, seed=seed)
    val_env = make_env(env_id)
    obs_spec, act_spec = env.observation_spec(), env.action_spec()
    if act_spec.shape != () or not np.issubdtype(act_spec.dtype, np.integer):
        raise QuarlError(f"dqn needs a Discrete action space; {env_id} has "
                         f"{env.gym_env.action_space}")
    if int(act_spec.minimum) != 0:
        raise QuarlError(f"dqn needs actions starting at 0; {env_id} starts at {act_spec.minimum}")
    n_actions = int(act_spec.maximum) + 1
    obs_shape = tuple(int(d) for d in obs_spec.shape)

    # --- agent: Q-network, target network, (double) DQN loss with n-step returns
    q_net = q_network.QNetwork(tensor_spec.from_spec(obs_spec), tensor_spec.from_spec(act_spec),
                               fc_layer_params=cfg.hidden)
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
        epsilon_greedy=None,  # exploration is done in the loop below
        n_step_update=cfg.n_step,
        target_update_period=cfg.target_update_period,
        target_update_tau=cfg.target_update_tau,
        td_errors_loss_fn=common.element_wise_huber_loss,
        gamma=cfg.gamma,
        gradient_clipping=cfg.gradient_clipping,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
    )
    agent.initialize()
    agent_train = common.function(agent.train)

    replay = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=1, max_length=cfg.buffer_size)

    @tf.function
    def add_batch(traj):
        replay.add_batch(traj)
    samples = iter(replay.as_dataset(sample_batch_size=cfg.batch_size,
                                     num_steps=cfg.n_step + 1).prefetch(2))

    def epsilon(step: int) -> float:
        frac = min(1.0, step / max(1, cfg.epsilon_decay_steps))
        return cfg.epsilon_start + frac * (cfg.epsilon_end - cfg.epsilon_start)

    # --- the loop
    curve_file = (out / "train_curve.csv").open("w", newline="")
    curve = csv.writer(curve_file)
    curve.writerow(["step", "train_return", "greedy_return", "loss"])
    recent_returns: deque[float] = deque(maxlen=20)
    episode_return, loss = 0.0, float("nan")
    best = {"return": -np.inf, "int8_return": None, "step": 0, "weights": q_net.get_weights()}
    candidate = keras_q_model(obs_shape, cfg.hidden, n_actions)
    empty_info = ()

    t0 = time.perf_counter()
    weights = q_net.get_weights()  # numpy copy used for acting; refreshed after each update round
    time_step = env.reset()
    bar = tqdm(range(1, cfg.steps + 1), desc=f"dqn {env_id}", disable=not progress,
               mininterval=1.0, unit="step")
    for step in bar:
        obs = time_step.observation
        if rng.random() < epsilon(step):
            action = np.int64(rng.integers(n_actions))
        else:
            action = np.int64(np.argmax(mlp_q_values(weights, obs[None])[0]))
        next_time_step = env.step(action)
        traj = trajectory.from_transition(time_step, policy_step.PolicyStep(action, (), empty_info),
                                          next_time_step)
        add_batch(tf.nest.map_structure(lambda x: tf.convert_to_tensor(x)[None], traj))
        episode_return += float(next_time_step.reward)
        if next_time_step.is_last():
            recent_returns.append(episode_return)
            episode_return = 0.0
            # the boundary LAST -> FIRST trajectory is stored too; DQN masks it out of the loss
            first = env.step(action)  # auto reset: the action is ignored
            traj = trajectory.from_transition(next_time_step,
                                              policy_step.PolicyStep(action, (), empty_info), first)
            add_batch(tf.nest.map_structure(lambda x: tf.convert_to_tensor(x)[None], traj))
            next_time_step = first
        time_step = next_time_step

        if step >= cfg.learning_starts and step % cfg.train_every == 0:
            for _ in range(cfg.updates_per_train):
                experience, _ = next(samples)
                loss = float(agent_train(experience).loss)
            weights = q_net.get_weights()

        greedy = None
        if step % cfg.eval_every == 0 or step == cfg.steps:
            greedy = float(np.mean([greedy_return(val_env, weights, VALIDATION_SEED_BASE + k)
                                    for k in range(cfg.eval_episodes)]))
            if greedy >= best["return"]:  # ties: keep the later, longer-trained one
                int8 = None
                if cfg.select_int8:
                    candidate.set_weights(weights)
                    int8 = int8_validation_return(env_id, val_env, candidate, n_actions,
                                                  cfg.eval_episodes, out)
                if greedy > best["return"] or int8 is None or int8 >= (best["int8_return"] or 0):
                    best = {"return": greedy, "int8_return": int8, "step": step, "weights": weights}
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

    # --- keep the best checkpoint: SavedModel policy and its plain Keras twin
    q_net.set_weights(best["weights"])
    policy_dir = out / "policy"
    if policy_dir.exists():
        shutil.rmtree(policy_dir)
    policy_saver.PolicySaver(agent.policy, batch_size=None).save(str(policy_dir))

    model = keras_q_model(obs_shape, cfg.hidden, n_actions)
    model.set_weights(best["weights"])
    probe = np.random.default_rng(seed + 1).normal(size=(256, *obs_shape)).astype(np.float32)
    agent_q = q_net(tf.constant(probe), training=False)[0].numpy()
    keras_q = model(probe, training=False).numpy()
    if not np.allclose(agent_q, keras_q, rtol=1e-5, atol=1e-5):
        raise RuntimeError("the Keras copy of the Q-network disagrees with the TF-Agents network")
    model.save(out / "qnet.keras")

    info = {
        "env": env_id,
        "algo": "dqn",
        "seed": seed,
        "steps": cfg.steps,
        "train_seconds": round(train_seconds, 2),
        "best_greedy_return": best["return"],
        "best_step": best["step"],
        "best_int8_validation_return": best["int8_return"],
        "validation_seeds": [VALIDATION_SEED_BASE, VALIDATION_SEED_BASE + cfg.eval_episodes - 1],
        "final_train_return": float(np.mean(recent_returns)) if recent_returns else None,
        "obs_shape": list(obs_shape),
        "n_actions": n_actions,
        "model_file": MODEL_FILES["dqn"],
        "action_space": _space_info(env.gym_env.action_space),
        "network": {"type": "mlp", "hidden": list(cfg.hidden), "activation": "relu"},
        "hyperparameters": {k: (list(v) if isinstance(v, tuple) else v)
                            for k, v in asdict(cfg).items()},
        "versions": package_versions(),
    }
    (out / "run.json").write_text(json.dumps(info, indent=2) + "\n")
    env.close()
    val_env.close()
    return info


# ------------------------------------------------------------------ actor networks (PPO, SAC, ...)
def keras_mlp(obs_shape: tuple[int, ...], layers: list[tuple[np.ndarray, np.ndarray, str]],
              name: str = "policy"):
    """A plain tf.keras MLP float32 [None, *obs_shape] -> [None, n_out] holding `layers`
    ((kernel, bias, activation) as from mlp_layers / actor_layers)."""
    import tensorflow as tf
    inp = tf.keras.Input(shape=obs_shape, dtype=tf.float32, name="observation")
    x = tf.keras.layers.Flatten()(inp) if len(obs_shape) != 1 else inp
    dense = []
    for i, (kernel, bias, act) in enumerate(layers):
        last = i == len(layers) - 1
        dense.append(tf.keras.layers.Dense(kernel.shape[1], activation=act,
                                           name="output" if last else f"dense_{i}"))
        x = dense[-1](x)
    model = tf.keras.Model(inp, x, name=name)
    for layer, (kernel, bias, _) in zip(dense, layers):
        layer.set_weights([kernel, bias])
    return model


def _dense_layers(net) -> list:
    """The Dense layers of a TF-Agents network, in call order (depth first)."""
    import tensorflow as tf
    out = []

    def walk(layer):
        for sub in getattr(layer, "layers", []):
            if isinstance(sub, tf.keras.layers.Dense):
                out.append(sub)
            else:
                walk(sub)
    walk(net)
    return out


def actor_layers(net, act_spec) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """The deterministic (greedy) policy of a TF-Agents actor network as a plain MLP.

    - CategoricalProjectionNetwork (PPO, discrete): the logits layer; action = argmax.
    - NormalProjectionNetwork (PPO, continuous): the means layer, tanh, scaled to the bounds
      (tanh_squash_to_spec); action = the mean.
    - TanhNormalProjectionNetwork (SAC): the means half of the projection layer, tanh, scaled
      (SquashToSpecNormal's mode).
    - ActorNetwork (DDPG, TD3): its tanh action layer, scaled (scale_to_spec).
    The bounds scaling (center + half_range * tanh) is a last Dense layer with a diagonal kernel
    ("output"), so the exported network is FULLY_CONNECTED/TANH ops only."""
    dense = _dense_layers(net)
    layers = []
    for d in dense:
        kernel, bias = (w.astype(np.float32) for w in d.get_weights())
        layers.append([kernel, bias, d.get_config()["activation"]])
    kind = type(net).__name__
    projection = ""
    if kind == "ActorDistributionNetwork":
        projection = type(tf_nest_first(net._projection_networks)).__name__
    if projection == "CategoricalProjectionNetwork":
        return [tuple(x) for x in layers]
    if np.issubdtype(act_spec.dtype, np.integer):
        raise QuarlError(f"unsupported actor {kind}/{projection} for discrete actions")
    n = int(np.prod(act_spec.shape))
    if projection == "TanhNormalProjectionNetwork":
        kernel, bias, _ = layers[-1]
        layers[-1] = [kernel[:, :n], bias[:n], "tanh"]
    elif projection == "NormalProjectionNetwork":
        layers[-1][2] = "tanh"
    elif kind != "ActorNetwork":
        raise QuarlError(f"unsupported actor network {kind}/{projection}")
    if layers[-1][2] != "tanh":
        raise RuntimeError(f"actor head is {layers[-1][2]}, expected tanh")
    low = np.broadcast_to(np.asarray(act_spec.minimum, np.float32), act_spec.shape).reshape(-1)
    high = np.broadcast_to(np.asarray(act_spec.maximum, np.float32), act_spec.shape).reshape(-1)
    half, center = (high - low) / 2, (high + low) / 2
    layers.append([np.diag(half).astype(np.float32), center.astype(np.float32), "linear"])
    return [tuple(x) for x in layers]


def tf_nest_first(x):
    import tensorflow as tf
    return tf.nest.flatten(x)[0]


def _batched_step(x):
    import tensorflow as tf
    return tf.nest.map_structure(lambda v: tf.convert_to_tensor(v)[None], x)


def _unbatched(x):
    import tensorflow as tf
    return tf.nest.map_structure(lambda v: v[0], x)


def _validation_return(env_id: str, layers, episodes: int) -> float:
    from .envs import play_batched
    seeds = [VALIDATION_SEED_BASE + k for k in range(episodes)]
    return float(np.mean(play_batched(env_id, lambda x: mlp_forward(layers, x), seeds)[0]))


def _save_actor_run(out: Path, algo: str, env_id: str, seed: int, cfg, agent, actor_net, env,
                    best: dict, train_seconds: float, recent_returns, extra: dict) -> dict:
    """Write policy/ (greedy PolicySaver), policy.keras (checked against the agent's greedy
    policy) and run.json for an actor-critic run; returns run.json's contents."""
    import tensorflow as tf
    from tf_agents.policies import greedy_policy, policy_saver
    from tf_agents.trajectories import time_step as ts

    obs_spec, act_spec = env.observation_spec(), env.action_spec()
    obs_shape = tuple(int(d) for d in obs_spec.shape)
    actor_net.set_weights(best["net_weights"])
    policy = greedy_policy.GreedyPolicy(agent.policy)
    policy_dir = out / "policy"
    if policy_dir.exists():
        shutil.rmtree(policy_dir)
    policy_saver.PolicySaver(policy, batch_size=None).save(str(policy_dir))

    layers = actor_layers(actor_net, act_spec)
    model = keras_mlp(obs_shape, layers)
    low = np.asarray(obs_spec.minimum, np.float32)
    high = np.asarray(obs_spec.maximum, np.float32)
    rng = np.random.default_rng(seed + 1)
    probe = rng.uniform(np.maximum(low, -3), np.minimum(high, 3),
                        size=(256, *obs_shape)).astype(np.float32)
    step = ts.restart(tf.constant(probe), batch_size=len(probe))
    agent_actions = policy.action(step).action.numpy()
    keras_out = model(probe, training=False).numpy()
    if np.issubdtype(act_spec.dtype, np.integer):
        top2 = np.sort(keras_out, axis=1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 1e-4
        ok = np.array_equal(keras_out.argmax(1)[clear] + int(act_spec.minimum),
                            agent_actions.reshape(-1)[clear])
    else:
        ok = np.allclose(np.clip(keras_out.reshape(agent_actions.shape), act_spec.minimum,
                                 act_spec.maximum), agent_actions, rtol=1e-4, atol=1e-4)
    if not ok:
        raise RuntimeError(f"the Keras copy of the {algo} actor disagrees with its greedy policy")
    model.save(out / MODEL_FILES[algo])

    space = env.gym_env.action_space
    info = {
        "env": env_id,
        "algo": algo,
        "seed": seed,
        "steps": cfg.steps,
        "train_seconds": round(train_seconds, 2),
        "best_greedy_return": best["return"],
        "best_step": best["step"],
        "validation_seeds": [VALIDATION_SEED_BASE, VALIDATION_SEED_BASE + cfg.eval_episodes - 1],
        "final_train_return": float(np.mean(recent_returns)) if recent_returns else None,
        "obs_shape": list(obs_shape),
        "model_file": MODEL_FILES[algo],
        "action_space": _space_info(space),
        "network": {"type": "mlp", "hidden": list(cfg.hidden), "activation": "relu",
                    "head": layers[-1][2] if hasattr(space, "n") else "tanh, scaled to bounds"},
        "hyperparameters": {k: (list(v) if isinstance(v, tuple) else v)
                            for k, v in asdict(cfg).items()},
        "versions": package_versions(),
        **extra,
    }
    if hasattr(space, "n"):
        info["n_actions"] = int(space.n)
    (out / "run.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def _space_info(space) -> dict:
    if hasattr(space, "n"):
        return {"type": "discrete", "n": int(space.n), "start": int(space.start)}
    return {"type": "box", "shape": list(space.shape), "low": np.asarray(space.low).tolist(),
            "high": np.asarray(space.high).tolist()}


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

    def __post_init__(self):
        self.hidden = tuple(int(h) for h in self.hidden)
        if self.steps <= 0 or self.collect_steps <= 0:
            raise QuarlError(f"steps and collect_steps must be positive, got {self.steps}, "
                             f"{self.collect_steps}")
        if self.num_envs < 1 or self.minibatches < 1 or self.num_envs % self.minibatches:
            raise QuarlError(f"minibatches ({self.minibatches}) must divide num_envs "
                             f"({self.num_envs}), both positive")


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
        self.hidden = tuple(int(h) for h in self.hidden)
        self.critic_hidden = tuple(int(h) for h in self.critic_hidden)
        if self.steps <= 0:
            raise QuarlError(f"steps must be positive, got {self.steps}")
        if self.critic_loss not in (None, "mse", "huber"):
            raise QuarlError(f"critic_loss must be 'mse' or 'huber', got {self.critic_loss!r}")
        if self.warmup_noise not in ("uniform", "ou"):
            raise QuarlError(f"warmup_noise must be 'uniform' or 'ou', got {self.warmup_noise!r}")
        if self.policy_delay < 1:
            raise QuarlError(f"policy_delay must be >= 1, got {self.policy_delay}")


def _agent_env(env_id: str, seed: int, algo: str, continuous_only: bool):
    from .envs import make_env
    env = make_env(env_id, seed=seed)
    act_spec = env.action_spec()
    if continuous_only and np.issubdtype(act_spec.dtype, np.integer):
        raise QuarlError(f"{algo} needs a Box (continuous) action space; {env_id} has "
                         f"{env.gym_env.action_space} (use dqn or ppo)")
    if np.issubdtype(act_spec.dtype, np.integer) and act_spec.shape != ():
        raise QuarlError(f"only a single Discrete action is supported; {env_id} has "
                         f"{env.gym_env.action_space}")
    return env


def train_ppo(env_id: str, seed: int, out: Path, config: PPOConfig, progress: bool = True) -> dict:
    import tensorflow as tf
    from tf_agents.agents.ppo import ppo_clip_agent
    from tf_agents.environments import batched_py_environment
    from tf_agents.networks import actor_distribution_network, value_network
    from tf_agents.replay_buffers import tf_uniform_replay_buffer
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import trajectory
    from tqdm import tqdm

    from .envs import make_env

    cfg = config
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tf.keras.utils.set_random_seed(seed)
    env = _agent_env(env_id, seed, "ppo", continuous_only=False)
    # env k of the batch starts from seed + 1000 k (env 0 is `env` itself, seeded `seed`)
    envs = batched_py_environment.BatchedPyEnvironment(
        [env] + [make_env(env_id, seed=seed + 1000 * k) for k in range(1, cfg.num_envs)],
        multithreading=False)
    obs_spec = tensor_spec.from_spec(env.observation_spec())
    act_spec = tensor_spec.from_spec(env.action_spec())
    actor_net = actor_distribution_network.ActorDistributionNetwork(
        obs_spec, act_spec, fc_layer_params=cfg.hidden)
    value_net = value_network.ValueNetwork(obs_spec, fc_layer_params=cfg.hidden)
    split = cfg.minibatches > 1
    agent = ppo_clip_agent.PPOClipAgent(
        tensor_spec.from_spec(env.time_step_spec()), act_spec,
        optimizer=tf.keras.optimizers.Adam(learning_rate=cfg.learning_rate),
        actor_net=actor_net, value_net=value_net,
        importance_ratio_clipping=cfg.clip_ratio, lambda_value=cfg.gae_lambda,
        discount_factor=cfg.gamma, entropy_regularization=cfg.entropy_regularization,
        num_epochs=1 if split else cfg.epochs, use_gae=True, normalize_observations=False,
        normalize_rewards=cfg.normalize_rewards, update_normalizers_in_train=not split,
        train_step_counter=tf.Variable(0, dtype=tf.int64))
    agent.initialize()
    collect = common_function(agent.collect_policy.action)
    agent_train = common_function(agent.train)
    per_env = -(-cfg.collect_steps // cfg.num_envs)
    replay = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=cfg.num_envs, max_length=2 * per_env + 16)
    rows = np.arange(cfg.num_envs)
    shuffle = np.random.default_rng(seed)

    def train_on(experience) -> float:
        """One iteration's updates: `epochs` passes, each over the shuffled minibatches of rows."""
        if not split:
            return float(agent_train(experience).loss)
        agent.update_reward_normalizer(experience.reward)     # once per batch, not per pass
        losses = []
        for _ in range(cfg.epochs):
            for part in np.array_split(shuffle.permutation(rows), cfg.minibatches):
                sub = tf.nest.map_structure(lambda t: tf.gather(t, part), experience)
                losses.append(float(agent_train(sub).loss))
        return float(np.mean(losses))

    curve_file = (out / "train_curve.csv").open("w", newline="")
    curve = csv.writer(curve_file)
    curve.writerow(["step", "train_return", "greedy_return", "loss"])
    recent: deque[float] = deque(maxlen=20)
    best = {"return": -np.inf, "step": 0, "net_weights": actor_net.get_weights()}
    t0 = time.perf_counter()
    time_step = envs.reset()
    episode_return = np.zeros(cfg.num_envs)
    step = 0
    bar = tqdm(total=cfg.steps, desc=f"ppo {env_id}", disable=not progress, mininterval=1.0,
               unit="step")
    while step < cfg.steps:
        # Every env step is a transition, except the auto reset after an episode's last step:
        # that one is stored as the LAST -> FIRST boundary (PPO masks it) and not counted.
        want, taken = min(cfg.collect_steps, cfg.steps - step), 0
        while taken < want:
            pstep = collect(time_step)
            next_ts = envs.step(pstep.action.numpy())
            replay.add_batch(trajectory.from_transition(time_step, pstep, next_ts))
            real = ~np.asarray(time_step.is_last())
            taken += int(real.sum())
            episode_return += np.where(real, next_ts.reward, 0.0)
            for k in np.flatnonzero(np.asarray(next_ts.is_last())):
                recent.append(float(episode_return[k]))
                episode_return[k] = 0.0
            time_step = next_ts
        step += taken
        bar.update(taken)
        loss = train_on(replay.gather_all())
        replay.clear()
        layers = actor_layers(actor_net, env.action_spec())
        greedy = _validation_return(env_id, layers, cfg.eval_episodes)
        if greedy >= best["return"]:
            best = {"return": greedy, "step": step, "net_weights": actor_net.get_weights()}
        curve.writerow([step, float(np.mean(recent)) if recent else "", greedy, f"{loss:.5g}"])
        curve_file.flush()
        bar.set_postfix(greedy=f"{greedy:.0f}", best=f"{best['return']:.0f}")
    bar.close()
    curve_file.close()
    extra = {}
    if not np.issubdtype(env.action_spec().dtype, np.integer):
        # the Gaussian's std, a bias of the actor: the exported network computes only the mean
        actor_net.set_weights(best["net_weights"])
        dist, _ = actor_net(tf.zeros((1, *obs_spec.shape)), step_type=(), network_state=(),
                            training=False)
        extra["action_std"] = dist.stddev().numpy().reshape(-1).tolist()
    info = _save_actor_run(out, "ppo", env_id, seed, cfg, agent, actor_net, env, best,
                           time.perf_counter() - t0, recent, extra)
    envs.close()
    return info


def common_function(fn):
    from tf_agents.utils import common
    return common.function(fn)


def train_off_policy(algo: str, env_id: str, seed: int, out: Path, config: OffPolicyConfig,
                     progress: bool = True) -> dict:
    import tensorflow as tf
    from tf_agents.agents.ddpg import actor_network, critic_network, ddpg_agent
    from tf_agents.agents.sac import sac_agent, tanh_normal_projection_network
    from tf_agents.agents.td3 import td3_agent
    from tf_agents.networks import actor_distribution_network
    from tf_agents.replay_buffers import tf_uniform_replay_buffer
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import policy_step, trajectory
    from tf_agents.utils import common
    from tqdm import tqdm

    cfg = config
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tf.keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    env = _agent_env(env_id, seed, algo, continuous_only=True)
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
                                         ou_damping=0.15, **common_kw)
    agent.initialize()
    collect = common_function(agent.collect_policy.action)
    agent_train = common_function(agent.train)
    replay = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=1, max_length=cfg.buffer_size)
    samples = iter(replay.as_dataset(sample_batch_size=cfg.batch_size, num_steps=2).prefetch(2))
    space = env.gym_env.action_space
    warmup = WarmupNoise(cfg.warmup_noise, space.low, space.high, rng)

    curve_file = (out / "train_curve.csv").open("w", newline="")
    curve = csv.writer(curve_file)
    curve.writerow(["step", "train_return", "greedy_return", "loss"])
    recent: deque[float] = deque(maxlen=20)
    best = {"return": -np.inf, "step": 0, "net_weights": actor_net.get_weights()}
    loss = float("nan")
    t0 = time.perf_counter()
    time_step, episode_return = env.reset(), 0.0
    policy_state = agent.collect_policy.get_initial_state(1)
    bar = tqdm(range(1, cfg.steps + 1), desc=f"{algo} {env_id}", disable=not progress,
               mininterval=1.0, unit="step")
    for step in bar:
        bts = _batched_step(time_step)
        if step <= cfg.learning_starts:
            action = warmup.next().astype(np.float32)
            pstep = policy_step.PolicyStep(tf.constant(action[None]), policy_state, ())
        else:
            pstep = collect(bts, policy_state)
            policy_state = pstep.state
            action = pstep.action.numpy()[0]
        pstep = policy_step.PolicyStep(pstep.action, (), ())
        next_ts = env.step(action)
        replay.add_batch(trajectory.from_transition(bts, pstep, _batched_step(next_ts)))
        episode_return += float(next_ts.reward)
        if next_ts.is_last():
            recent.append(episode_return)
            episode_return = 0.0
            first = env.step(action)
            replay.add_batch(trajectory.from_transition(_batched_step(next_ts), pstep,
                                                        _batched_step(first)))
            next_ts = first
            policy_state = agent.collect_policy.get_initial_state(1)
        time_step = next_ts
        if step >= cfg.learning_starts and step % cfg.train_every == 0:
            for _ in range(cfg.updates_per_train):
                experience, _ = next(samples)
                weights = boundary_weights(experience) if cfg.mask_boundaries else None
                loss = float(agent_train(experience, weights=weights).loss)
        greedy = None
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


def _off_policy(algo):
    def fn(env_id, seed, out, config, progress=True):
        return train_off_policy(algo, env_id, seed, out, config, progress)
    return fn


ALGOS = {"dqn": (DQNConfig, train_dqn), "ppo": (PPOConfig, train_ppo),
         "sac": (OffPolicyConfig, _off_policy("sac")), "td3": (OffPolicyConfig, _off_policy("td3")),
         "ddpg": (OffPolicyConfig, _off_policy("ddpg"))}

# MuJoCo locomotion: the usual 256x256 networks, 5k random steps, a validation every 2.5k steps.
_MUJOCO = {"hidden": (256, 256), "critic_hidden": (256, 256), "learning_starts": 5_000,
           "eval_every": 2_500}
_SAC_MUJOCO = {"actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4}  # the SAC paper's
# TD3 as published (MSE critic loss, actor and targets updated every 2nd critic step; TF-Agents'
# Td3Agent defaults to huber and no delay), and no loss on the pairs between episodes (Hopper
# terminates often, and those pairs taught the fallen state the value of a fresh start).
_TD3_MUJOCO = {"critic_loss": "mse", "policy_delay": 2, "mask_boundaries": True}

# Defaults per (algo, env) on top of the config dataclass's defaults; documented in the README.
DEFAULTS: dict[tuple[str, str], dict] = {
    ("dqn", "Acrobot-v1"): {"steps": 50_000},
    # DQN MountainCar: the CartPole shape with a 40k epsilon decay learned in 1 of 3 seeds (-123;
    # the others stayed at -200, the random return). The rl-zoo's values (256x256, lr 4e-3,
    # gamma 0.98, a 10k buffer, 8 gradient steps every 16 env steps, the target copied every
    # 600 env steps, epsilon to 0.07 over 24k steps): seed 1 greedy -98 by 64k steps.
    ("dqn", "MountainCar-v0"): {"steps": 120_000, "hidden": (256, 256), "learning_rate": 4e-3,
                                "batch_size": 128, "buffer_size": 10_000, "gamma": 0.98,
                                "train_every": 16, "updates_per_train": 8,
                                "target_update_period": 75, "epsilon_decay_steps": 24_000,
                                "epsilon_end": 0.07},
    ("dqn", "LunarLander-v3"): {"steps": 200_000, "hidden": (128, 128),
                                "learning_rate": 6.3e-4, "epsilon_decay_steps": 24_000},
    ("ppo", "CartPole-v1"): {"steps": 50_000, "collect_steps": 1024},
    # PPO Pendulum: with one env and a whole-batch gradient step per epoch (10 per 2048 steps)
    # the greedy return was still -1357 at 145k steps (random: -1218). 16 envs x 128 steps, 8
    # minibatches (80 gradient steps per batch), gamma 0.9 and lr 1e-3 (the rl-zoo's Pendulum
    # PPO values, without its gSDE): best greedy validation return, its step and training
    # seconds, seeds 0/1/2: -194 @147k 97 s, -181 @182k 111 s, -156 @150k 101 s.
    ("ppo", "Pendulum-v1"): {"steps": 200_000, "collect_steps": 2048, "num_envs": 16,
                             "minibatches": 8, "gamma": 0.9, "learning_rate": 1e-3},
    # PPO LunarLanderContinuous: the Pendulum setting's shape with gamma 0.99, lambda 0.95
    # hovered (greedy -78 after 970k steps, seed 0). The rl-zoo's gamma 0.999, lambda 0.98 and
    # entropy 0.01, with 32 envs x 128 steps in 16 minibatches: seed 0 greedy 208 at 293k, 243
    # at 424k, in about 4 minutes for 480k steps.
    ("ppo", "LunarLanderContinuous-v3"): {"steps": 500_000, "collect_steps": 4096,
                                          "num_envs": 32, "minibatches": 16, "gamma": 0.999,
                                          "gae_lambda": 0.98, "entropy_regularization": 0.01},
    ("sac", "Pendulum-v1"): {"steps": 15_000},
    # SAC MountainCarContinuous: with 1k uniform random steps all 3 seeds learned to stand still
    # (return ~0; random -33, solved 90). 10k steps of OU noise first (warmup_noise): seed 0
    # greedy 93.4 at 31k steps, 94.7 at 36k.
    ("sac", "MountainCarContinuous-v0"): {"steps": 50_000, "learning_starts": 10_000,
                                          "warmup_noise": "ou"},
    ("td3", "Pendulum-v1"): {"steps": 15_000},
    ("ddpg", "Pendulum-v1"): {"steps": 15_000},
    # MuJoCo (the `mujoco` extra; studies/mujoco.toml). Measured with seed 0, one training at a
    # time next to a 2-worker study on the same 2 cores (an idle machine is faster): best greedy
    # validation return (10 episodes), its step, training seconds. A uniformly random policy
    # returns -242 on HalfCheetah-v5 and 16 on Hopper-v5 (test seeds 0..19).
    ("sac", "HalfCheetah-v5"): {**_MUJOCO, **_SAC_MUJOCO, "steps": 50_000},  # 2847 @47.5k, 715 s
    ("sac", "Hopper-v5"): {**_MUJOCO, **_SAC_MUJOCO, "steps": 75_000},       # 739 @60k, 1408 s
    ("td3", "HalfCheetah-v5"): {**_MUJOCO, **_TD3_MUJOCO, "steps": 50_000},  # 1048 @30k, 582 s
    # TD3 Hopper, best by 42.5k steps: 245 with TF-Agents' huber/no delay (295 by 50k), 229 with
    # mse + delay 2, 443 with mse + delay 2 + mask_boundaries (the same seed)
    ("td3", "Hopper-v5"): {**_MUJOCO, **_TD3_MUJOCO, "steps": 75_000},       # 1004 @70k, 778 s
}


def resolve_config(algo: str, env_id: str, steps: int | None = None, **overrides):
    """The config dataclass `train` would use: the dataclass defaults, then DEFAULTS for
    (algo, env_id), then `overrides`, then `steps` (None: keep the default)."""
    if algo not in ALGOS:
        raise QuarlError(f"unknown algorithm {algo!r}; known: {', '.join(ALGOS)}")
    config_cls = ALGOS[algo][0]
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
          progress: bool = True, **overrides) -> dict:
    """Train `algo` on Gymnasium `env_id` for `steps` env steps (None: the algo's default) and
    write the run directory `out`. `overrides` set other fields of the algo's config dataclass.
    Returns the contents of run.json."""
    config = resolve_config(algo, env_id, steps, **overrides)
    from .envs import make_gym
    make_gym(env_id).close()  # unknown env ids fail here, before TF-Agents is set up
    return ALGOS[algo][1](env_id, int(seed), Path(out), config, progress=progress)
