"""The small world the algorithms act in: the tiny policy, the tasks and their rewards, sampling
(rollout), held-out evaluation, and the pretraining that builds the policy."""
