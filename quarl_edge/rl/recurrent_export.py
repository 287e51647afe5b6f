"""Writing a recurrent PPO run (rl/ppo.py's TF-Agents path, rl/rppo.py's own loop): the greedy
actor's arrays (RUN/recurrent.npz), the one-step Keras model checked against them, and
run.json. Training's side of rl/recurrent.py, which the later stages use to step and convert the
policy; they never import this module."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.files import fresh
from .common import run_record
from .recurrent import CELL_CLIP, WEIGHTS_FILE, one_step_keras, rnn_actor_layers
from ..core.run import MODEL_FILES, Run, write_run


def save_recurrent_run(out: Path, env_id: str, seed: int, cfg, agent, actor_net, env, best: dict,
                       train_seconds: float, recent_returns, normalization) -> dict:
    """Write a recurrent PPO run: RUN/recurrent.npz (first: the arrays survive a failed export),
    policy/ (the greedy PolicySaver, with its policy state), RUN/policy.keras (the one-step
    model, checked against the agent's greedy policy stepped over probe episodes with its
    state) and run.json; returns run.json's contents."""

    import tensorflow as tf
    from tf_agents.policies import greedy_policy, policy_saver
    from tf_agents.trajectories import time_step as ts


    out = Path(out)
    layers = rnn_actor_layers(actor_net, *normalization)
    layers.save(Run(out).network_file(WEIGHTS_FILE))
    policy = greedy_policy.GreedyPolicy(agent.policy)
    policy_dir = Run(out).policy_dir
    policy_saver.PolicySaver(policy, batch_size=None).save(str(fresh(policy_dir)))

    obs_spec = env.observation_spec()
    obs_shape = tuple(int(d) for d in obs_spec.shape)
    model = one_step_keras(obs_shape, layers)
    # the check: 4 probe sequences of 60 steps (a new episode every 20), the agent's greedy
    # policy with its state against the numpy step and the stateful Keras model
    rng = np.random.default_rng(seed + 1)
    mean, std = (np.asarray(v, np.float32).reshape(obs_shape) for v in normalization)
    probe = (mean + std * rng.uniform(-2.0, 2.0, size=(60, 4, *obs_shape))).astype(np.float32)
    pstate = policy.get_initial_state(4)
    state = layers.zero_state(4)
    keras_states = []
    for t, x in enumerate(probe):
        if t % 20 == 0:
            state = layers.zero_state(4)
            step = ts.restart(tf.constant(x), batch_size=4)
        else:
            step = ts.transition(tf.constant(x), reward=tf.zeros(4))
        pstep = policy.action(step, pstate)
        pstate = pstep.state
        logits, state = layers.step(x, state)
        top2 = np.sort(logits, axis=1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > 1e-4
        if not np.array_equal(logits.argmax(1)[clear], pstep.action.numpy()[clear]):
            raise RuntimeError("the recurrent actor's arrays disagree with its greedy policy")
        if t % 20 == 0:
            model.reset_states()
        keras_states.append((model(x[:1, None], training=False).numpy()[0], logits[0]))
    diff = max(float(np.abs(a - b).max()) for a, b in keras_states)
    if diff > 1e-4:
        raise RuntimeError(f"the one-step Keras model differs from the recurrent actor by {diff}")
    model.reset_states()
    model.save(fresh(Run(out).network_file(MODEL_FILES["ppo"])))

    return _write_run_json(out, env_id, seed, cfg, best, train_seconds, recent_returns,
                           normalization, obs_shape, env.gym_env.action_space)


def _write_run_json(out: Path, env_id: str, seed: int, cfg, best: dict, train_seconds: float,
                    recent_returns, normalization, obs_shape, space) -> dict:
    # the network file is a one-step model: input [1, 1, *obs_shape], LSTM state kept between
    # calls and zeroed at each episode's start (recurrent.py)
    info = run_record(env_id, "ppo", seed, cfg, best, train_seconds, recent_returns, obs_shape,
                      space, {"type": "lstm", "hidden": list(cfg.hidden),
                              "lstm_units": cfg.lstm_units, "activation": "relu",
                              "head": "linear", "recurrent": True,
                              # the fixed input normalization, folded into the export's first layer
                              "observation_mean": normalization[0].tolist(),
                              "observation_std": normalization[1].tolist()})
    write_run(out, info)
    return info


def save_recurrent_arrays(out: Path, env_id: str, seed: int, cfg, best: dict, train_seconds: float,
                          recent_returns, normalization, obs_shape, space) -> dict:
    """Write a recurrent run trained by rl/rppo.py: RUN/recurrent.npz (best["layers"], the
    normalization folded in), RUN/policy.keras (the one-step model, checked against the numpy
    step over probe episodes) and run.json. (No policy/: the loop has no TF-Agents policy; the
    later stages read policy.keras.)"""
    out = Path(out)
    layers = best["layers"]
    layers.save(Run(out).network_file(WEIGHTS_FILE))
    model = one_step_keras(tuple(obs_shape), layers)
    rng = np.random.default_rng(seed + 1)
    mean, std = (np.asarray(v, np.float32).reshape(-1) for v in normalization)
    diff = 0.0
    for _ in range(3):
        model.reset_states()
        state = layers.zero_state()
        for x in (mean + std * rng.uniform(-2, 2, size=(20, len(mean)))).astype(np.float32):
            want, state = layers.step(x[None], state)
            got = model(x.reshape(1, 1, *obs_shape), training=False).numpy()
            if np.abs(state[1]).max() >= CELL_CLIP:    # Keras has no cell clip: stop there
                break
            diff = max(diff, float(np.abs(got - want).max()))
    if diff > 1e-4:
        raise RuntimeError(f"the one-step Keras model differs from the recurrent actor by {diff}")
    model.reset_states()
    model.save(fresh(Run(out).network_file(MODEL_FILES["ppo"])))
    return _write_run_json(out, env_id, seed, cfg, best, train_seconds, recent_returns,
                           normalization, obs_shape, space)
