"""Speed, measured side by side: the lab's GRPO step against TRL's ``GRPOTrainer`` step.

    python -m grpo_lab bench --json runs/bench.json

One run measures, on the same tiny model, task, batch (prompts x G), completion length and
optimiser:

- **the step** (rollout, scoring, loss, update) of the lab's ``Trainer`` and of TRL's
  ``GRPOTrainer``, as the median of several timed steps after warm-up steps, with where the time
  goes: generation, scoring (the reward function), forward + backward of the update, the
  optimiser step, and everything else (overhead);
- **rollout tokens per second** of the lab's ``sample_group`` against a plain ``model.generate``
  loop on the same prompts, with greedy outputs compared token for token;
- **peak memory** each step adds over the loaded model (CPU: resident set; CUDA: allocated).

How it is kept fair (and written into the JSON under ``fairness``): both sides load the same weights
from disk; they see the same prompts in the same order (the lab's prompt stream is given to TRL as
its dataset, unshuffled, and the bench checks it: ``same_prompts``); the same G, completion length,
temperature (pure sampling: top-k 0, top-p 1), AdamW with the same lr, betas, eps, no weight decay,
constant schedule and gradient clip 1.0; GRPO's loss (``loss_type="grpo"`` in TRL is the lab's
``seq_mean_token_mean``), clip 0.2, beta 0 (no reference model), one optimiser step per generation.
The lab does not measure KL here (``track_kl=False``), since TRL with beta 0 loads no reference
model; and TRL's gradient checkpointing (on by default in ``GRPOConfig``) is turned off, since the
lab does not recompute activations. TRL's trainer is built by ``trl_bridge.make_trl_trainer`` (the
lab's GRPO preset as a ``GRPOConfig``) with the bench's settings on top, and ``check_trl_settings``
fails the run if any of the above does not hold. A step is the wall time between the ends of two
consecutive steps of each library's own training loop, so the loop's own overhead counts on both sides.

Each side runs in its own forked process (Linux), so neither sees the other's memory, imports
or monkey-patched timers, and each side's peak memory is its own. The timers are hooks: a
forward pre-hook on the policy (the first forward with gradients starts the update's
forward + backward), a wrapper on ``torch.autograd.backward`` (ends it), the global optimizer
step hooks, and wrappers on the generation and reward calls. They cost microseconds a step.
"""

from __future__ import annotations

import math
import os
import platform
import random
import statistics
import sys
import time
import traceback
import warnings
from collections import defaultdict
from dataclasses import asdict, dataclass

SIDES = ("lab", "trl", "rollout")


