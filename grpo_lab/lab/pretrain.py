"""Build the lab's tiny policy from scratch: supervised training on the ``sum3`` task.

``python -m grpo_lab pretrain`` trains a ~1M-parameter Llama on correct completions in three
formats with filler, and stops as soon as its held-out greedy accuracy reaches a target in the
middle (by default 35%): an RL lesson needs groups whose rewards vary, so a model right about a
third of the time (greedy) is what we want. The jump in accuracy during training is
sudden, so we stop on measured accuracy, not on a step count.

``--filler 64 --init tiny-sum3`` builds ``tiny-sum3-long``: the same task with answers of up to 85 tokens
(up to 64 filler dots), starting from ``tiny-sum3``'s weights, which already add; its config records the
longest answer it was taught (``lab_longest_answer``, set only for filler beyond ``MAX_FILLER``), and a run whose
``max_new_tokens`` is shorter is refused.

``--size gpu`` builds the larger policy of the gpu profile (about 34M parameters, eight layers of
width 512) the same way, on a GPU in a few minutes, in bf16 autocast; it is saved in float32.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .metrics import evaluate
from .models import (
    TINY_MODEL_DIR,
    build_char_tokenizer,
    count_parameters,
    load_policy,
    pick_device,
    set_threads,
    tiny_llama_config,
)
from .tasks import MAX_FILLER, SUM3_CHARS, get_task, longest_sum3_answer, sum3_sft_examples

GPU_MODEL_DIR = TINY_MODEL_DIR.parent / "gpu-sum3"
"""Where ``pretrain --size gpu`` writes the gpu profile's policy (built on the GPU machine, not shipped)."""

