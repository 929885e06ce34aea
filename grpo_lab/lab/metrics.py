"""How good a policy is: ``evaluate`` measures it on held-out prompts (accuracy, pass@k, lengths),
``pass_at_k`` is the unbiased estimator it uses. The per-step training metrics are the trainer's
(``Trainer.train_step``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from ..core.checks import check_positive_int
from .rollout import encode_prompts, sample_group
from .tasks import score_completions

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from .tasks import Task


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): the chance that k of n samples, c of them correct, hold one correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    n_prompts: int = 128,
    samples: int = 1,
    temperature: float = 1.0,
    greedy: bool = False,
    max_new_tokens: int = 32,
    seed: int = 0,
    batch_prompts: int = 64,
    system: str | None = None,
) -> dict:
    """Accuracy on the first ``n_prompts`` held-out prompts of ``task``.

    ``greedy=True`` decodes the most likely completion once per prompt; otherwise ``samples``
    completions per prompt are drawn at ``temperature`` and pass@``samples`` is reported too.
    """
    check_positive_int("n_prompts", n_prompts)
    check_positive_int("samples", samples)
    check_positive_int("max_new_tokens", max_new_tokens)
    check_positive_int("batch_prompts", batch_prompts)
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    rows = task.test.select(range(min(n_prompts, len(task.test))))
    G = 1 if greedy else samples
    rewards, lengths, texts = [], [], []
    for start in range(0, len(rows), batch_prompts):
        chunk = rows[start : start + batch_prompts]
        ids, mask = encode_prompts(tokenizer, chunk["prompt"], chat=task.chat, system=system, device=device)
        ro = sample_group(model, tokenizer, ids, mask, G, max_new_tokens, temperature, gen, greedy=greedy)
        answers = [a for a in chunk["answer"] for _ in range(G)]
        rewards += score_completions(task.reward_fn, ro.texts, answers, ro.finished.tolist())
        lengths += ro.lengths.tolist()
        texts += ro.texts
    r = torch.tensor(rewards, dtype=torch.float64).view(-1, G)
    out = {
        "accuracy": float(r.mean()),
        "length_mean": float(sum(lengths) / len(lengths)),
        "n_prompts": len(rows),
        "samples": G,
        "greedy": greedy,
    }
    if G > 1:
        out[f"pass@{G}"] = float(sum(pass_at_k(G, int(c), G) for c in r.sum(dim=1)) / len(rows))
        # The whole curve from the same samples: the unbiased estimator for every k <= G.
        out["pass_at_k"] = {
            k: float(sum(pass_at_k(G, int(c), k) for c in r.sum(dim=1)) / len(rows)) for k in range(1, G + 1)
        }
    out["examples"] = texts[:8]
    return out
