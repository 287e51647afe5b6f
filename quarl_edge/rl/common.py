"""What every algorithm's training loop shares: the package versions a run records, the
export of an actor network as a plain Keras MLP (checked against the agent's greedy policy),
the run.json of an actor-critic run, and small TF-Agents helpers."""
from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..core.errors import QuarlError
from ..core.files import fresh
from ..core.envs import play_batched, space_info
from ..core.nets import keras_mlp, mlp_forward
from ..core.run import MODEL_FILES, VALIDATION_SEED_BASE, Run, package_versions, write_run


# ------------------------------------------------------------------ actor networks (PPO, SAC, ...)
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


def network_layers(net) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """The Dense layers of a TF-Agents network as (kernel, bias, activation), in call order."""
    return [(*(w.astype(np.float32) for w in d.get_weights()), d.get_config()["activation"])
            for d in _dense_layers(net)]


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
    layers = [list(layer) for layer in network_layers(net)]
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
    policy_dir = Run(out).policy_dir
    policy_saver.PolicySaver(policy, batch_size=None).save(str(fresh(policy_dir)))

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
    model.save(fresh(Run(out).network_file(MODEL_FILES[algo])))

    space = env.gym_env.action_space
    info = run_record(env_id, algo, seed, cfg, best, train_seconds, recent_returns, obs_shape,
                      space, {"type": "mlp", "hidden": list(cfg.hidden), "activation": "relu",
                              "head": (layers[-1][2] if hasattr(space, "n")
                                       else "tanh, scaled to bounds")}, **extra)
    write_run(out, info)
    return info


def run_record(env_id: str, algo: str, seed: int, cfg, best: dict, train_seconds: float,
               recent_returns, obs_shape, space, network: dict, **extra) -> dict:
    """run.json as every training writes it (quarl_edge/core/run.py documents the fields): what was
    trained (env, algo, seed, the config's fields as "hyperparameters"), how well (the best greedy
    validation return `best["return"]` at `best["step"]`, the running train return at the end),
    the observation and action spaces, the network (`network`), package versions; `extra` adds
    an algorithm's own fields."""
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
        "action_space": space_info(space),
        "network": network,
        "hyperparameters": {k: (list(v) if isinstance(v, tuple) else v)
                            for k, v in asdict(cfg).items()},
        "versions": package_versions(),
        **extra,
    }
    if hasattr(space, "n"):
        info["n_actions"] = int(space.n)
    return info



def _agent_env(env_id: str, seed: int, algo: str, continuous_only: bool):
    from .tf_env import make_env  # lazy: imports TensorFlow and TF-Agents (the train extra)
    env = make_env(env_id, seed=seed)
    act_spec = env.action_spec()
    if continuous_only and np.issubdtype(act_spec.dtype, np.integer):
        raise QuarlError(f"{algo} needs a Box (continuous) action space; {env_id} has "
                         f"{env.gym_env.action_space} (use dqn or ppo)")
    if np.issubdtype(act_spec.dtype, np.integer) and act_spec.shape != ():
        raise QuarlError(f"only a single Discrete action is supported; {env_id} has "
                         f"{env.gym_env.action_space}")
    return env



def common_function(fn, **kwargs):
    from tf_agents.utils import common
    return common.function(fn, **kwargs)



def categorical_projection_net(sample_spec, logits_init_output_factor: float = 0.1):
    """TF-Agents' CategoricalProjectionNetwork (the logits head of a discrete-action PPO actor),
    for `discrete_projection_net=`. TF-Agents 0.19 counts the actions with int() of a one-element
    array, a TypeError from numpy 2.4 on (a DeprecationWarning since numpy 1.25); this subclass
    counts them with .item() and is otherwise its constructor, so the network, its variable names
    and the saved policy are the same as TF-Agents' own."""
    import tensorflow as tf
    from tf_agents.networks import categorical_projection_network, network

    class CategoricalProjectionNetwork(categorical_projection_network.CategoricalProjectionNetwork):
        def __init__(self, sample_spec, logits_init_output_factor=0.1,
                     name="CategoricalProjectionNetwork"):
            counts = np.unique(np.asarray(sample_spec.maximum - sample_spec.minimum + 1))
            if counts.size != 1 or counts.item() <= 0:
                raise ValueError("discrete actions need the same number (>= 1) in every "
                                 f"dimension; the spec gives {counts.tolist()}")
            output_shape = sample_spec.shape.concatenate([int(counts.item())])
            network.DistributionNetwork.__init__(
                self, input_tensor_spec=None, state_spec=(),
                output_spec=self._output_distribution_spec(output_shape, sample_spec, name),
                name=name)
            self._sample_spec = sample_spec
            self._output_shape = output_shape
            self._projection_layer = tf.keras.layers.Dense(
                output_shape.num_elements(),
                kernel_initializer=tf.compat.v1.keras.initializers.VarianceScaling(
                    scale=logits_init_output_factor),
                bias_initializer=tf.keras.initializers.Zeros(), name="logits")

    return CategoricalProjectionNetwork(sample_spec, logits_init_output_factor)


