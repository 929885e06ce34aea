"""Speed, measured side by side: the lab's GRPO step against TRL's ``GRPOTrainer`` step.

    python -m grpo_lab bench --json runs/bench.json

Each *arm* is timed step by step on the same work (``config.FAIRNESS`` says how the two sides are kept
equal, and the result carries it): the lab's ``Trainer`` (``lab``), the lab with one of its speed-ups
switched off (``lab_no_prompt_sharing``, ``lab_no_compaction``, ``lab_no_length_grouping``: the
ablations), TRL's ``GRPOTrainer`` (``trl``) and TRL with continuous-batching generation
(``trl_continuous_batching``). Per run it records each step's wall time and where it went
(generation, the reward function, forward + backward of the update, the optimiser step, the rest),
the tokens through the model, and the peak memory the steps add. ``rollout`` times the lab's
``sample_group`` against a plain ``model.generate`` loop on the same prompts, with greedy outputs
compared token for token. ``report`` turns the runs into ratios with a bootstrap interval.

The lab is timed through the trainer's own hooks (its ``sampler`` and ``scorer``); TRL through its
model's ``generate`` and its reward function. Both use ``timing.Clock``: a forward pre-hook on the
policy (the first forward with gradients starts the update's forward + backward), a wrapper on
``torch.autograd.backward`` (ends it) and the global optimiser step hooks.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict
from typing import TYPE_CHECKING

import torch

from ..lab.models import load_policy, set_threads
from ..lab.rollout import encode_prompts, sample_group, speedups_off
from ..lab.tasks import Task, get_task, score_completions
from ..scale.trl_bridge import make_trl_trainer
from ..train.trainer import Trainer
from .config import (
    FAIRNESS,
    LAB_ARMS,
    TRL_ARMS,
    BenchConfig,
    lab_prompt_stream,
    run_order,
)
from .report import (
    comparisons_for,
    pair_ratios,
    summarise_arm,
    summarise_steps,
)
from .timing import Clock, Memory, StepLog, sync

if TYPE_CHECKING:
    from trl import GRPOConfig


# --- the lab's side -------------------------------------------------------------------------


def run_lab(cfg: BenchConfig, arm: str = "lab") -> dict:
    """The lab's Trainer, GRPO preset, timed step by step through its sampler and scorer hooks; the
    arm's ``SPEEDUPS`` switched off."""
    n = cfg.warmup + cfg.steps
    seen = {"tokens": 0, "prompt_tokens": 0, "completions": 0, "prompts": []}
    clock = Clock()

    def after_sample(ro, args, kwargs):
        seen["tokens"] += int(ro.completion_mask.sum())
        seen["prompt_tokens"] += int(ro.prompt_mask.sum())
        seen["completions"] += int(ro.completion_ids.shape[0])
        # what the model was fed, decoded: the prompts themselves, not the trainer's word for them
        tokenizer, prompt_ids = args[1], args[2]  # called as sample_group(model, tokenizer, prompt_ids, ...)
        seen["prompts"].append(tokenizer.batch_decode(prompt_ids, skip_special_tokens=True))

    trainer = Trainer(
        dataclasses.replace(cfg.train, steps=n),
        sampler=clock.wrap("generation", sample_group, after_sample),
        scorer=clock.wrap("reward", score_completions),
    )
    clock.install(trainer.model)
    log = StepLog(clock)
    mem = Memory(trainer.device)

    def train():
        with speedups_off(*LAB_ARMS[arm]):
            mem.start()
            log.start()
            trainer.train(n, progress=False, callback=lambda m: _end_step(log, seen, trainer.device, m["reward_mean"]))

    out = _timed_run(train, clock, log, mem, cfg, seen, library="grpo_lab", speedups_off=list(LAB_ARMS[arm]))
    keys = ("step", "reward_mean", "loss", "grad_norm", "length_mean")
    out["learning"] = [{k: h.get(k) for k in keys} for h in trainer.history]
    return out


def _end_step(log: StepLog, seen: dict, device, reward_mean: float) -> None:
    """Close a step's timings, with the tokens counted since the last one."""
    sync(device)
    log.end_step(
        tokens=seen["tokens"],
        prompt_tokens=seen["prompt_tokens"],
        completions=seen["completions"],
        reward_mean=reward_mean,
    )
    seen["tokens"] = seen["prompt_tokens"] = seen["completions"] = 0