SIZES = {
    "cpu": {"hidden": 128, "layers": 4, "heads": 4, "ffn": 512, "batch_size": 128, "lr": 2e-3},
    "gpu": {"hidden": 512, "layers": 8, "heads": 8, "ffn": 2048, "batch_size": 256, "lr": 6e-4},
}
"""Model sizes and their training settings: ``cpu`` is the shipped ``assets/tiny-sum3`` (about 1M
parameters), ``gpu`` the gpu profile's policy. A wider model wants a smaller learning rate."""


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
    batch_size: int | None = None,
    lr: float | None = None,
    target_accuracy: float = 0.35,
    eval_every: int = 25,
    eval_from: int = 150,
    n_eval: int = 256,
    progress: bool = True,
    size: str = "cpu",
    hidden: int | None = None,
    layers: int | None = None,
    heads: int | None = None,
    ffn: int | None = None,
    device: str | None = "cpu",
    filler: int = MAX_FILLER,
    init: str | None = None,
    max_new_tokens: int = 32,
) -> dict:
    """Train, stop at ``target_accuracy`` (held-out, greedy), save to ``out_dir``; return a summary.

    ``size`` picks ``SIZES[size]``; ``hidden``, ``layers``, ``heads``, ``ffn``, ``batch_size`` and
    ``lr`` override one of its values. ``device``: "cpu" (default, how the shipped model was built),
    "cuda", or None for CUDA when there is one; on CUDA the forward runs in bf16 autocast.
    ``filler``: the most filler dots in a training answer (uniform from 0). ``init``: a lab model to start
    from (its shape replaces ``size``'s). ``max_new_tokens``: the completion length of the evaluations.
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    given = {"hidden": hidden, "layers": layers, "heads": heads, "ffn": ffn, "batch_size": batch_size, "lr": lr}
    shape = {k: (SIZES[size][k] if v is None else v) for k, v in given.items()}
    for k in ("hidden", "layers", "heads", "ffn", "batch_size"):
        if isinstance(shape[k], bool) or not isinstance(shape[k], int) or shape[k] < 1:
            raise ValueError(f"{k} must be a positive int, got {shape[k]!r}")
    if shape["hidden"] % shape["heads"]:
        raise ValueError(f"hidden must be a multiple of heads, got hidden={shape['hidden']} and heads={shape['heads']}")
    if not (isinstance(shape["lr"], (int, float)) and math.isfinite(shape["lr"]) and shape["lr"] > 0):
        raise ValueError(f"lr must be a finite number > 0, got {shape['lr']!r}")
    if isinstance(filler, bool) or not isinstance(filler, int) or filler < 0:
        raise ValueError(f"filler must be an integer >= 0, got {filler!r}")
    longest = longest_sum3_answer(filler)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < longest:
        raise ValueError(
            f"max_new_tokens (--max-new-tokens) must be an integer >= {longest} (the longest answer with {filler} "
            f"filler dots), got {max_new_tokens!r}"
        )
    batch_size, lr = shape["batch_size"], shape["lr"]
    dev = pick_device(device)
    set_threads()
    torch.manual_seed(seed)
    tokenizer = build_char_tokenizer(SUM3_CHARS)
    # Room for the prompt (BOS and 9 characters) and the longest completion a run may sample.
    positions = max(64, 10 + max_new_tokens)
    if init is None:
        from transformers import LlamaForCausalLM

        config = tiny_llama_config(
            vocab_size=len(tokenizer),
            hidden=shape["hidden"],
            layers=shape["layers"],
            heads=shape["heads"],
            ffn=shape["ffn"],
            max_positions=positions,
        )
        model = LlamaForCausalLM(config).to(dev)
    else:
        shaped = [name for name, v in (("hidden", hidden), ("layers", layers), ("heads", heads), ("ffn", ffn)) if v]
        if shaped:
            raise ValueError(
                f"--{shaped[0]} sets the shape of a new model, and init (--init) {init!r} brings its own; "
                "give one of them"
            )
        try:
            model, init_tokenizer = load_policy(init, device=str(dev), dtype=torch.float32)
        except ValueError as err:
            raise ValueError(f"init (--init) {init!r}: {err}") from None
        if init_tokenizer.get_vocab() != tokenizer.get_vocab():
            raise ValueError(
                f"init (--init) {init!r} is not a lab model: its tokenizer is not the lab's character tokenizer; "
                "give tiny-sum3 or a policy trained from it"
            )
        model.config.max_position_embeddings = max(positions, model.config.max_position_embeddings)
        c = model.config
        shape.update(hidden=c.hidden_size, layers=c.num_hidden_layers, heads=c.num_attention_heads,
                     ffn=c.intermediate_size)  # fmt: skip
    # Marks a model whose answers outrun the lab's usual 32 new tokens, so that runs with too few are refused.
    model.config.lab_longest_answer = longest if filler > MAX_FILLER else None
    on_cuda = dev.type == "cuda"
    task = get_task("sum3", seed=seed, n_test=n_eval)
    data = sum3_sft_examples(max_steps * batch_size, seed=seed, max_filler=filler)
    ev = dict(n_prompts=n_eval, max_new_tokens=max_new_tokens)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s, max_steps) / max_steps))
    )
    t0 = time.perf_counter()
    history, reached = [], None
    bar = tqdm(range(max_steps), desc="pretrain", disable=not progress)
    for step in bar:
        batch = _batch(tokenizer, data[step * batch_size : (step + 1) * batch_size])
        ids, att, lab = (x.to(dev) for x in batch)
        model.train()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=on_cuda):
            loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if (step + 1) >= eval_from and (step + 1) % eval_every == 0:
            acc = evaluate(model, tokenizer, task, greedy=True, **ev)["accuracy"]
            history.append({"step": step + 1, "loss": loss.item(), "greedy_accuracy": acc})
            bar.set_postfix(loss=f"{history[-1]['loss']:.3f}", acc=f"{acc:.2f}")
            if acc >= target_accuracy:
                reached = step + 1
                break
    seconds = time.perf_counter() - t0
    sampled = evaluate(model, tokenizer, task, samples=8, temperature=1.0, seed=seed, **ev)
    greedy = evaluate(model, tokenizer, task, greedy=True, **ev)
    summary = {
        "seed": seed,
        "steps": history[-1]["step"] if history else max_steps,
        "reached_target": reached is not None,
        "target_accuracy": target_accuracy,
        "seconds": round(seconds, 1),
        "parameters": count_parameters(model),
        "size": size,
        "shape": shape,
        "device": str(dev),
        "filler": filler,
        "init": init,
        "longest_answer": longest,
        "max_new_tokens": max_new_tokens,
        "held_out_greedy_accuracy": greedy["accuracy"],
        "held_out_sampled_accuracy_t1": sampled["accuracy"],
        "held_out_pass@8_t1": sampled["pass@8"],
        "held_out_mean_length_t1": sampled["length_mean"],
        "n_eval": n_eval,
        "torch": torch.__version__,
        "history": history,
    }
    _save_whole(Path(out_dir), model.to("cpu"), tokenizer, summary)
    return summary


def _save_whole(out_dir: Path, model, tokenizer, summary: dict) -> None:
    """Write the model into a fresh folder beside ``out_dir``, then move each file into ``out_dir`` with
    signals held, so ``out_dir`` holds the old model or the new one, never half of one (a full disk, a
    signal while writing). Other files in ``out_dir`` are left alone."""
    out_dir.mkdir(parents=True, exist_ok=True)
    new = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.new-", dir=out_dir.parent))
    try:
        model.save_pretrained(new)
        tokenizer.save_pretrained(new)
        (new / "pretrain_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        signal.pthread_sigmask(signal.SIG_BLOCK, held)  # a signal now waits until every file is in place
        try:
            for f in sorted(new.iterdir()):
                os.replace(f, out_dir / f.name)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
    except Exception as err:
        if isinstance(err, OSError):
            raise
        # safetensors' own errors (a full disk, say) are not OSErrors: one line, naming the folder
        raise OSError(f"could not write the model to {out_dir} ({err}); the folder is as it was") from None
    finally:
        shutil.rmtree(new, ignore_errors=True)