class StagedReplay:
    """A TFUniformReplayBuffer's add_batch calls, staged in numpy and made in one traced call.

    Adding one env step with `replay.add_batch` is a Python -> TensorFlow call with a tensor per
    field: on CartPole that was a third of DQN's training time. `add(traj)` keeps the step's
    numpy arrays ([batch_size, ...] per field, the batch add_batch takes); `flush()` makes the
    same add_batch calls, in the same order (one buffer id per step), inside one tf.function
    whose input has a leading [steps] axis of any length (traced once). The buffer's contents
    after a flush are what the calls one by one would have left, so sampling after a flush is
    unchanged: flush before every sample.

    The k calls are written as one: the last id advanced by k, and each step's ids and items
    scattered to the rows add_batch computes for it (id mod max_length, plus each batch row's
    offset), as TFUniformReplayBuffer's own add_batch writes them. Up to max_length steps a
    call, so that no row is written twice in one scatter."""

    def __init__(self, replay):
        import tensorflow as tf
        self.replay = replay
        self._staged: list = []
        batch = int(replay._batch_size)
        self._max = int(replay._max_length)
        signature = tf.nest.map_structure(
            lambda s: tf.TensorSpec([None, batch, *s.shape], s.dtype), replay.data_spec)

        @tf.function(input_signature=[signature])
        def add_all(items):
            n = tf.shape(tf.nest.flatten(items)[0])[0]
            last = replay._increment_last_id(tf.cast(n, tf.int64))
            ids = last - tf.cast(n, tf.int64) + 1 + tf.range(tf.cast(n, tf.int64))   # [k]
            rows = tf.math.mod(ids, replay._max_length)[:, None] + replay._batch_offsets  # [k, B]
            ids = tf.broadcast_to(ids[:, None], tf.shape(rows))
            flat = tf.nest.map_structure(
                lambda x: tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0)), items)
            replay._id_table.write(tf.reshape(rows, [-1]), tf.reshape(ids, [-1]))
            replay._data_table.write(tf.reshape(rows, [-1]), flat)
        self._add_all = add_all

    def add(self, traj) -> None:
        """Stage one add_batch call: `traj` a nest of numpy arrays, each [batch_size, ...]."""
        self._staged.append(traj)

    def flush(self) -> None:
        import tensorflow as tf
        if not self._staged:
            return
        staged, self._staged = self._staged, []
        for start in range(0, len(staged), self._max):
            part = staged[start:start + self._max]
            self._add_all(tf.nest.map_structure(lambda *xs: np.stack(xs), *part))


class ReplaySamples:
    """The batches the gradient rounds train on, sampled from a TFUniformReplayBuffer by tf.data:
    `ahead` of them drawn in advance on tf.data's prefetch thread, and `settle`, which waits
    until that thread has drawn them.

    Why the wait: after a round, the prefetch thread draws the next round's first `ahead`
    batches while the loop goes on collecting, and the loop's next flush (StagedReplay) writes
    the buffer. Drawn before the flush, they come from the buffer as the round left it; drawn
    after, from the grown buffer (other indices, other transitions). Which came first was up
    to the thread scheduler: on a loaded machine (the study's 2 workers on 2 cores) a retrained
    run was not the recorded one (MinAtar DQN 0 of 5, MountainCar DQN, 16 steps a round, 0 of
    5), though each was fine alone. Not prefetching at all (what enable_op_determinism does to
    this pipeline) also fixes the draws, but to other ones than the recorded runs drew: here
    the loop waits (`settle`, after each round) until the look-ahead is drawn, which is what
    an idle machine always did, so the recorded runs stay the runs a retraining gives.

    Counting the draws: a map after the sampling adds 1 to a variable per batch drawn; with a
    prefetch buffer of `ahead`, the thread stops at `ahead` batches beyond those taken."""

    def __init__(self, replay, batch_size: int, num_steps: int, ahead: int = 2):
        import tensorflow as tf
        self._drawn = tf.Variable(0, dtype=tf.int64, trainable=False, name="batches_drawn")

        def count(*element):
            with tf.control_dependencies([self._drawn.assign_add(1)]):
                return tf.nest.map_structure(tf.identity, element)

        dataset = replay.as_dataset(sample_batch_size=batch_size, num_steps=num_steps)
        self._iterator = iter(dataset.map(count).prefetch(ahead))
        self._ahead = ahead
        self._taken = 0

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._iterator)

    def settle(self, taken: int, timeout: float = 600.0) -> None:
        """`taken` more batches were taken (a round's): wait until the prefetch thread has drawn
        the `ahead` after them, before anything writes the buffer again."""
        self._taken += taken
        want = self._taken + self._ahead
        deadline = time.monotonic() + timeout
        while int(self._drawn.numpy()) < want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"tf.data drew {int(self._drawn.numpy())} replay batches "
                                   f"in {timeout:.0f} s, {want} expected")
            time.sleep(1e-4)


