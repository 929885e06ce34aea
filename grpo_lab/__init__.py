"""grpo_lab: a teaching lab for RL post-training of language models.

The layers read like the data that flows through them:

    prompts -> rollout -> rewards -> filters -> advantages -> losses (+ KL) -> optimiser -> metrics

The math layer (``advantages``, ``losses``, ``kl``, ``rewards``) imports only torch.
"""

__version__ = "0.1.0"
