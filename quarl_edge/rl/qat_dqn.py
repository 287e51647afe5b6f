"""The parts of QAT's DQN fine-tuning loop (rl/qat.py: finetune_dqn): its numpy replay buffer
with n-step returns, an env step into it, and the traced double-DQN gradient step."""
from __future__ import annotations

import numpy as np

from ..core.errors import QuarlError


class NStepReplay:
    """A numpy replay buffer of consecutive transitions with n-step returns at sampling time.

    `terminated` stops the return without bootstrapping; `truncated` (time limit) stops it and
    bootstraps from the cut-off observation."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], n_step: int, gamma: float):
        self.obs = np.zeros((capacity, *obs_shape), np.float32)
        self.next_obs = np.zeros((capacity, *obs_shape), np.float32)
        self.act = np.zeros(capacity, np.int64)
        self.rew = np.zeros(capacity, np.float32)
        self.term = np.zeros(capacity, bool)
        self.end = np.zeros(capacity, bool)  # terminated or truncated
        self.n, self.gamma, self.size, self.capacity = n_step, gamma, 0, capacity

    def add(self, obs, act, rew, next_obs, terminated, truncated):
        if self.size == self.capacity:
            raise QuarlError("QAT replay buffer full")
        i = self.size
        self.obs[i], self.act[i], self.rew[i], self.next_obs[i] = obs, act, rew, next_obs
        self.term[i], self.end[i] = terminated, terminated or truncated
        self.size += 1

    def returns(self, idx: np.ndarray):
        """(n-step discounted return, bootstrap observation, bootstrap discount) for each start."""
        ret = np.zeros(len(idx), np.float32)
        disc = np.ones(len(idx), np.float32)
        boot = np.zeros(len(idx), np.int64)
        open_ = np.ones(len(idx), bool)
        for k in range(self.n):
            j = np.minimum(idx + k, self.size - 1)
            take = open_ & (idx + k < self.size)
            ret[take] += disc[take] * self.rew[j[take]]
            disc[take] *= self.gamma
            boot[take] = j[take]
            stop = take & self.end[j]
            disc[stop & self.term[j]] = 0.0
            open_ &= ~stop & take
        return ret, self.next_obs[boot], disc

    def sample(self, rng: np.random.Generator, batch: int):
        idx = rng.integers(0, self.size, size=batch)
        ret, boot_obs, disc = self.returns(idx)
        return self.obs[idx], self.act[idx], ret, boot_obs, disc


def dqn_steps(qmodel, target, learning_rate: float, double: bool, clip):
    """(policy, gradient step) of the fine-tuning: the Q-values of the fake-quantized `qmodel`
    (numpy in and out, a traced call); one traced Adam step on a batch (obs, act, n-step return, bootstrap obs, bootstrap
    discount) of the (double) DQN Huber loss against `target`, gradients clipped to `clip`."""
    import tensorflow as tf  # heavy: only when fine-tuning

    optimizer = tf.keras.optimizers.Adam(learning_rate=learning_rate)

    @tf.function(reduce_retracing=True)
    def q_values(x):
        return qmodel(x, training=False)

    @tf.function
    def train_step(obs, act, ret, boot_obs, disc):
        with tf.GradientTape() as tape:
            q = qmodel(obs, training=True)
            q_a = tf.gather(q, act, batch_dims=1)
            q_boot = target(boot_obs, training=False)
            if double:
                best = tf.argmax(qmodel(boot_obs, training=False), axis=1)
                q_next = tf.gather(q_boot, best, batch_dims=1)
            else:
                q_next = tf.reduce_max(q_boot, axis=1)
            y = tf.stop_gradient(ret + disc * q_next)
            err = tf.abs(y - q_a)
            loss = tf.reduce_mean(tf.where(err < 1.0, 0.5 * err ** 2, err - 0.5))  # Huber, delta 1
        variables = qmodel.trainable_variables
        grads = tape.gradient(loss, variables)
        if clip:
            grads, _ = tf.clip_by_global_norm(grads, float(clip))
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    def policy(x):
        return q_values(tf.constant(x)).numpy()
    return policy, train_step


def env_step(env, obs: np.ndarray, action: int, replay: NStepReplay) -> np.ndarray:
    """Step `env` with `action`, add the transition to `replay`; the next observation (after a
    reset if the episode ended)."""
    nxt, r, terminated, truncated, _ = env.step(action)
    nxt = np.asarray(nxt, np.float32)
    replay.add(obs, action, r, nxt, terminated, truncated)
    if terminated or truncated:
        return np.asarray(env.reset()[0], np.float32)
    return nxt