def build_optimizers(agent) -> None:
    """Create the agent's optimizer variables (Adam's step count and moments) now, before the
    first traced train step, for exactly the variables that step updates.

    A tf.function whose first call creates variables is traced twice (once creating them, once
    without); PPO's train step, its epochs unrolled, took several seconds to trace, and SAC's
    three losses too. Building the optimizers first leaves one trace. The variables start at
    the values the first step would have given them (zeros), so training is unchanged."""
    nets = {"DqnAgent": [("_optimizer", ["_q_network"])],
            "DdqnAgent": [("_optimizer", ["_q_network"])],
            "PPOClipAgent": [("_optimizer", ["_actor_net", "_value_net"])],
            "SacAgent": [("_critic_optimizer", ["_critic_network_1", "_critic_network_2"]),
                         ("_actor_optimizer", ["_actor_network"]),
                         ("_alpha_optimizer", [])],
            "Td3Agent": [("_critic_optimizer", ["_critic_network_1", "_critic_network_2"]),
                         ("_actor_optimizer", ["_actor_network"])],
            "DdpgAgent": [("_critic_optimizer", ["_critic_network"]),
                          ("_actor_optimizer", ["_actor_network"])]}[type(agent).__name__]
    for opt_name, net_names in nets:
        variables = [v for n in net_names for v in getattr(agent, n).trainable_variables]
        if opt_name == "_alpha_optimizer":
            variables = [agent._log_alpha]
        optimizer = getattr(agent, opt_name)
        # Keras' optimizers build(); the legacy ones (TF-Agents' agents get those) _create_all_weights()
        build = getattr(optimizer, "build", None) or optimizer._create_all_weights
        build(variables)


class GradientRounds:
    """A round of k gradient steps (`agent.train` on the next k batches of `samples`) in one
    traced call, instead of k Python -> TensorFlow calls, each with its own dataset `next`.

    Each call's Python side (the traced function's argument checks and cache lookup, and the
    tf.data iterator's structure packing) cost DQN CartPole as much as the step itself, and SAC
    Pendulum 0.6 of its 1.65 ms a step. The batches come from the same iterator in the same
    order and each step is the same `agent.train` (with `weights(experience)` as its per-sample
    loss weights, if given), so where the update draws no random numbers (DQN, DDPG) the weights
    after a round are those of k single calls (tests/test_algos.py compares them). SAC's and
    TD3's losses draw random numbers, and the op seeds of those draws follow the graph around
    them: there the loop gives other draws than the single calls did, from the same
    distribution, the same for the same seed.
    A graph loop cannot create variables: build_optimizers(agent) first.
    With `samples` a ReplaySamples, each call returns once its look-ahead is drawn (why: there)."""

    def __init__(self, agent, samples, weights=None):
        import tensorflow as tf  # heavy: only when training

        def body(i, _loss):
            experience, _ = next(samples)
            w = None if weights is None else weights(experience)
            return i + 1, agent.train(experience, weights=w).loss

        # Without autograph, as TF-Agents traces its own train (common.function): autograph
        # would convert all of agent.train's Python, which took SAC's first round 6.4 s.
        @tf.function(autograph=False)
        def loop(n):
            start = (tf.constant(0, tf.int64), tf.constant(0.0))
            return tf.while_loop(lambda i, _loss: i < n, body, start)[1]
        self._loop = loop
        self._settle = getattr(samples, "settle", None)   # a ReplaySamples'

    def __call__(self, k: int) -> float:
        """Take k gradient steps; the last step's loss."""
        import tensorflow as tf  # heavy: only when training
        loss = float(self._loop(tf.constant(k, tf.int64)))
        if self._settle is not None:
            self._settle(k)
        return loss
