"""The size profile the notebooks run at, chosen from the hardware.

Profiles keep every notebook inside its time on a 2-core CPU and let it grow on a GPU:

- ``cpu`` (default without CUDA): short runs that finish in a minute or two.
- ``fast``: smaller still, for the browser test (nbval runs ``cpu``).
- ``gpu`` (default with CUDA): longer runs, four times the prompts and twice the group per step, on
  a larger policy (``model``: about 34M parameters, built on the GPU by
  ``python -m grpo_lab pretrain --size gpu --device cuda``), which runs in bf16 (``load_policy``'s
  default on CUDA; log-probs, losses and advantages stay in float32).

Every profile names its ``model``: the policy its lessons load (``load_policy(P["model"])``).

Set ``GRPO_LAB_PROFILE`` to one of them to override the choice.
"""

from __future__ import annotations

import os

import torch

from ..lab.pretrain import GPU_MODEL_DIR

PROFILES = {
    "fast": {"train_seconds": 8, "steps": 6, "prompts": 8, "group_size": 4, "n_eval": 64, "model": "tiny-sum3"},
    "cpu": {"train_seconds": 40, "steps": 40, "prompts": 16, "group_size": 8, "n_eval": 256, "model": "tiny-sum3"},
    "gpu": {"train_seconds": 120, "steps": 200, "prompts": 64, "group_size": 16, "n_eval": 1000,
            "model": str(GPU_MODEL_DIR)},
}


def profile_name() -> str:
    name = os.environ.get("GRPO_LAB_PROFILE")
    if name:
        if name not in PROFILES:
            raise ValueError(f"GRPO_LAB_PROFILE must be one of {', '.join(PROFILES)}; got {name!r}")
        return name
    return "gpu" if torch.cuda.is_available() else "cpu"


def profile() -> dict:
    """The sizes for this machine (a copy: change it freely)."""
    return {"name": profile_name(), **PROFILES[profile_name()]}