def _timed_run(
    train: Callable[[], object], clock: Clock, log: StepLog, mem: Memory, cfg: BenchConfig, seen: dict, **extra
) -> dict:
    """Run ``train`` (which starts ``mem`` and ``log``), then take the clock's hooks off: the run's
    steps summarised, its memory, the prompts its model was fed, and ``extra``."""
    try:
        train()
        memory = mem.stop()
    finally:
        clock.uninstall()
    out = summarise_steps(log.steps, cfg.warmup)
    return {**out, "memory": memory, "prompts": seen["prompts"], "threads": torch.get_num_threads(), **extra}


# --- TRL's side -----------------------------------------------------------------------------


def _count_completion_tokens(completion_ids, eos_token_id: int):
    """Tokens per row up to and including the first EOS (all of them when there is none)."""
    is_eos = completion_ids == eos_token_id
    T = completion_ids.shape[1]
    return torch.where(
        is_eos.any(dim=1), is_eos.int().argmax(dim=1) + 1, torch.full_like(is_eos[:, 0], T, dtype=torch.long)
    )


def _cb_tokens(generated: list[int], eos_token_id: int, limit: int) -> int:
    """Continuous batching's tokens of one completion, counted as ``_count_completion_tokens`` does."""
    generated = list(generated)[:limit]
    return generated.index(eos_token_id) + 1 if eos_token_id in generated else len(generated)


