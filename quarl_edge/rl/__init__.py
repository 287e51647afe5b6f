"""Stage 1, rl: train a policy with TF-Agents on a Gymnasium environment and write a run
directory (quarl_edge/run.py describes it).

Entry point: `quarl_edge.rl.train.train`. One module per algorithm family, each readable top
to bottom: dqn.py (double DQN), ppo.py (PPO-clip), off_policy.py (SAC, TD3, DDPG); their shared
export code in common.py and their tuned per-task defaults in defaults.py. envs.py has the
Gymnasium helpers (policies as network outputs, batched evaluation), tf_env.py the TF-Agents
adapter the loops step, qat.py quantization-aware training (in the DQN loop, and by on-policy
distillation for every algorithm). Nothing outside this package imports an algorithm module."""
