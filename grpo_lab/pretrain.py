"""Build the lab's tiny policy from scratch: supervised training on the ``sum3`` task.

``python -m grpo_lab pretrain`` trains a ~1M-parameter Llama on correct completions in three
formats with filler, and stops as soon as its held-out greedy accuracy reaches a target in the
middle (by default 35%): an RL lesson needs groups whose rewards vary, so a model that is
right about half the time is exactly what we want. The jump in accuracy during training is
sudden, so we stop on measured accuracy, not on a step count.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .metrics import evaluate
from .models import TINY_MODEL_DIR, build_char_tokenizer, count_parameters, set_threads, tiny_llama_config
from .tasks import SUM3_CHARS, get_task, sum3_sft_examples


def _batch(tokenizer, pairs):
    """Right-padded [bos] prompt completion [eos] with labels only on the completion."""
    seqs, labels = [], []
    for prompt, completion in pairs:
        p = tokenizer(prompt)["input_ids"]
        c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        seqs.append(p + c)
        labels.append([-100] * len(p) + c)
    L = max(map(len, seqs))
    ids = torch.full((len(seqs), L), tokenizer.pad_token_id)
    lab = torch.full((len(seqs), L), -100)
    att = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, (s, target) in enumerate(zip(seqs, labels)):
        ids[i, : len(s)] = torch.tensor(s)
        lab[i, : len(target)] = torch.tensor(target)
        att[i, : len(s)] = 1
    return ids, att, lab


def pretrain(
    out_dir: str | Path = TINY_MODEL_DIR,
    seed: int = 0,
    max_steps: int = 1500,
    batch_size: int = 128,
    lr: float = 2e-3,
    target_accuracy: float = 0.35,
    eval_every: int = 25,
    eval_from: int = 150,
    n_eval: int = 256,
    progress: bool = True,
) -> dict:
    """Train, stop at ``target_accuracy`` (held-out, greedy), save to ``out_dir``; return a summary."""
    set_threads()
    torch.manual_seed(seed)
    tokenizer = build_char_tokenizer(SUM3_CHARS)
    config = tiny_llama_config(vocab_size=len(tokenizer))
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(config)
    task = get_task("sum3", seed=seed, n_test=n_eval)
    data = sum3_sft_examples(max_steps * batch_size, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s, max_steps) / max_steps))
    )
    t0 = time.perf_counter()
    history, reached = [], None
    bar = tqdm(range(max_steps), desc="pretrain", disable=not progress)
    for step in bar:
        ids, att, lab = _batch(tokenizer, data[step * batch_size : (step + 1) * batch_size])
        model.train()
        loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if (step + 1) >= eval_from and (step + 1) % eval_every == 0:
            acc = evaluate(model, tokenizer, task, n_prompts=n_eval, greedy=True)["accuracy"]
            history.append({"step": step + 1, "loss": loss.item(), "greedy_accuracy": acc})
            bar.set_postfix(loss=f"{float(loss):.3f}", acc=f"{acc:.2f}")
            if acc >= target_accuracy:
                reached = step + 1
                break
    seconds = time.perf_counter() - t0
    sampled = evaluate(model, tokenizer, task, n_prompts=n_eval, samples=8, temperature=1.0, seed=seed)
    greedy = evaluate(model, tokenizer, task, n_prompts=n_eval, greedy=True)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    summary = {
        "seed": seed,
        "steps": history[-1]["step"] if history else max_steps,
        "reached_target": reached is not None,
        "target_accuracy": target_accuracy,
        "seconds": round(seconds, 1),
        "parameters": count_parameters(model),
        "held_out_greedy_accuracy": greedy["accuracy"],
        "held_out_sampled_accuracy_t1": sampled["accuracy"],
        "held_out_pass@8_t1": sampled["pass@8"],
        "held_out_mean_length_t1": sampled["length_mean"],
        "n_eval": n_eval,
        "torch": torch.__version__,
        "history": history,
    }
    (out_dir / "pretrain_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