@dataclass
class BenchConfig:
    """What one bench run measures; the defaults are the course's CPU profile (16 x 8, 32 tokens)."""

    prompts: int = 16
    group_size: int = 8
    max_new_tokens: int = 32
    steps: int = 5
    """Timed steps per side (the median is reported)."""
    warmup: int = 2
    """Steps run first and not timed (lazy initialisation, optimiser state, allocator warm-up)."""
    rollout_repeats: int = 5
    """Timed calls of each generator in the rollout comparison (after one warm-up call each)."""
    temperature: float = 1.0
    lr: float = 1e-4
    seed: int = 0
    device: str | None = None
    sides: tuple = SIDES
    isolate: bool = True
    """Run each side in a forked child process (Linux). False: one after another in this process."""

    def __post_init__(self):
        for name in ("prompts", "group_size", "max_new_tokens", "steps", "rollout_repeats"):
            _check_int(name, getattr(self, name), 1)
        _check_int("warmup", self.warmup, 0)
        _check_int("seed", self.seed, 0)
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (a GRPO group needs a spread), got {self.group_size}")
        for name in ("temperature", "lr"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        self.sides = tuple(self.sides)
        if not self.sides or any(s not in SIDES for s in self.sides):
            raise ValueError(f"sides must be a non-empty subset of {SIDES}, got {self.sides!r}")
        if self.device not in (None, "cpu") and not str(self.device).startswith("cuda"):
            raise ValueError(f"device must be None, 'cpu' or 'cuda[:N]', got {self.device!r}")


def _check_int(name: str, v, minimum: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {v!r}")


# --- timers and memory ----------------------------------------------------------------------


class Clock:
    """Accumulates seconds per category: generation, reward, forward_backward, optimizer.

    ``install(model)`` adds the hooks; ``uninstall()`` removes them (in-process runs).
    """

    def __init__(self):
        self.totals: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self._fb_start: float | None = None
        self._opt_start: float | None = None
        self._undo: list = []

    def install(self, model) -> Clock:
        import torch

        def pre_forward(module, args, kwargs):
            if torch.is_grad_enabled() and self._fb_start is None:
                self._fb_start = time.perf_counter()

        self._undo.append(model.register_forward_pre_hook(pre_forward, with_kwargs=True).remove)
        orig_backward = torch.autograd.backward

        def timed_backward(*args, **kwargs):
            try:
                return orig_backward(*args, **kwargs)
            finally:
                if self._fb_start is not None:
                    self.add("forward_backward", time.perf_counter() - self._fb_start)
                    self._fb_start = None

        torch.autograd.backward = timed_backward
        self._undo.append(lambda: setattr(torch.autograd, "backward", orig_backward))
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        def opt_pre(opt, args, kwargs):
            self._opt_start = time.perf_counter()

        def opt_post(opt, args, kwargs):
            if self._opt_start is not None:
                self.add("optimizer", time.perf_counter() - self._opt_start)
                self._opt_start = None

        self._undo.append(register_optimizer_step_pre_hook(opt_pre).remove)
        self._undo.append(register_optimizer_step_post_hook(opt_post).remove)
        return self

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def add(self, what: str, seconds: float) -> None:
        self.totals[what] += seconds
        self.counts[what] += 1

    def wrap(self, what: str, fn, after=None):
        """``fn`` timed under ``what``; ``after(result, args, kwargs)`` sees each result (untimed)."""

        def timed(*args, **kwargs):
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            self.add(what, time.perf_counter() - t)
            if after is not None:
                after(out, args, kwargs)
            return out

        return timed

    def snapshot(self) -> dict[str, float]:
        return dict(self.totals)


class StepLog:
    """Per-step wall times (between consecutive step ends) and the clock's categories per step."""

    CATEGORIES = ("generation", "reward", "forward_backward", "optimizer")

    def __init__(self, clock: Clock):
        self.clock = clock
        self.steps: list[dict] = []
        self._t = None
        self._snap: dict = {}

    def start(self) -> None:
        self._t = time.perf_counter()
        self._snap = self.clock.snapshot()

    def end_step(self, **extra) -> None:
        now = time.perf_counter()
        snap = self.clock.snapshot()
        row = {"seconds": now - self._t}
        for c in self.CATEGORIES:
            row[c] = snap.get(c, 0.0) - self._snap.get(c, 0.0)
        row["other"] = row["seconds"] - sum(row[c] for c in self.CATEGORIES)
        row.update(extra)
        self.steps.append(row)
        self._t, self._snap = now, snap


def _summarise_steps(steps: list[dict], warmup: int) -> dict:
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
    for c in StepLog.CATEGORIES + ("other",):
        v = statistics.fmean(s[c] for s in timed)
        out["breakdown_seconds"][c] = v
        out["breakdown_fraction"][c] = v / mean_step if mean_step > 0 else float("nan")
    out["tokens"] = int(sum(s["tokens"] for s in timed))
    out["completions"] = int(sum(s["completions"] for s in timed))
    out["reward_mean"] = statistics.fmean(s["reward_mean"] for s in timed)
    out["mean_completion_length"] = out["tokens"] / out["completions"] if out["completions"] else float("nan")
    return out


def _rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Memory:
    """Peak memory a phase adds over its start. CPU: the resident set's high-water mark, reset
    through ``/proc/self/clear_refs`` (Linux); CUDA: ``torch.cuda.max_memory_allocated``."""

    def __init__(self, device):
        self.device = device

    def start(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device) / 2**20
            self.hwm_reset = True
            return
        self.base = _rss_mb()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the peak RSS to the current RSS
            self.hwm_reset = True
        except OSError:
            self.hwm_reset = False  # then the peak is the process's lifetime peak

    def stop(self) -> dict:
        import resource

        import torch

        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device) / 2**20
            kind = "cuda_allocated"
        else:
            peak = float("nan")
            try:
                with open("/proc/self/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak = int(line.split()[1]) / 1024
            except OSError:
                pass
            if math.isnan(peak):
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            kind = "cpu_rss"
        return {"kind": kind, "before_mb": round(self.base, 1), "peak_mb": round(peak, 1),
                "peak_added_mb": round(peak - self.base, 1), "peak_is_phase_only": self.hwm_reset}


# --- the lab's side -------------------------------------------------------------------------


def lab_prompt_stream(cfg: BenchConfig, n_steps: int):
    """The rows of the sum3 train split the lab's Trainer draws for ``n_steps`` steps, in order
    (``Trainer._next_prompts``: ``random.Random(seed)``, ``randrange`` per prompt)."""
    from .tasks import get_task

    task = get_task("sum3", seed=0)
    rng = random.Random(cfg.seed)
    idx = [rng.randrange(len(task.train)) for _ in range(n_steps * cfg.prompts)]
    return task.train.select(idx).select_columns(["prompt", "answer"])


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_lab(cfg: BenchConfig) -> dict:
    """The lab's Trainer, GRPO preset, timed step by step."""
    import torch

    from . import trainer as trainer_module
    from .trainer import TrainConfig, Trainer

    tc = TrainConfig(algo="grpo", steps=cfg.warmup + cfg.steps, seed=cfg.seed, prompts_per_step=cfg.prompts,
                     group_size=cfg.group_size, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                     lr=cfg.lr, track_kl=False, device=cfg.device)
    trainer = Trainer(tc)
    clock = Clock().install(trainer.model)
    log = StepLog(clock)
    seen = {"tokens": 0, "completions": 0, "prompts": []}

    def after_sample(ro, args, kwargs):
        seen["tokens"] += int(ro.completion_mask.sum())
        seen["completions"] += int(ro.completion_ids.shape[0])

    orig_sample, orig_score = trainer_module.sample_group, trainer_module.score_completions
    trainer_module.sample_group = clock.wrap("generation", orig_sample, after_sample)
    trainer_module.score_completions = clock.wrap("reward", orig_score)
    orig_next = trainer._next_prompts

    def next_prompts(n):
        rows = orig_next(n)
        seen["prompts"].append(list(rows["prompt"]))
        return rows

    trainer._next_prompts = next_prompts
    mem = Memory(trainer.device)

    def on_step(m):
        _sync(trainer.device)
        log.end_step(tokens=seen["tokens"], completions=seen["completions"], reward_mean=m["reward_mean"])
        seen["tokens"] = seen["completions"] = 0

    try:
        mem.start()
        log.start()
        trainer.train(cfg.warmup + cfg.steps, progress=False, callback=on_step)
        memory = mem.stop()
    finally:
        trainer_module.sample_group, trainer_module.score_completions = orig_sample, orig_score
        clock.uninstall()
    out = _summarise_steps(log.steps, cfg.warmup)
    out.update(memory=memory, prompts=seen["prompts"], threads=torch.get_num_threads(), library="grpo_lab",
               learning=[{k: h.get(k) for k in ("step", "reward_mean", "loss", "grad_norm", "length_mean")} for h in trainer.history])
    return out


# --- TRL's side -----------------------------------------------------------------------------


def _count_completion_tokens(completion_ids, eos_token_id: int):
    """Tokens per row up to and including the first EOS (all of them when there is none)."""
    import torch

    is_eos = completion_ids == eos_token_id
    T = completion_ids.shape[1]
    first = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1) + 1, torch.full_like(is_eos[:, 0], T, dtype=torch.long))
    return first