def run_trl(cfg: BenchConfig, arm: str = "trl") -> dict:
    """TRL's GRPOTrainer on the same work (built by ``trl_bridge.make_trl_trainer``), timed step by
    step through a TrainerCallback."""
    import trl
    from transformers import TrainerCallback

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames, said once per setting
    tc = cfg.train
    set_threads()
    torch.manual_seed(tc.seed)
    model, tokenizer = load_policy(tc.model, tc.device)
    device = next(model.parameters()).device
    base = get_task(tc.task, seed=0, data_dir=tc.data_dir)
    # TRL reads prompts from its dataset in order (shuffle_dataset=False): give it the lab's stream.
    task = Task(
        base.name, lab_prompt_stream(cfg, cfg.warmup + cfg.steps), base.test, base.reward_fn, features=base.features
    )
    clock = Clock().install(model)
    log = StepLog(clock)
    seen = {"tokens": 0, "prompt_tokens": 0, "completions": 0, "prompts": [], "rewards": []}
    eos, G = tokenizer.eos_token_id, tc.group_size

    def after_generate(out, args, kwargs):
        P = kwargs["input_ids"].shape[1]
        seen["tokens"] += int(_count_completion_tokens(out[:, P:], eos).sum())
        seen["prompt_tokens"] += int(kwargs["attention_mask"].sum())
        seen["completions"] += int(out.shape[0])
        seen["prompts"].append(tokenizer.batch_decode(kwargs["input_ids"][::G], skip_special_tokens=True))

    def after_generate_batch(outputs, args, kwargs):
        prompt_ids = list(args[0] if args else kwargs["inputs"])
        seen["tokens"] += sum(_cb_tokens(o.generated_tokens, eos, tc.max_new_tokens) for o in outputs.values())
        seen["prompt_tokens"] += sum(len(p) for p in prompt_ids)
        seen["completions"] += len(outputs)
        seen["prompts"].append(tokenizer.batch_decode(prompt_ids[::G], skip_special_tokens=True))

    def after_reward(rewards, args, kwargs):
        seen["rewards"].append(list(rewards))

    model.generate = clock.wrap("generation", model.generate, after_generate)
    if hasattr(model, "generate_batch"):
        model.generate_batch = clock.wrap("generation", model.generate_batch, after_generate_batch)
    mem = Memory(device)

    class Steps(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            mem.start()
            log.start()

        def on_step_end(self, args, state, control, **kwargs):
            rewards = seen["rewards"][-1] if seen["rewards"] else [float("nan")]
            _end_step(log, seen, device, statistics.fmean(rewards))

    with tempfile.TemporaryDirectory(prefix="grpo_lab_bench_trl_") as d:
        t = make_trl_trainer(
            model,
            tokenizer,
            task,
            algo="grpo",
            steps=cfg.warmup + cfg.steps,
            prompts_per_step=tc.prompts_per_step,
            group_size=G,
            max_new_tokens=tc.max_new_tokens,
            lr=tc.lr,
            temperature=tc.temperature,
            seed=tc.seed,
            output_dir=d,
            # The bench's own settings on top of the bridge's: the lab's prompt stream in order, pure
            # sampling, the lab's optimiser (torch AdamW, not TRL's default fused AdamW), no logging work.
            shuffle_dataset=False,
            top_k=0,
            top_p=1.0,
            optim="adamw_torch",
            adam_beta1=0.9,
            adam_beta2=0.999,
            adam_epsilon=1e-8,
            weight_decay=tc.weight_decay,
            max_grad_norm=tc.grad_clip,
            warmup_steps=0,
            disable_tqdm=True,
            logging_steps=10**9,
            **TRL_ARMS[arm],
        )
        t.add_callback(Steps())
        t.reward_funcs[0] = clock.wrap("reward", t.reward_funcs[0], after_reward)
        check_trl_settings(t.args, cfg, arm)
        library = f"trl {trl.__version__}"
        return _timed_run(t.train, clock, log, mem, cfg, seen, library=library, trl_settings=dict(TRL_ARMS[arm]))


def check_trl_settings(args: GRPOConfig, cfg: BenchConfig, arm: str = "trl") -> None:
    """Fail loudly if TRL would not do the lab's work (a changed bridge or TRL default)."""
    tc = cfg.train
    want = {
        "loss_type": "grpo",
        "beta": 0.0,
        "num_generations": tc.group_size,
        "per_device_train_batch_size": tc.prompts_per_step * tc.group_size,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": 1,
        "num_iterations": 1,
        "max_completion_length": tc.max_new_tokens,
        "temperature": tc.temperature,
        "top_k": 0,
        "top_p": 1.0,
        "learning_rate": tc.lr,
        "weight_decay": tc.weight_decay,
        "max_grad_norm": tc.grad_clip,
        "epsilon": 0.2,
        "gradient_checkpointing": False,
        "shuffle_dataset": False,
        "report_to": [],
        "use_vllm": False,
        "use_transformers_continuous_batching": bool(TRL_ARMS[arm].get("use_transformers_continuous_batching", False)),
    }
    got = {k: getattr(args, k) for k in want}
    got["report_to"] = [r for r in (args.report_to or []) if r != "none"]
    got["optim"], want["optim"] = str(getattr(args.optim, "value", args.optim)), "adamw_torch"
    got["lr_scheduler_type"], want["lr_scheduler_type"] = (
        str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
        "constant",
    )
    bad = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    if bad:
        raise RuntimeError(f"TRL's GRPOConfig does not match the lab's step (got, wanted): {bad}")


# --- rollout: the lab's sampler against model.generate ---------------------------------------


def run_rollout(cfg: BenchConfig) -> dict:
    """Tokens per second of ``sample_group`` and of a plain ``model.generate`` loop, same prompts,
    calls alternated (lab, generate, generate, lab, ...)."""
    tc = cfg.train
    set_threads()
    model, tokenizer = load_policy(tc.model, tc.device)
    device = next(model.parameters()).device
    prompts = list(lab_prompt_stream(cfg, 1)["prompt"])
    ids, mask = encode_prompts(tokenizer, prompts, device=device)
    G, T, eos = tc.group_size, tc.max_new_tokens, tokenizer.eos_token_id
    rep_ids, rep_mask = ids.repeat_interleave(G, dim=0), mask.repeat_interleave(G, dim=0)
    gen = torch.Generator(device=device).manual_seed(tc.seed)
    torch.manual_seed(tc.seed)

    def lab(greedy=False):
        ro = sample_group(model, tokenizer, ids, mask, G, T, tc.temperature, gen, greedy=greedy)
        return ro.completion_ids, ro.completion_mask.sum(dim=1)

    def hf(greedy=False):
        kw = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=tc.temperature, top_k=0, top_p=1.0)
        with torch.no_grad():
            out = model.generate(
                input_ids=rep_ids,
                attention_mask=rep_mask,
                max_new_tokens=T,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=eos,
                **kw,
            )
        c = out[:, rep_ids.shape[1] :]
        return c, _count_completion_tokens(c, eos)

    fns = {"lab_sample_group": lab, "hf_generate": hf}
    for fn in fns.values():
        fn()  # warm-up
    secs, toks = {k: [] for k in fns}, {k: [] for k in fns}
    for _, name in run_order(tuple(fns), cfg.rollout_repeats):
        sync(device)
        t = time.perf_counter()
        _, lengths = fns[name]()
        sync(device)
        secs[name].append(time.perf_counter() - t)
        toks[name].append(int(lengths.sum()))
    result = {
        name: {
            "calls": cfg.rollout_repeats,
            "completions_per_call": len(prompts) * G,
            "tokens": sum(toks[name]),
            "seconds": sum(secs[name]),
            "median_call_seconds": statistics.median(secs[name]),
            "tokens_per_second": sum(toks[name]) / sum(secs[name]),
        }
        for name in fns
    }
    # Same work? Greedy decoding must give the same tokens through both paths.
    c_lab, n_lab = lab(greedy=True)
    c_hf, n_hf = hf(greedy=True)
    same = bool(torch.equal(n_lab, n_hf)) and all(
        torch.equal(c_lab[i, : int(n_lab[i])], c_hf[i, : int(n_hf[i])]) for i in range(c_lab.shape[0])
    )
    result["greedy_outputs_match"] = same
    result["speedup_tokens_per_second"] = (
        result["lab_sample_group"]["tokens_per_second"] / result["hf_generate"]["tokens_per_second"]
    )
    result["threads"] = torch.get_num_threads()
    return result


