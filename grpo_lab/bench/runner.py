"""Speed, measured side by side: the lab's GRPO step against TRL's ``GRPOTrainer`` step.

    python -m grpo_lab bench --json runs/bench.json

One run measures, on the same model, task, batch (prompts x G), completion length and optimiser:

- **the step** (rollout, scoring, loss, update) of each *arm*: the lab's ``Trainer`` (``lab``), the
  lab with one of its speed-ups switched off (``lab_no_prompt_sharing``, ``lab_no_compaction``,
  ``lab_no_length_grouping``: the ablations, which should bring the ratio towards 1.0x), TRL's
  ``GRPOTrainer`` (``trl``) and TRL with its continuous-batching generation
  (``trl_continuous_batching``);
- arms are run in **pairs, alternating the order** (pair 0: lab, ..., trl; pair 1: trl, ..., lab;
  ...), so a drift of the machine's speed during the run hits both sides alike. Each pair gives one
  ratio (TRL's median step / the lab arm's); the report is the **median ratio with a bootstrap
  interval** over the pairs, and each arm's per-step spread (quartiles);
- **tokens through the model per phase** (completion tokens sampled; prompt + completion tokens in
  the update's forward and backward) and the **time per token**, so a side that happened to sample
  longer completions is not called slower for it: the ratio per generated token is reported beside
  the ratio per step;
- where the step's time goes: generation, scoring (the reward function), forward + backward of the
  update, the optimiser step, and everything else (overhead);
- **rollout tokens per second** of the lab's ``sample_group`` against a plain ``model.generate``
  loop on the same prompts (calls alternated), with greedy outputs compared token for token;
- **peak memory** each step adds over the loaded model (CPU: resident set; CUDA: allocated).

How it is kept fair (and written into the JSON under ``fairness``): both sides load the same weights
from disk; they see the same prompts in the same order (the lab's prompt stream,
``Trainer.prompt_indices``, is given to TRL as its dataset, unshuffled, and the bench checks what each
side's model was fed: ``same_prompts``); the same G, completion length, temperature (pure sampling:
top-k 0, top-p 1), AdamW with the same lr, betas, eps, no weight decay, constant schedule and gradient
clip 1.0; GRPO's loss (``loss_type="grpo"`` in TRL is the lab's ``seq_mean_token_mean``), clip 0.2,
beta 0 (no reference model), one optimiser step per generation. The lab does not measure KL here
(``track_kl=False``), since TRL with beta 0 loads no reference model; and TRL's gradient
checkpointing (on by default in ``GRPOConfig``) is turned off, since the lab does not recompute
activations. ``check_trl_settings`` fails the run if any of this does not hold. A step is the wall
time between the ends of two consecutive steps of each library's own training loop, so the loop's
own overhead counts on both sides.

Each run of an arm is its own process (forked on Linux; started afresh on CUDA, which a fork cannot
share), so no run sees another's memory or timers.
The lab is timed through the trainer's own hooks (its ``sampler`` and ``scorer``); TRL through its
model's ``generate`` and its reward function. Both use ``timing.Clock``: a forward pre-hook on the
policy (the first forward with gradients starts the update's forward + backward), a wrapper on
``torch.autograd.backward`` (ends it) and the global optimiser step hooks.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import random
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ..core.checks import check_positive_int
from ..train.trainer import TrainConfig, Trainer
from .timing import CATEGORIES, Clock, Memory, StepLog, bootstrap_interval, spread, sync

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import GRPOConfig

LAB_ARMS = {
    "lab": (),
    "lab_no_prompt_sharing": ("share_prompt",),
    "lab_no_compaction": ("compact",),
    "lab_no_length_grouping": ("length_grouping",),
}
"""Each lab arm and the ``rollout.SPEEDUPS`` it switches off."""
TRL_ARMS = {
    "trl": {},
    "trl_continuous_batching": {"use_transformers_continuous_batching": True},
}
"""Each TRL arm and the ``GRPOConfig`` settings it adds."""
ARMS = tuple(LAB_ARMS) + tuple(TRL_ARMS)
PARTS = ARMS + ("rollout",)
MIN_PAIRS_FOR_README = 5


def _default_train() -> TrainConfig:
    return TrainConfig(algo="grpo", track_kl=False)


@dataclass
class BenchConfig:
    """What one bench run measures. ``train`` holds the work both sides do (prompts x G, completion
    length, temperature, lr, seed, model, device); the defaults are the course's CPU profile
    (16 x 8, 32 tokens). The rest says how it is measured."""

    train: TrainConfig = field(default_factory=_default_train)
    steps: int = 5
    """Timed steps per run of an arm (its median is the run's step time)."""
    warmup: int = 2
    """Steps each run does first and does not time (lazy initialisation, optimiser state, allocator)."""
    pairs: int = 5
    """Runs of every arm, in alternating order; one ratio per pair."""
    rollout_repeats: int = 5
    """Timed calls of each generator in the rollout comparison (after one warm-up call each)."""
    parts: tuple = PARTS
    """Arms to run (see ``ARMS``), and "rollout" for the generator comparison."""
    level: float = 0.95
    """Coverage of the bootstrap interval of the ratios."""
    isolate: bool = True
    """Run each arm in a forked child process (Linux). False: one after another in this process."""

    def __post_init__(self):
        if not isinstance(self.train, TrainConfig):
            raise ValueError(f"train must be a TrainConfig, got {type(self.train).__name__}")
        t = self.train
        if t.algo != "grpo" or t.track_kl or t.algo_overrides or t.task != "sum3" or t.system_prompt is not None:
            raise ValueError(
                "train must be GRPO on sum3 with track_kl=False and no algo_overrides or system_prompt "
                f"(TRL's side runs exactly that), got algo={t.algo!r}, task={t.task!r}, track_kl={t.track_kl}, "
                f"algo_overrides={t.algo_overrides}, system_prompt={t.system_prompt!r}"
            )
        for name, minimum in (("steps", 1), ("warmup", 0), ("pairs", 1), ("rollout_repeats", 1)):
            check_positive_int(name, getattr(self, name), minimum=minimum)
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {self.level!r}")
        self.parts = tuple(self.parts)
        if not self.parts or any(p not in PARTS for p in self.parts):
            raise ValueError(f"parts must be a non-empty subset of {PARTS}, got {self.parts!r}")
        if self.train.device not in (None, "cpu") and not str(self.train.device).startswith("cuda"):
            raise ValueError(f"device must be None, 'cpu' or 'cuda[:N]', got {self.train.device!r}")

    @property
    def arms(self) -> tuple:
        return tuple(a for a in ARMS if a in self.parts)


def run_order(arms: tuple, pairs: int) -> list[tuple[int, str]]:
    """``(pair, arm)`` in the order they run: the arms in order in even pairs, reversed in odd ones
    (lab, trl, trl, lab, lab, trl, ...), so a steady drift of the machine's speed favours no side."""
    return [(p, a) for p in range(pairs) for a in (arms if p % 2 == 0 else arms[::-1])]


def lab_prompt_stream(cfg: BenchConfig, n_steps: int) -> Dataset:
    """The rows of the train split the lab's Trainer draws for ``n_steps`` steps, in order."""
    from ..lab.tasks import get_task

    task = get_task(cfg.train.task, seed=0)
    idx = Trainer.prompt_indices(random.Random(cfg.train.seed), len(task.train), n_steps * cfg.train.prompts_per_step)
    return task.train.select(idx).select_columns(["prompt", "answer"])


def _summarise_steps(steps: list[dict], warmup: int) -> dict:
    """One run: its timed steps, where the time went, and the tokens through the model."""
    timed = steps[warmup:]
    secs = [s["seconds"] for s in timed]
    mean_step = statistics.fmean(secs)
    out = {
        "step_seconds": [round(s, 5) for s in secs],
        "warmup_step_seconds": [round(s["seconds"], 5) for s in steps[:warmup]],
        "median_step_seconds": statistics.median(secs),
        "mean_step_seconds": mean_step,
        "breakdown_seconds": {},
        "breakdown_fraction": {},
    }
    for c in CATEGORIES + ("other",):
        v = statistics.fmean(s[c] for s in timed)
        out["breakdown_seconds"][c] = v
        out["breakdown_fraction"][c] = v / mean_step if mean_step > 0 else float("nan")
    total = {k: int(sum(s[k] for s in timed)) for k in ("tokens", "prompt_tokens", "completions")}
    out.update(total)
    out["update_tokens"] = total["prompt_tokens"] + total["tokens"]
    out["reward_mean"] = statistics.fmean(s["reward_mean"] for s in timed)
    out["mean_completion_length"] = total["tokens"] / total["completions"] if total["completions"] else float("nan")
    out["seconds_per_token"] = _per_token(
        sum(secs),
        sum(s["generation"] for s in timed),
        sum(s["forward_backward"] for s in timed),
        total["tokens"],
        out["update_tokens"],
    )
    return out


def _per_token(step: float, generation: float, forward_backward: float, tokens: int, update_tokens: int) -> dict:
    """Seconds per token: the step and generation per completion token sampled, the update's forward +
    backward per token it covers (prompt + completion of every row)."""
    return {
        "step": step / tokens,
        "generation": generation / tokens,
        "forward_backward": forward_backward / update_tokens,
    }


# --- the lab's side -------------------------------------------------------------------------


def run_lab(cfg: BenchConfig, arm: str = "lab") -> dict:
    """The lab's Trainer, GRPO preset, timed step by step through its sampler and scorer hooks; the
    arm's ``SPEEDUPS`` switched off."""
    import torch

    from ..lab.rollout import sample_group, speedups_off
    from ..lab.tasks import score_completions

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

    def on_step(m):
        sync(trainer.device)
        log.end_step(
            tokens=seen["tokens"],
            prompt_tokens=seen["prompt_tokens"],
            completions=seen["completions"],
            reward_mean=m["reward_mean"],
        )
        seen["tokens"] = seen["prompt_tokens"] = seen["completions"] = 0

    try:
        with speedups_off(*LAB_ARMS[arm]):
            mem.start()
            log.start()
            trainer.train(n, progress=False, callback=on_step)
            memory = mem.stop()
    finally:
        clock.uninstall()
    out = _summarise_steps(log.steps, cfg.warmup)
    out.update(
        memory=memory,
        prompts=seen["prompts"],
        threads=torch.get_num_threads(),
        library="grpo_lab",
        speedups_off=list(LAB_ARMS[arm]),
        learning=[
            {k: h.get(k) for k in ("step", "reward_mean", "loss", "grad_norm", "length_mean")} for h in trainer.history
        ],
    )
    return out


# --- TRL's side -----------------------------------------------------------------------------


def _count_completion_tokens(completion_ids, eos_token_id: int):
    """Tokens per row up to and including the first EOS (all of them when there is none)."""
    import torch

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
    import tempfile

    import torch
    import trl
    from transformers import TrainerCallback

    from ..lab.models import load_policy, set_threads
    from ..lab.tasks import Task, get_task
    from ..scale.trl_bridge import make_trl_trainer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames, said once per setting
    tc = cfg.train
    set_threads()
    torch.manual_seed(tc.seed)
    model, tokenizer = load_policy(tc.model, tc.device)
    device = next(model.parameters()).device
    base = get_task(tc.task, seed=0)
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
            sync(device)
            rewards = seen["rewards"][-1] if seen["rewards"] else [float("nan")]
            log.end_step(
                tokens=seen["tokens"],
                prompt_tokens=seen["prompt_tokens"],
                completions=seen["completions"],
                reward_mean=statistics.fmean(rewards),
            )
            seen["tokens"] = seen["prompt_tokens"] = seen["completions"] = 0

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
        try:
            t.train()
            memory = mem.stop()
        finally:
            clock.uninstall()
    out = _summarise_steps(log.steps, cfg.warmup)
    out.update(
        memory=memory,
        prompts=seen["prompts"],
        threads=torch.get_num_threads(),
        library=f"trl {trl.__version__}",
        trl_settings=dict(TRL_ARMS[arm]),
    )
    return out


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
    import torch

    from ..lab.models import load_policy, set_threads
    from ..lab.rollout import encode_prompts, sample_group

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


def _child(conn, name, cfg):
    try:
        conn.send(("ok", _part(name, cfg)))
    except BaseException:  # noqa: BLE001 - hand the whole traceback to the parent
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def _run_part(name: str, cfg: BenchConfig) -> dict:
    """One arm (or the rollout part) in a forked child (its own memory and timers), or here when that
    is not possible."""
    import multiprocessing as mp

    # CUDA cannot be used in a forked child of a process that has used it: there, each run starts afresh.
    method = "spawn" if _uses_cuda(cfg) else "fork"
    if not cfg.isolate or method not in mp.get_all_start_methods():
        return _part(name, cfg)
    ctx = mp.get_context(method)
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(child, name, cfg))
    p.start()
    child.close()
    try:
        status, payload = parent.recv()
    except EOFError:
        p.join()
        status, payload = "error", f"the {name} process died (exit code {p.exitcode})"
    p.join()
    if status != "ok":
        raise RuntimeError(f"bench arm {name!r} failed:\n{payload}")
    return payload