def run_trl(cfg: BenchConfig) -> dict:
    """TRL's GRPOTrainer on the same work (built by ``trl_bridge.make_trl_trainer``), timed step by
    step through a TrainerCallback."""
    import tempfile

    import torch
    import trl
    from transformers import TrainerCallback

    from .models import load_policy, set_threads
    from .tasks import Task, get_task
    from .trl_bridge import make_trl_trainer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames, said once per setting
    set_threads()
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_policy("tiny-sum3", cfg.device)
    device = next(model.parameters()).device
    sum3 = get_task("sum3", seed=0)
    # TRL reads prompts from its dataset in order (shuffle_dataset=False): give it the lab's stream.
    task = Task(sum3.name, lab_prompt_stream(cfg, cfg.warmup + cfg.steps), sum3.test, sum3.reward_fn, features=sum3.features)
    clock = Clock().install(model)
    log = StepLog(clock)
    seen = {"tokens": 0, "completions": 0, "prompts": [], "rewards": []}
    eos = tokenizer.eos_token_id

    def after_generate(out, args, kwargs):
        P = kwargs["input_ids"].shape[1]
        seen["tokens"] += int(_count_completion_tokens(out[:, P:], eos).sum())
        seen["completions"] += int(out.shape[0])

    def after_reward(rewards, args, kwargs):
        seen["prompts"].append(list(kwargs["prompts"])[:: cfg.group_size])
        seen["rewards"].append(list(rewards))

    model.generate = clock.wrap("generation", model.generate, after_generate)
    mem = Memory(device)

    class Steps(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            mem.start()
            log.start()

        def on_step_end(self, args, state, control, **kwargs):
            _sync(device)
            rewards = seen["rewards"][-1] if seen["rewards"] else [float("nan")]
            log.end_step(tokens=seen["tokens"], completions=seen["completions"], reward_mean=statistics.fmean(rewards))
            seen["tokens"] = seen["completions"] = 0

    with tempfile.TemporaryDirectory(prefix="grpo_lab_bench_trl_") as d:
        t = make_trl_trainer(
            model, tokenizer, task, algo="grpo", steps=cfg.warmup + cfg.steps, prompts_per_step=cfg.prompts,
            group_size=cfg.group_size, max_new_tokens=cfg.max_new_tokens, lr=cfg.lr, temperature=cfg.temperature,
            seed=cfg.seed, output_dir=d,
            # The bench's own settings on top of the bridge's: the lab's prompt stream in order, pure
            # sampling, the lab's optimiser (torch AdamW, not TRL's default fused AdamW), no logging work.
            shuffle_dataset=False, top_k=0, top_p=1.0, optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.999,
            adam_epsilon=1e-8, warmup_steps=0, disable_tqdm=True, logging_steps=10**9,
        )
        t.add_callback(Steps())
        t.reward_funcs[0] = clock.wrap("reward", t.reward_funcs[0], after_reward)
        check_trl_settings(t.args, cfg)
        try:
            t.train()
            memory = mem.stop()
        finally:
            clock.uninstall()
    out = _summarise_steps(log.steps, cfg.warmup)
    out.update(memory=memory, prompts=seen["prompts"], threads=torch.get_num_threads(), library=f"trl {trl.__version__}")
    return out


def check_trl_settings(args, cfg: BenchConfig) -> None:
    """Fail loudly if TRL would not do the lab's work (a changed bridge or TRL default)."""
    want = {
        "loss_type": "grpo", "beta": 0.0, "num_generations": cfg.group_size,
        "per_device_train_batch_size": cfg.prompts * cfg.group_size, "gradient_accumulation_steps": 1,
        "steps_per_generation": 1, "num_iterations": 1, "max_completion_length": cfg.max_new_tokens,
        "temperature": cfg.temperature, "top_k": 0, "top_p": 1.0, "learning_rate": cfg.lr, "weight_decay": 0.0,
        "max_grad_norm": 1.0, "epsilon": 0.2, "gradient_checkpointing": False, "shuffle_dataset": False,
        "report_to": [], "use_vllm": False,
    }
    got = {k: getattr(args, k) for k in want}
    got["report_to"] = [r for r in (args.report_to or []) if r != "none"]
    got["optim"], want["optim"] = str(getattr(args.optim, "value", args.optim)), "adamw_torch"
    got["lr_scheduler_type"], want["lr_scheduler_type"] = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)), "constant"
    bad = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    if bad:
        raise RuntimeError(f"TRL's GRPOConfig does not match the lab's step (got, wanted): {bad}")


