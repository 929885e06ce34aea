"""The size profile the notebooks run at, chosen from the hardware.

Profiles keep every notebook inside its time on a 2-core CPU and let it grow on a GPU:

- ``cpu`` (default without CUDA): short runs that finish in a minute or two.
- ``fast``: smaller still, for the browser test (nbval runs ``cpu``).
- ``gpu`` (default with CUDA): longer runs, four times the prompts and twice the group per step, on
  a larger policy (``model``: about 34M parameters, built on the GPU by
  ``python -m grpo_lab pretrain --size gpu --device cuda``), which runs in bf16 (``load_policy``'s
  default on CUDA; log-probs, losses and advantages stay in float32).
- ``hf`` (never chosen by itself): a real pretrained chat model, Qwen/Qwen2.5-0.5B-Instruct, on GSM8K with its
  chat template, in the "Train it" cells of notebooks 03 to 09. Completions get 256 tokens, room for a worked
  solution; 2 prompts x 8 answers a step and 10 steps, sized by arithmetic for a 16 GB T4, not measured on one:
  the logits of one batch, 16 rows x 256 tokens x Qwen's 151,936-token vocabulary, take 2.5 GB in bf16, GFPO's
  32 sampled rows twice that. It needs the Hugging Face hub (or its local cache) for the model and openai/gsm8k.

Every profile names its ``model`` (the policy its lessons load: ``load_policy(P["model"])``), its ``task``,
its ``data_dir`` (task gsm8k's local files, None for the hub) and ``max_new_tokens`` (the longest completion).

Set ``GRPO_LAB_PROFILE`` to one of them to override the choice. Two more variables point any profile at
local files: ``GRPO_LAB_MODEL`` replaces its ``model`` (a folder, or a Hugging Face name) and
``GRPO_LAB_DATA_DIR`` its ``data_dir`` (a folder with GSM8K's ``train.jsonl`` and ``test.jsonl``; only for a
profile whose task is gsm8k)::

    GRPO_LAB_PROFILE=hf GRPO_LAB_MODEL=~/models/qwen2.5-0.5b-instruct GRPO_LAB_DATA_DIR=~/data/gsm8k jupyter lab
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..lab.pretrain import GPU_MODEL_DIR
from ..train.config import TrainConfig

LAB_TASK = {
    "task": "sum3",
    "data_dir": None,
    "max_new_tokens": TrainConfig.__dataclass_fields__["max_new_tokens"].default,
}
"""The lab's own task at the lab's own completion length (TrainConfig's default)."""

PROFILES = {
    "fast": {"train_seconds": 8, "steps": 6, "prompts": 8, "group_size": 4, "n_eval": 64, "model": "tiny-sum3",
             **LAB_TASK},
    "cpu": {"train_seconds": 40, "steps": 40, "prompts": 16, "group_size": 8, "n_eval": 256, "model": "tiny-sum3",
            **LAB_TASK},
    "gpu": {"train_seconds": 120, "steps": 200, "prompts": 64, "group_size": 16, "n_eval": 1000,
            "model": str(GPU_MODEL_DIR), **LAB_TASK},
    "hf": {"train_seconds": 240, "steps": 10, "prompts": 2, "group_size": 8, "n_eval": 64,
           "model": "Qwen/Qwen2.5-0.5B-Instruct", "task": "gsm8k", "data_dir": None, "max_new_tokens": 256},
}  # fmt: skip
OVERRIDES = {"GRPO_LAB_MODEL": "model", "GRPO_LAB_DATA_DIR": "data_dir"}
"""Environment variables that replace one key of any profile."""


def profile_name() -> str:
    name = os.environ.get("GRPO_LAB_PROFILE")
    if name:
        if name not in PROFILES:
            raise ValueError(f"GRPO_LAB_PROFILE must be one of {', '.join(PROFILES)}; got {name!r}")
        return name
    return "gpu" if torch.cuda.is_available() else "cpu"


def profile() -> dict:
    """The sizes for this machine (a copy: change it freely), with ``GRPO_LAB_MODEL`` and ``GRPO_LAB_DATA_DIR``
    applied."""
    name = profile_name()
    P = {"name": name, **PROFILES[name]}
    for var, key in OVERRIDES.items():
        value = os.environ.get(var)
        if value:
            P[key] = value
    data_dir = os.environ.get("GRPO_LAB_DATA_DIR")
    if data_dir:
        if P["task"] != "gsm8k":
            raise ValueError(
                f"GRPO_LAB_DATA_DIR is read only by a profile whose task is gsm8k (hf), got it with profile "
                f"{name!r} (task {P['task']})"
            )
        if not Path(data_dir).expanduser().is_dir():
            raise ValueError(
                f"GRPO_LAB_DATA_DIR must be a folder with GSM8K's train.jsonl and test.jsonl, got {data_dir!r} "
                "(not a folder)"
            )
        P["data_dir"] = str(Path(data_dir).expanduser())
    return P