# --- running the arms -----------------------------------------------------------------------


def _part(name: str, cfg: BenchConfig) -> dict:
    if name in LAB_ARMS:
        return run_lab(cfg, name)
    if name in TRL_ARMS:
        return run_trl(cfg, name)
    return run_rollout(cfg)


def _run_part(name: str, cfg: BenchConfig) -> dict:
    """One arm (or the rollout part) in a child process of its own (its own memory and timers), or
    here when that is not possible. An error in the child is raised here as it was raised there."""
    # CUDA cannot be used in a forked child of a process that has used it: there, each run starts afresh.
    method = "spawn" if _uses_cuda(cfg) else "fork"
    if not cfg.isolate or method not in mp.get_all_start_methods():
        return _part(name, cfg)
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context(method)) as pool:
        try:
            return pool.submit(_part, name, cfg).result()
        except BrokenProcessPool:
            raise RuntimeError(f"the bench's {name} process died before it could report") from None


def _uses_cuda(cfg: BenchConfig) -> bool:
    return str(cfg.train.device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")


def run_bench(cfg: BenchConfig | None = None, progress: Callable[[str], object] | None = None) -> dict:
    """Measure every part in ``cfg.parts`` and return the comparison (the JSON the CLI writes)."""
    import transformers

    cfg = cfg or BenchConfig()
    say = progress or (lambda line: None)
    arms = cfg.arms
    if any(a in TRL_ARMS for a in arms):
        import trl  # imported once here, so no forked run pays for the import inside its steps

    result: dict = {
        "config": {**asdict(cfg), "arms": list(arms)},
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "machine": {
            "cpu_count": os.cpu_count(),
            "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "device": cfg.train.device or ("cuda" if torch.cuda.is_available() else "cpu"),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        },
        "fairness": FAIRNESS,
    }
    if any(a in TRL_ARMS for a in arms):
        result["versions"]["trl"] = trl.__version__
    runs: dict[str, list[dict]] = {a: [] for a in arms}
    order = run_order(arms, cfg.pairs) if arms else []
    result["order"] = [[p, a] for p, a in order]
    result["runs"] = []
    for i, (pair, arm) in enumerate(order):
        say(f"bench: pair {pair + 1}/{cfg.pairs}, {arm} ({i + 1}/{len(order)}) ...")
        t = time.perf_counter()
        r = _run_part(arm, cfg)
        say(f"bench: {arm} done in {time.perf_counter() - t:.1f} s")
        runs[arm].append(r)
        result["runs"].append({"pair": pair, "arm": arm, **r})
    if arms:
        result["arms"] = {a: summarise_arm(runs[a]) for a in arms}
        stream = lab_prompt_stream(cfg, cfg.warmup + cfg.steps)["prompt"]
        P = cfg.train.prompts_per_step
        want = [list(stream[i * P : (i + 1) * P]) for i in range(cfg.warmup + cfg.steps)]
        result["same_prompts"] = all(r["prompts"] == want for rs in runs.values() for r in rs)
    result["comparisons"] = [
        {"lab_arm": a, "trl_arm": b, **pair_ratios(runs[a], runs[b], cfg.level)} for a, b in comparisons_for(arms)
    ]
    main = [c for c in result["comparisons"] if (c["lab_arm"], c["trl_arm"]) == ("lab", "trl")]
    if main:
        result["speedup"] = main[0]["median_step_ratio"]
        if "step_interval" in main[0]:
            result["speedup_interval"] = [main[0]["step_interval"]["low"], main[0]["step_interval"]["high"]]
    if "rollout" in cfg.parts:
        say("bench: rollout ...")
        result["rollout"] = _run_part("rollout", cfg)
    if hasattr(os, "getloadavg"):
        result["machine"]["load_average_at_end"] = list(os.getloadavg())
    result["machine"]["device_name"] = _device_name(cfg.train.device)  # after the runs: it may start CUDA here
    return result


def _device_name(device: str | None) -> str:
    if str(device or "cuda").startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device or "cuda"))
    return platform.processor() or platform.machine()


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python -m grpo_lab bench")