# --- rollout: the lab's sampler against model.generate ---------------------------------------


def run_rollout(cfg: BenchConfig) -> dict:
    """Tokens per second of ``sample_group`` and of a plain ``model.generate`` loop, same prompts."""
    import torch

    from .models import load_policy, set_threads
    from .rollout import encode_prompts, sample_group

    set_threads()
    model, tokenizer = load_policy("tiny-sum3", cfg.device)
    device = next(model.parameters()).device
    prompts = list(lab_prompt_stream(cfg, 1)["prompt"])
    ids, mask = encode_prompts(tokenizer, prompts, device=device)
    G, T, eos = cfg.group_size, cfg.max_new_tokens, tokenizer.eos_token_id
    rep_ids, rep_mask = ids.repeat_interleave(G, dim=0), mask.repeat_interleave(G, dim=0)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    def lab(greedy=False):
        ro = sample_group(model, tokenizer, ids, mask, G, T, cfg.temperature, gen, greedy=greedy)
        return ro.completion_ids, ro.completion_mask.sum(dim=1)

    def hf(greedy=False):
        kw = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=cfg.temperature, top_k=0, top_p=1.0)
        with torch.no_grad():
            out = model.generate(input_ids=rep_ids, attention_mask=rep_mask, max_new_tokens=T, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=eos, **kw)
        c = out[:, rep_ids.shape[1]:]
        return c, _count_completion_tokens(c, eos)

    result = {}
    for name, fn in (("lab_sample_group", lab), ("hf_generate", hf)):
        fn()  # warm-up
        secs, toks = [], []
        for _ in range(cfg.rollout_repeats):
            _sync(device)
            t = time.perf_counter()
            _, lengths = fn()
            _sync(device)
            secs.append(time.perf_counter() - t)
            toks.append(int(lengths.sum()))
        result[name] = {
            "calls": cfg.rollout_repeats, "completions_per_call": len(prompts) * G,
            "tokens": sum(toks), "seconds": sum(secs), "median_call_seconds": statistics.median(secs),
            "tokens_per_second": sum(toks) / sum(secs),
        }
    # Same work? Greedy decoding must give the same tokens through both paths.
    c_lab, n_lab = lab(greedy=True)
    c_hf, n_hf = hf(greedy=True)
    same = bool(torch.equal(n_lab, n_hf)) and all(
        torch.equal(c_lab[i, : int(n_lab[i])], c_hf[i, : int(n_hf[i])]) for i in range(c_lab.shape[0])
    )
    result["greedy_outputs_match"] = same
    result["speedup_tokens_per_second"] = result["lab_sample_group"]["tokens_per_second"] / result["hf_generate"]["tokens_per_second"]
    result["threads"] = torch.get_num_threads()
    return result


