"""Recurrent PPO (an LSTM actor and an LSTM critic) in plain TensorFlow, read top to bottom: the
networks, the training loop (`train_recurrent_ppo`), then its steps in the order it takes them:
the envs, the update step, the numpy rollout, GAE, the update's epochs (the export is
recurrent_export's). `train --algo ppo --net lstm` runs it (ppo.py's `rnn_trainer = "own"`, the
default; "tf-agents" runs TF-Agents' PPOClipAgent with ActorDistributionRnnNetwork instead).

Why a loop of our own: TF-Agents' PPO unrolls every batch row from a zero LSTM state, whatever
state the collect policy had there, so the first steps of each row are trained on a policy that
did not act, and its collection calls TensorFlow once per step. On CartPoleNoVel (seed 0, on 2
shared cores) its best greedy validation return was 285, 311 and 315 after 70-80k steps in three
settings (lr 1e-3 or 3e-4, 8 or 16 envs, gamma 0.99 or 0.98, gradient clipping), with no upward
trend. Here each row of a rollout keeps the actor's and the critic's state at its start (as
Stable-Baselines3's RecurrentPPO does) and the update unrolls from them, so the policy being
trained is the one that acted; acting is numpy. Seed 0 with the defaults: greedy validation 500
from 165k steps, 200k steps in 625 s.

The LSTM cell clips its state as TFLite's fused LSTM (recurrent.CELL_CLIP), so what is trained
is what the converted model computes.

- Actor: observation -> (fixed normalization) -> Dense(relu) -> LSTMCell -> logits; critic: the
  same shape with its own weights -> one value. Acting and the rollout are numpy
  (recurrent.RecurrentLayers.step on the current weights), with no TensorFlow call per step.
- Rollout: `num_envs` envs x `rollout` steps; an episode's first step starts from a zero state
  (TF-Agents' and the board's convention: RESET). A truncated episode (the 500-step limit)
  bootstraps its last reward with the critic's value of the final observation.
- Update: `epochs` passes over `minibatches` groups of env rows, each row unrolled over its
  `rollout` steps from its stored states (zeroed again at episode starts inside the row); the
  clipped PPO loss, value MSE, entropy, Adam with global-norm clipping.
- Validation and export as ppo.py's recurrent path: the greedy actor on the validation seeds
  after each update, the best kept, written by recurrent_export.save_recurrent_arrays (recurrent.npz,
  the one-step policy.keras, run.json)."""
from __future__ import annotations

import csv
import time
from collections import deque
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..core.errors import QuarlError
from ..core.files import open_new
from ..core.run import VALIDATION_SEED_BASE, Run
from .collect import sample_categorical, softmax
from .recurrent import (CELL_CLIP, RecurrentLayers, fold_normalization, observation_statistics,
                        play_recurrent)
from .recurrent_export import save_recurrent_arrays
from ..core.envs import make_gym


def _nets(n_obs: int, hidden: tuple[int, ...], units: int, n_actions: int):
    """The actor's and the critic's layers (Keras, built): [Dense...], LSTMCell, head Dense."""
    import tensorflow as tf

    def net(n_out: int, name: str):
        dense = [tf.keras.layers.Dense(h, activation="relu", name=f"{name}_dense_{k}")
                 for k, h in enumerate(hidden)]
        cell = tf.keras.layers.LSTMCell(units, name=f"{name}_lstm")
        head = tf.keras.layers.Dense(n_out, name=f"{name}_head",
                                     kernel_initializer=tf.keras.initializers.Orthogonal(0.01 if n_out > 1 else 1.0))
        x = tf.zeros((1, n_obs))
        for d in dense:
            x = d(x)
        h, _ = cell(x, [tf.zeros((1, units)), tf.zeros((1, units))])
        head(h)
        return dense, cell, head
    return net(n_actions, "actor"), net(1, "critic")


def _layers(net) -> RecurrentLayers:
    dense, cell, head = net
    return RecurrentLayers([(*d.get_weights(), "relu") for d in dense],
                           tuple(w.astype(np.float32) for w in cell.get_weights()),
                           [(*head.get_weights(), "linear")])


def _unroll(net, x, firsts, h, c):
    """Outputs [T, B, n_out] of `net` over x [T, B, n_obs] from the state (h, c) [B, u], the
    state zeroed before every step with firsts[t] = 1 (an episode's first step)."""
    import tensorflow as tf
    dense, cell, head = net
    outs = []
    for t in range(x.shape[0]):
        keep = 1.0 - firsts[t][:, None]
        h, c = h * keep, c * keep
        y = x[t]
        for d in dense:
            y = d(y)
        # the LSTM cell's step with its weights (Keras gate order i, f, c, o), the new cell
        # state clipped as TFLite's fused LSTM does (recurrent.CELL_CLIP)
        z = tf.matmul(y, cell.kernel) + tf.matmul(h, cell.recurrent_kernel) + cell.bias
        i, f, g, o = tf.split(z, 4, axis=-1)
        c = tf.clip_by_value(tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g), -CELL_CLIP, CELL_CLIP)
        h = tf.sigmoid(o) * tf.tanh(c)
        outs.append(head(h))
    return tf.stack(outs)