def _uses_cuda(cfg: BenchConfig) -> bool:
    import torch

    return str(cfg.train.device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")


def summarise_arm(runs: list[dict]) -> dict:
    """An arm over all its runs: the spread of every timed step, and seconds per token pooled."""
    steps = [s for r in runs for s in r["step_seconds"]]
    tokens = sum(r["tokens"] for r in runs)
    update_tokens = sum(r["update_tokens"] for r in runs)
    n_steps = len(steps)
    return {
        "library": runs[0]["library"],
        "runs": len(runs),
        "median_step_seconds": statistics.median(steps),
        "step_spread": spread(steps),
        "run_median_step_seconds": [r["median_step_seconds"] for r in runs],
        "breakdown_seconds": {
            c: statistics.fmean(r["breakdown_seconds"][c] for r in runs) for c in CATEGORIES + ("other",)
        },
        "tokens_per_step": tokens / n_steps,
        "update_tokens_per_step": update_tokens / n_steps,
        "mean_completion_length": tokens / sum(r["completions"] for r in runs),
        "seconds_per_token": _per_token(
            sum(steps),
            sum(r["breakdown_seconds"]["generation"] * len(r["step_seconds"]) for r in runs),
            sum(r["breakdown_seconds"]["forward_backward"] * len(r["step_seconds"]) for r in runs),
            tokens,
            update_tokens,
        ),
        "reward_mean": statistics.fmean(r["reward_mean"] for r in runs),
        "peak_memory_added_mb": max(r["memory"]["peak_added_mb"] for r in runs),
        "peak_memory_mb": max(r["memory"]["peak_mb"] for r in runs),
    }


def compare(lab_runs: list[dict], trl_runs: list[dict], level: float = 0.95) -> dict:
    """TRL over the lab, pair by pair (run i of each): the ratio of median step times and of step
    seconds per generated token, each with its median and bootstrap interval over the pairs."""
    step = [t["median_step_seconds"] / lab["median_step_seconds"] for lab, t in zip(lab_runs, trl_runs, strict=True)]
    token = [
        t["seconds_per_token"]["step"] / lab["seconds_per_token"]["step"]
        for lab, t in zip(lab_runs, trl_runs, strict=True)
    ]
    out = {
        "pairs": len(step),
        "step_ratios": step,
        "median_step_ratio": statistics.median(step),
        "token_ratios": token,
        "median_token_ratio": statistics.median(token),
    }
    if len(step) >= 2:
        out["step_interval"] = bootstrap_interval(step, level)
        out["token_interval"] = bootstrap_interval(token, level)
    return out


def comparisons_for(arms: tuple) -> list[tuple[str, str]]:
    """(lab arm, TRL arm) pairs reported: every lab arm against ``trl``, and ``lab`` against each
    other TRL arm."""
    out = [(a, "trl") for a in LAB_ARMS if a in arms and "trl" in arms]
    out += [("lab", t) for t in TRL_ARMS if t != "trl" and t in arms and "lab" in arms]
    return out


def run_bench(cfg: BenchConfig | None = None, progress: Callable[[str], object] | None = None) -> dict:
    """Measure every part in ``cfg.parts`` and return the comparison (the JSON the CLI writes)."""
    import torch
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
        {"lab_arm": a, "trl_arm": b, **compare(runs[a], runs[b], cfg.level)} for a, b in comparisons_for(arms)
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


FAIRNESS = [
    "same weights: both sides load the same model from disk",
    "same prompts per step, in the same order: the lab's prompt stream is TRL's dataset, unshuffled "
    "(checked on what each model was fed: same_prompts)",
    "same batch: prompts x G completions, one optimiser step per generation "
    "(steps_per_generation=1, num_iterations=1)",
    "same sampling: temperature T, top-k 0, top-p 1, the same max completion length; stop at EOS",
    "same loss: GRPO, clip 0.2, beta 0 (no reference model; the lab's track_kl off), "
    "loss_type='grpo' = seq_mean_token_mean",
    "same optimiser: torch AdamW, same lr, betas (0.9, 0.999), eps 1e-8, same weight decay, constant lr, grad clip",
    "TRL's gradient checkpointing off (GRPOConfig turns it on by default; the lab never recomputes activations)",
    "a step is the time between the ends of two consecutive steps of each library's own loop; "
    "warm-up steps excluded",
    "arms run in pairs in alternating order (lab ... trl, trl ... lab, ...); one ratio per pair, reported as median "
    "with a bootstrap interval",
    "time per token beside time per step: completion tokens sampled, and prompt + completion tokens in the update",
    "each run in its own process (forked; started afresh on CUDA): its own memory peak and timers",
]


def _fmt_interval(c: dict, kind: str) -> str:
    iv = c.get(f"{kind}_interval")
    if iv is None:
        return "(one pair: no interval)"
    return f"({100 * iv['level']:.0f}% interval {iv['low']:.2f}-{iv['high']:.2f})"


def format_table(r: dict) -> str:
    """The bench result as plain text: each arm's step, its spread and time per token, then the ratios."""
    c = r["config"]
    t = c["train"]
    lines = [
        f"bench: {t['prompts_per_step']} prompts x G={t['group_size']}, {t['max_new_tokens']} new tokens, "
        f"T={t['temperature']:g}, lr={t['lr']:g}, model {t['model']}; {c['pairs']} pairs of runs, each "
        f"{c['warmup']} warm-up + {c['steps']} timed steps; device {r['machine']['device']} "
        f"({r['machine']['device_name']}), {r['machine']['cpu_count']} CPUs, load {_load(r)}"
    ]
    if r.get("arms"):
        lines += [
            "",
            f"{'arm':26}{'step median (s)':>17}{'q1-q3 (s)':>16}{'ms/token':>10}{'gen ms/tok':>12}"
            f"{'upd ms/tok':>12}{'tokens/step':>13}{'peak +MB':>10}",
        ]
        for name, a in r["arms"].items():
            sp, pt = a["step_spread"], a["seconds_per_token"]
            lines.append(
                f"{name:26}{a['median_step_seconds']:>17.3f}{sp['q1']:>8.3f}-{sp['q3']:<7.3f}"
                f"{1e3 * pt['step']:>10.3f}{1e3 * pt['generation']:>12.3f}{1e3 * pt['forward_backward']:>12.4f}"
                f"{a['tokens_per_step']:>13.0f}{a['peak_memory_added_mb']:>10.0f}"
            )
        lines += ["", "where the step goes (mean seconds): " + ", ".join(CATEGORIES + ("other",))]
        for name, a in r["arms"].items():
            lines.append(
                f"  {name:24}" + " ".join(f"{a['breakdown_seconds'][k]:7.3f}" for k in CATEGORIES + ("other",))
            )
    if r.get("comparisons"):
        lines += ["", "TRL's time over the lab's (median over pairs):"]
        for cmp in r["comparisons"]:
            lines.append(
                f"  {cmp['trl_arm']} / {cmp['lab_arm']}: per step {cmp['median_step_ratio']:.2f}x "
                f"{_fmt_interval(cmp, 'step')}; per generated token {cmp['median_token_ratio']:.2f}x "
                f"{_fmt_interval(cmp, 'token')}"
            )
        if c["pairs"] < MIN_PAIRS_FOR_README:
            lines.append(f"  (only {c['pairs']} pairs: use at least {MIN_PAIRS_FOR_README} for a figure worth quoting)")
        lines.append(f"  same prompts on every run: {r['same_prompts']}")
    if "rollout" in r:
        ro = r["rollout"]
        a, b = ro["lab_sample_group"], ro["hf_generate"]
        lines += [
            "",
            f"rollout, {a['completions_per_call']} completions per call, {a['calls']} calls each (alternated):",
            f"  lab sample_group   {a['tokens_per_second']:9.0f} tokens/s  ({a['median_call_seconds']:.3f} s per call)",
            f"  model.generate     {b['tokens_per_second']:9.0f} tokens/s  ({b['median_call_seconds']:.3f} s per call)",
            f"  ratio {ro['speedup_tokens_per_second']:.2f}x; greedy outputs identical: {ro['greedy_outputs_match']}",
        ]
    return "\n".join(lines)


def _device_name(device: str | None) -> str:
    import torch

    if str(device or "cuda").startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device or "cuda"))
    return platform.processor() or platform.machine()


def _load(r) -> str:
    la = r["machine"].get("load_average_at_start")
    return f"{la[0]:.1f}" if la else "unknown"


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python -m grpo_lab bench")