# --- running the sides ----------------------------------------------------------------------


def _side(name: str, cfg: BenchConfig) -> dict:
    if name == "lab":
        return run_lab(cfg)
    if name == "trl":
        return run_trl(cfg)
    return run_rollout(cfg)


def _child(conn, name, cfg):
    try:
        conn.send(("ok", _side(name, cfg)))
    except BaseException:  # noqa: BLE001 - hand the whole traceback to the parent
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def _run_side(name: str, cfg: BenchConfig) -> dict:
    """One side in a forked child (its own memory and timers), or here when that is not possible."""
    import multiprocessing as mp

    if not cfg.isolate or "fork" not in mp.get_all_start_methods():
        return _side(name, cfg)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(child, name, cfg))
    p.start()
    child.close()
    try:
        status, payload = parent.recv()
    except EOFError:
        status, payload = "error", f"the {name} process died (exit code {p.join() or p.exitcode})"
    p.join()
    if status != "ok":
        raise RuntimeError(f"bench side {name!r} failed:\n{payload}")
    return payload


def run_bench(cfg: BenchConfig | None = None, progress=None) -> dict:
    """Measure every side in ``cfg.sides`` and return the comparison (the JSON the CLI writes)."""
    import torch
    import transformers

    cfg = cfg or BenchConfig()
    say = progress or (lambda line: None)
    result: dict = {
        "config": asdict(cfg),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__},
        "machine": {"cpu_count": os.cpu_count(), "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                    "device": cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"),
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS")},
        "fairness": FAIRNESS,
    }
    for name in SIDES:
        if name in cfg.sides:
            say(f"bench: {name} ...")
            t = time.perf_counter()
            result[name] = _run_side(name, cfg)
            say(f"bench: {name} done in {time.perf_counter() - t:.1f} s")
    if "trl" in result:
        try:
            import trl

            result["versions"]["trl"] = trl.__version__
        except ImportError:  # pragma: no cover - the TRL side would have failed first
            pass
    if "lab" in result and "trl" in result:
        lab, trl_ = result["lab"], result["trl"]
        result["speedup"] = trl_["median_step_seconds"] / lab["median_step_seconds"]
        result["same_prompts"] = lab["prompts"] == trl_["prompts"]
    if hasattr(os, "getloadavg"):
        result["machine"]["load_average_at_end"] = list(os.getloadavg())
    return result


