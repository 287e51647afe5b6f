"""Stage 1, rl: train a policy with TF-Agents on a Gymnasium environment and write a run
directory (quarl_edge/core/run.py describes it).

Entry point: `quarl_edge.rl.train.train`. One module per algorithm family, each readable top
to bottom: dqn.py (double DQN), ppo.py (PPO-clip), off_policy.py (SAC, TD3, DDPG); their shared
export code in common.py and their tuned per-task defaults in defaults.py. The Gymnasium helpers
(policies as network outputs, batched evaluation) are quarl_edge.core.envs; tf_env.py is the TF-Agents
adapter the loops step, qat.py quantization-aware training (in the DQN loop, and by on-policy
distillation for every algorithm). Nothing outside this package imports an algorithm module."""