def train_recurrent_ppo(env_id: str, seed: int, out: Path, cfg, progress: bool = True) -> dict:
    """Recurrent PPO on `env_id` (discrete actions) into the run directory `out`; `cfg` is a
    ppo.PPOConfig with net="lstm" (its steps, hidden, lstm_units, learning_rate, collect_steps
    = num_envs x rollout, num_envs, minibatches, epochs, gamma, gae_lambda, clip_ratio,
    entropy_regularization, gradient_clipping, eval_episodes). Returns run.json's contents."""
    import tensorflow as tf  # heavy: only when training


    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tf.keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    envs, space, n_actions, obs_shape = _envs(env_id, cfg)
    n_obs = int(np.prod(obs_shape))
    mean, std = observation_statistics(env_id, seed)
    mean, std = mean.reshape(-1), std.reshape(-1)
    actor, critic = _nets(n_obs, cfg.hidden, cfg.lstm_units, n_actions)
    T, N, u = -(-cfg.collect_steps // cfg.num_envs), cfg.num_envs, cfg.lstm_units
    rounds = -(-cfg.steps // (T * N))   # rollouts, each followed by an update
    update = _update_step(actor, critic, cfg, n_actions, rounds * cfg.epochs * cfg.minibatches)

    curve_file = open_new(Run(out).train_curve)     # a link there is not followed
    curve = csv.writer(curve_file)
    curve.writerow(["step", "train_return", "greedy_return", "loss"])
    recent: deque[float] = deque(maxlen=20)
    best = {"return": -np.inf, "step": 0, "layers": None}
    seeds = [VALIDATION_SEED_BASE + k for k in range(cfg.eval_episodes)]
    obs = np.stack([np.asarray(e.reset(seed=seed + 1000 * k)[0], np.float32).reshape(-1)
                    for k, e in enumerate(envs)])
    for k, e in enumerate(envs):
        e.action_space.seed(seed + 1000 * k)
    first = np.ones(N, np.float32)                       # the next step starts an episode
    states = ((np.zeros((N, u), np.float32),) * 2, (np.zeros((N, u), np.float32),) * 2)
    ep_return = np.zeros(N)
    step, t0 = 0, time.perf_counter()
    bar = tqdm(total=cfg.steps, desc=f"ppo-lstm {env_id}", disable=not progress, mininterval=1.0,
               unit="step")
    while step < cfg.steps:
        start = states   # each row's actor and critic state before the rollout
        batch, v_last, first, states = _rollout(envs, obs, first, states, (actor, critic), rng,
                                                T, cfg, (mean, std), ep_return, recent)
        adv, ret = _gae(batch, v_last, cfg)
        loss = _update_epochs(update, batch, adv, ret, start, rng, cfg)
        step += T * N
        bar.update(T * N)
        greedy_layers = fold_normalization(_layers(actor), mean, std)
        greedy = float(np.mean(play_recurrent(env_id, greedy_layers, seeds)[0]))
        if greedy >= best["return"]:
            best = {"return": greedy, "step": step, "layers": greedy_layers}
        curve.writerow([step, float(np.mean(recent)) if recent else "", greedy, f"{loss:.5g}"])
        curve_file.flush()
        bar.set_postfix(greedy=f"{greedy:.0f}", best=f"{best['return']:.0f}")
    bar.close()
    curve_file.close()
    for e in envs:
        e.close()
    return save_recurrent_arrays(out, env_id, seed, cfg, best, time.perf_counter() - t0, recent,
                                 (mean, std), obs_shape, space)


def _envs(env_id: str, cfg):
    """`num_envs` Gymnasium envs (unseeded yet), their action space, the number of actions and
    the observation shape; refuses what is not a Discrete action space starting at 0."""

    envs = [make_gym(env_id) for _ in range(cfg.num_envs)]
    space = envs[0].action_space
    if not hasattr(space, "n") or int(space.start) != 0:
        raise QuarlError(f"ppo --net lstm needs a Discrete action space starting at 0; {env_id} "
                         f"has {space}")
    return envs, space, int(space.n), tuple(envs[0].observation_space.shape)


def _update_step(actor, critic, cfg, n_actions: int, updates: int):
    """The traced gradient step on a minibatch of rows: both networks unrolled from the rows'
    stored states, the clipped PPO loss, value MSE and entropy, Adam (the learning rate decaying
    linearly over `updates` steps when learning_rate_end is set), global-norm clipping."""
    import tensorflow as tf  # heavy: only when training

    variables = [v for net in (actor, critic) for part in (net[0] + [net[1], net[2]])
                 for v in part.trainable_variables]
    lr = cfg.learning_rate
    if cfg.learning_rate_end is not None:   # linear, per gradient step, to the last update
        lr = tf.keras.optimizers.schedules.PolynomialDecay(lr, updates, cfg.learning_rate_end)
    opt = tf.keras.optimizers.Adam(learning_rate=lr)
    clip_norm = cfg.gradient_clipping

    @tf.function
    def update(x, firsts, actions, old_logp, adv, returns, ha, ca, hv, cv):
        with tf.GradientTape() as tape:
            logits = _unroll(actor, x, firsts, ha, ca)
            values = _unroll(critic, x, firsts, hv, cv)[..., 0]
            logp_all = tf.nn.log_softmax(logits)
            logp = tf.reduce_sum(logp_all * tf.one_hot(actions, n_actions), -1)
            ratio = tf.exp(logp - old_logp)
            a = (adv - tf.reduce_mean(adv)) / (tf.math.reduce_std(adv) + 1e-8)
            pg = -tf.reduce_mean(tf.minimum(ratio * a, tf.clip_by_value(
                ratio, 1 - cfg.clip_ratio, 1 + cfg.clip_ratio) * a))
            vf = tf.reduce_mean(tf.square(values - returns))
            entropy = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp_all) * logp_all, -1))
            loss = pg + 0.5 * vf - cfg.entropy_regularization * entropy
        grads = tape.gradient(loss, variables)
        if clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        opt.apply_gradients(zip(grads, variables))
        return loss
    return update