FAIRNESS = [
    "same weights: both sides load assets/tiny-sum3 from disk",
    "same prompts per step, in the same order: the lab's prompt stream is TRL's dataset, unshuffled (checked: same_prompts)",
    "same batch: prompts x G completions, one optimiser step per generation (steps_per_generation=1, num_iterations=1)",
    "same sampling: temperature T, top-k 0, top-p 1, the same max completion length; stop at EOS",
    "same loss: GRPO, clip 0.2, beta 0 (no reference model; the lab's track_kl off), loss_type='grpo' = seq_mean_token_mean",
    "same optimiser: torch AdamW, same lr, betas (0.9, 0.999), eps 1e-8, weight decay 0, constant lr, grad clip 1.0",
    "TRL's gradient checkpointing off (GRPOConfig turns it on by default; the lab never recomputes activations)",
    "a step is the time between the ends of two consecutive steps of each library's own loop; warm-up steps excluded; median of the timed steps",
    "each side in its own forked process: its own memory peak, timers and imports",
]


def format_table(r: dict) -> str:
    """The bench result as a plain-text table."""
    c = r["config"]
    lines = [f"bench: {c['prompts']} prompts x G={c['group_size']}, {c['max_new_tokens']} new tokens, "
             f"T={c['temperature']:g}, lr={c['lr']:g}; {c['warmup']} warm-up + {c['steps']} timed steps; "
             f"device {r['machine']['device']}, {r['machine']['cpu_count']} CPUs, load {_load(r)}"]
    sides = [s for s in ("lab", "trl") if s in r]
    if sides:
        head = f"{'':28}" + "".join(f"{r[s]['library']:>16}" for s in sides)
        lines += ["", head]

        def row(label, f):
            lines.append(f"{label:28}" + "".join(f"{f(r[s]):>16}" for s in sides))

        row("step, median (s)", lambda x: f"{x['median_step_seconds']:.3f}")
        for cat in StepLog.CATEGORIES + ("other",):
            row(f"  {cat} (s, share)", lambda x, cat=cat: f"{x['breakdown_seconds'][cat]:.3f} {100 * x['breakdown_fraction'][cat]:3.0f}%")
        row("tokens per step", lambda x: f"{x['tokens'] / max(1, len(x['step_seconds'])):.0f}")
        row("mean completion length", lambda x: f"{x['mean_completion_length']:.1f}")
        row("reward mean", lambda x: f"{x['reward_mean']:.3f}")
        row("peak memory added (MB)", lambda x: f"{x['memory']['peak_added_mb']:.0f}")
        row("peak memory (MB)", lambda x: f"{x['memory']['peak_mb']:.0f}")
    if "speedup" in r:
        lines += ["", f"speed-up of the lab over TRL (median step time, TRL / lab): {r['speedup']:.2f}x; "
                      f"same prompts: {r['same_prompts']}"]
    if "rollout" in r:
        ro = r["rollout"]
        a, b = ro["lab_sample_group"], ro["hf_generate"]
        lines += ["", f"rollout, {a['completions_per_call']} completions per call, {a['calls']} calls each:",
                  f"  lab sample_group   {a['tokens_per_second']:9.0f} tokens/s  ({a['median_call_seconds']:.3f} s per call)",
                  f"  model.generate     {b['tokens_per_second']:9.0f} tokens/s  ({b['median_call_seconds']:.3f} s per call)",
                  f"  ratio {ro['speedup_tokens_per_second']:.2f}x; greedy outputs identical: {ro['greedy_outputs_match']}"]
    return "\n".join(lines)


def _load(r) -> str:
    la = r["machine"].get("load_average_at_start")
    return f"{la[0]:.1f}" if la else "unknown"


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python -m grpo_lab bench")
