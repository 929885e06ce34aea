"""PPO's critic."""

from __future__ import annotations

import copy

import torch


class ValueModel(torch.nn.Module):
    """PPO's critic: a copy of the policy's transformer trunk with a scalar head (V per token)."""

    def __init__(self, policy: torch.nn.Module):
        super().__init__()
        self.trunk = copy.deepcopy(policy.model)  # the base model under a *ForCausalLM
        self.head = torch.nn.Linear(policy.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
    ) -> torch.Tensor:
        ids = torch.cat([prompt_ids, completion_ids], dim=1)
        am = torch.cat([prompt_mask, completion_mask], dim=1)
        pos = (am.cumsum(dim=1) - 1).clamp_min(0)
        h = self.trunk(input_ids=ids, attention_mask=am, position_ids=pos).last_hidden_state
        T = completion_ids.shape[1]
        # V(s_t) is read where the policy reads the logits for token t: one position earlier.
        return self.head(h[:, -T - 1 : -1, :].float()).squeeze(-1) * completion_mask