def _rollout(envs, obs, first, states, nets, rng, T: int, cfg, norm, ep_return, recent):
    """`T` steps of every env with the current actor (numpy, sampling its softmax): returns the
    batch (X, F, A, LP, V, R, D: [T, N] normalized observations, episode-first flags, actions,
    their log-probabilities, values, rewards, episode ends), the critic's value after it, and
    the `first` flags and (actor, critic) LSTM states to go on from. `obs` and `ep_return` are
    updated in place; finished episodes' returns go to `recent`."""
    (mean, std), N = norm, len(envs)
    la, lv = _layers(nets[0]), _layers(nets[1])
    sa, sv = states
    X = np.zeros((T, N, obs.shape[1]), np.float32)
    F, A, LP, V, R, D = (np.zeros((T, N), np.float32) for _ in range(6))
    for t in range(T):
        keep = (1.0 - first)[:, None]
        sa = (sa[0] * keep, sa[1] * keep)
        sv = (sv[0] * keep, sv[1] * keep)
        xn = (obs - mean) / std
        logits, sa = la.step(xn, sa)
        value, sv = lv.step(xn, sv)
        p = softmax(logits.astype(np.float64))
        act = sample_categorical(p, rng)
        X[t], F[t], A[t] = xn, first, act
        LP[t] = np.log(p[np.arange(N), act] + 1e-12)
        V[t] = value[:, 0]
        for k, e in enumerate(envs):
            o, r, terminated, truncated, _ = e.step(int(act[k]))
            o = np.asarray(o, np.float32).reshape(-1)
            ep_return[k] += r
            if truncated and not terminated:   # bootstrap the cut-off episode's value
                v_final, _ = lv.step(((o - mean) / std)[None], (sv[0][k:k + 1], sv[1][k:k + 1]))
                r += cfg.gamma * float(v_final[0, 0])
            R[t, k], D[t, k] = r, float(terminated or truncated)
            if terminated or truncated:
                recent.append(float(ep_return[k]))
                ep_return[k] = 0.0
                o = np.asarray(e.reset()[0], np.float32).reshape(-1)
            obs[k] = o
        first = D[t].copy()
    # the value after the rollout, from the critic's current state
    keep = (1.0 - first)[:, None]
    v_last, _ = lv.step((obs - mean) / std, (sv[0] * keep, sv[1] * keep))
    return (X, F, A, LP, V, R, D), v_last, first, (sa, sv)


def _gae(batch, v_last, cfg):
    """GAE over each row of the batch: (advantages, returns), both [T, N]."""
    _, _, _, _, V, R, D = batch
    T, N = R.shape
    adv = np.zeros((T, N), np.float32)
    gae = np.zeros(N, np.float32)
    for t in reversed(range(T)):
        v_next = v_last[:, 0] if t == T - 1 else V[t + 1]
        nonterminal = 1.0 - D[t]
        delta = R[t] + cfg.gamma * v_next * nonterminal - V[t]
        gae = delta + cfg.gamma * cfg.gae_lambda * nonterminal * gae
        adv[t] = gae
    return adv, adv + V


def _update_epochs(update, batch, adv, ret, start, rng, cfg) -> float:
    """`epochs` passes over `minibatches` random groups of env rows, each row unrolled from its
    state at the rollout's start (`start`: the actor's and the critic's (h, c)); the mean loss."""
    X, F, A, LP, _, _, _ = batch
    (ha, ca), (hv, cv) = start
    losses = []
    rows = np.arange(X.shape[1])
    for _ in range(cfg.epochs):
        for part in np.array_split(rng.permutation(rows), cfg.minibatches):
            losses.append(float(update(
                X[:, part], F[:, part], A[:, part].astype(np.int32), LP[:, part], adv[:, part],
                ret[:, part], ha[part], ca[part], hv[part], cv[part])))
    return float(np.mean(losses))
