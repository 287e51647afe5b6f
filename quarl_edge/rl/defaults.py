"""Tuned defaults per (algo, env), on top of each config dataclass's own defaults; docs/pipeline.md
(train) documents them. Each entry says what was measured to choose it."""
from __future__ import annotations

# MuJoCo locomotion: the usual 256x256 networks, 5k random steps, a validation every 2.5k steps.
_MUJOCO = {"hidden": (256, 256), "critic_hidden": (256, 256), "learning_starts": 5_000,
           "eval_every": 2_500}
_SAC_MUJOCO = {"actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4}  # the SAC paper's
# TD3 as published (MSE critic loss, actor and targets updated every 2nd critic step; TF-Agents'
# Td3Agent defaults to huber and no delay), and no loss on the pairs between episodes (Hopper
# terminates often, and those pairs taught the fallen state the value of a fresh start).
_TD3_MUJOCO = {"critic_loss": "mse", "policy_delay": 2, "mask_boundaries": True}

# MinAtar (quarl_edge/core/envs/minatar.py, issue 14): the MinAtar paper's DQN network (one 3x3 conv
# of 16 filters, stride 1, then 128 relu units: 1,024 activations and 131k weights, 128 KiB of
# int8 flash), batch 32, Adam at 2.5e-4, one gradient step per env step (256 every 256), the
# target copied every 1,000 gradient steps; sized for 2 cores: 50k steps, epsilon 1 -> 0.1 over
# the first 25k, learning from step 2,000. Measured here (Breakout seed 0, a loaded 2-core
# machine): greedy validation return 2 at 10k steps, 3.6 at 15k (113 s for 20k), 6.6 at 45k
# (456 s for 50k); the study's minatar grid (results/minatar) has every seed and the random
# policy's return.
_MINATAR_DQN = {"steps": 50_000, "conv": ((16, 3, 1),), "hidden": (128,),
                "learning_rate": 2.5e-4, "batch_size": 32, "buffer_size": 100_000,
                "learning_starts": 2_000, "epsilon_end": 0.1, "epsilon_decay_steps": 25_000,
                "train_every": 256, "updates_per_train": 256, "target_update_period": 1_000,
                "n_step": 1, "eval_every": 5_000, "eval_episodes": 10}

# Defaults per (algo, env) on top of the config dataclass's defaults; documented in docs/pipeline.md.
DEFAULTS: dict[tuple[str, str], dict] = {
    **{("dqn", f"QuarlEdge/MinAtar-{game}-v0"): _MINATAR_DQN
       for game in ("Breakout", "SpaceInvaders", "Freeway", "Asterix", "Seaquest")},
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
    # PPO on the masked CartPole (QuarlEdge/CartPoleNoVel-v0): a recurrent policy (rl/rppo.py),
    # 8 envs x 128 steps, 4 minibatches of env rows, 10 epochs, lr 1e-3, gamma 0.98, lambda 0.9
    # and gradient clipping 0.5 (the rl-zoo's RecurrentPPO values for CartPoleNoVel, with our
    # minibatches). Seed 0: greedy validation 500 from 165k steps, 625 s for 200k on 2 shared
    # cores; TFLite's (and the board's) greedy return on the test seeds 0..19: see docs/pipeline.md.
    ("ppo", "QuarlEdge/CartPoleNoVel-v0"): {"net": "lstm", "steps": 200_000, "hidden": (64,),
                                            "lstm_units": 64, "collect_steps": 1024,
                                            "num_envs": 8, "minibatches": 4, "epochs": 10,
                                            "learning_rate": 1e-3, "gamma": 0.98,
                                            "gae_lambda": 0.9, "gradient_clipping": 0.5},
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

