"""What only the notebooks need: a size profile chosen from the hardware, and committed histories.

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

import json
import os

import torch

from .models import ASSETS
from .pretrain import GPU_MODEL_DIR

PROFILES = {
    "fast": {"train_seconds": 8, "steps": 6, "prompts": 8, "group_size": 4, "n_eval": 64, "model": "tiny-sum3"},
    "cpu": {"train_seconds": 40, "steps": 40, "prompts": 16, "group_size": 8, "n_eval": 256, "model": "tiny-sum3"},
    "gpu": {"train_seconds": 120, "steps": 200, "prompts": 64, "group_size": 16, "n_eval": 1000,
            "model": str(GPU_MODEL_DIR)},
}
HISTORIES = ASSETS / "histories"


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


def load_history(name: str) -> dict:
    """A run summary committed under ``assets/histories/NAME.json`` by the command line."""
    path = HISTORIES / f"{name}.json"
    if not path.exists():
        available = sorted(p.stem for p in HISTORIES.glob("*.json"))
        raise ValueError(f"name must be one of the committed histories {available}; got {name!r}")
    return json.loads(path.read_text())


class ClaimFailed(AssertionError):
    """A sentence the course asserts no longer holds for the numbers beside it."""


def claim(holds: object, sentence: str) -> None:
    """Print ``sentence``, a conclusion drawn from numbers the notebook just computed, and raise
    ``ClaimFailed`` when ``holds`` is false, so the notebook fails the day its prose stops being true.

    Write the numbers into the sentence with an f-string, so what is printed is what was checked::

        claim(gspo_clip > 10 * grpo_clip, f"GSPO clips {gspo_clip:.1%} of tokens, GRPO {grpo_clip:.1%}")
    """
    if not isinstance(sentence, str) or not sentence.strip():
        raise ValueError(f"sentence must be a non-empty str, got {sentence!r}")
    if not bool(holds):
        raise ClaimFailed(f"this no longer holds: {sentence}")
    print(sentence)
