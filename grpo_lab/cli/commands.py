"""What each subcommand does, once its arguments are parsed: every check (arguments, output paths, model
and task) before any work. The torch-heavy layers are imported when a command runs."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from ..algorithms import get_algorithm, unused_fields
from ..lab.tasks import CHAT_TASKS, N_TEST
from ..train.config import TrainConfig
from .parser import BENCH_FIELDS, EVAL_FIELDS, PAIRED_FIELDS, RESUME_FLAGS, TRAIN_FIELDS, flag_of, settings_given

LR_USUAL = (1e-7, 1e-2)
"""Learning rates outside this range get a warning: above it one step can wreck a policy, below it nothing moves."""


def say(args: argparse.Namespace, kind: str, message: object) -> None:
    """One line on stderr, named after the command: ``python -m grpo_lab train: error: ...``."""
    text = " ".join(str(message).split("\n"))
    print(f"python -m grpo_lab {args.command}: {kind}: {text}", file=sys.stderr, flush=True)


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived while a command that stops at once was running (a BaseException, as
    KeyboardInterrupt is, so that no `except Exception` on the way takes it for an error)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _stop_at_once_on_signals() -> Iterator[None]:
    """SIGTERM (``kill``, a scheduler) and SIGHUP (a closed terminal) stop the command like Ctrl-C does,
    unwinding through its clean-up (a half-written folder is removed), instead of killing it silently."""

    def handler(signum, frame):
        raise Stopped(signum)

    kept = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in kept.items():
            signal.signal(s, h)


def _values(args: argparse.Namespace, names: tuple[str, ...]) -> dict:
    """The parsed values of the flags ``names``, for a function whose keywords carry the same names."""
    return {n: getattr(args, n) for n in names}


def _warn_lr(args, lr: float, flag: str = "--lr") -> None:
    low, high = LR_USUAL
    usual = "the usual range (1e-7 to 1e-2; default 1e-4)"
    if lr > high:
        say(args, "warning", f"{flag} {lr:g} is far above {usual}: one step can wreck the policy")
    elif lr < low:
        say(args, "warning", f"{flag} {lr:g} is far below {usual}: the policy will hardly move")


def _refuse_unused_fields(algo_name: str, overrides: dict, flag: str = "--set") -> None:
    """A ``--set`` field the algorithm does not read would change nothing: refuse it by name."""
    algo = get_algorithm(algo_name, **overrides)
    unused = unused_fields(algo, overrides)
    if unused:
        name, why = next(iter(unused.items()))
        raise ValueError(f"{flag} {name}={json.dumps(overrides[name])} has no effect with --algo {algo_name}: {why}")


def _pick_task(model: str, task: str | None, flag: str = "--task") -> str:
    """``task``, or the default for ``model``: sum3 for the lab's own model and every policy trained from it
    (the lab's character tokenizer), words otherwise. A chat task needs the tokenizer's chat template.
    Reads only the tokenizer (quick), so a bad choice is refused before any weights load."""
    from ..lab.models import is_lab_tokenizer, load_tokenizer  # transformers: seconds to import

    tokenizer = load_tokenizer(model)
    if task is None:
        task = "sum3" if is_lab_tokenizer(tokenizer) else "words"
        how = f"{flag} {task} (the default for a model that is not the lab's)"
    else:
        how = f"{flag} {task}"
    if task in CHAT_TASKS and tokenizer.chat_template is None:
        raise ValueError(
            f"{how} wraps its prompts in the model's chat template, and {model!r} has none; "
            f"give {flag} sum3, or an instruct model (one with a chat template)"
        )
    return task


def _check_data_dir_flag(given: dict) -> None:
    """--data-dir is read by --task gsm8k only; said in the flags' words, before the settings are checked."""
    if "data_dir" in given and given.get("task") != "gsm8k":
        got = f"--task {given['task']}" if "task" in given else "no --task"
        raise ValueError(f"--data-dir is read only by --task gsm8k, got {got}; add --task gsm8k")


def train_command(args: argparse.Namespace) -> int:
    from ..lab.models import pick_device  # torch-heavy layers below: imported when a command runs
    from ..train import run as run_mod  # (a module, so that tests may stand in for its functions)
    from ..train.trainer import StoppedEarly

    given = settings_given(args, TRAIN_FIELDS)
    if not args.resume:
        _check_data_dir_flag(given)
    if args.save_every is not None and not args.save:
        raise ValueError("--save-every needs --save DIR (where to save)")
    if args.resume:
        ignored = [flag_of(n) for n in given if n not in RESUME_FLAGS] + (["--set"] if args.overrides else [])
        if ignored:
            raise ValueError(
                f"{', '.join(ignored)} cannot be used with --resume: a resumed run continues with the settings it "
                "was saved with; only --steps, --device, --save, --save-every, --json, --n-eval, --eval-every and "
                "--quiet apply (start a new run to change them)"
            )
    if args.n_eval > N_TEST:
        raise ValueError(
            f"--n-eval {args.n_eval} is more than the {N_TEST} held-out prompts a run evaluates on; give at most "
            f"{N_TEST} (eval --n measures more)"
        )
    pick_device(given.get("device"), "--device")  # a device this torch cannot use: say so before loading anything
    outputs = dict(progress=not args.quiet, save_every=args.save_every, json_path=args.json)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoppedEarly)  # the summary line below says why the run stopped
        if args.resume:
            summary = run_mod.continue_run(
                args.resume, given.get("steps"), save_dir=args.save, device=given.get("device"), n_eval=args.n_eval,
                eval_every=args.eval_every, **outputs,
            )  # fmt: skip
        else:
            cfg = TrainConfig(**given, algo_overrides=dict(args.overrides))  # every setting checked before any work
            _refuse_unused_fields(cfg.algo, cfg.algo_overrides)
            _warn_lr(args, cfg.lr)
            cfg = replace(cfg, task=_pick_task(cfg.model, given.get("task")))
            summary = run_mod.train_and_evaluate(
                cfg, n_eval=args.n_eval, eval_every=args.eval_every, save_dir=args.save, **outputs
            )
    if summary["stop_reason"] != "interrupted":
        b, a = summary["before"], summary["after"]
        print(
            f"{summary['algo']}: greedy accuracy {b['accuracy']:.3f} -> {a['accuracy']:.3f} on {a['n']} held-out "
            "prompts, "
            f"mean length {b['mean_length']:.1f} -> {a['mean_length']:.1f}, "
            f"{summary['train_seconds']:.0f} s of training"
            + (f"; stopped: {summary['stop_reason']}" if summary["stop_reason"] else "")
        )
    if summary["stop_reason"] == "interrupted":
        kept = [f"checkpoint saved to {args.save}"] if args.save else []
        kept += [f"summary written to {args.json}"] if args.json else []
        say(
            args,
            "interrupted",
            f"{summary['algo']} stopped after step {summary['steps']}"
            + ("; " + ", ".join(kept) if kept else "; nothing was saved (no --save or --json)"),
        )
        return 130
    return 0


def eval_command(args: argparse.Namespace) -> int:
    from ..io import check_output_file, save_json
    from ..lab.metrics import evaluate  # torch-heavy layers below: imported when a command runs
    from ..lab.models import check_answer_room, load_policy, pick_device, set_threads
    from ..lab.tasks import get_task

    given = settings_given(args, EVAL_FIELDS)
    _check_data_dir_flag(given)
    data_dir = given.pop("data_dir", None)
    cfg = TrainConfig(**given | {"task": "sum3"})  # the same checks and defaults as a run's settings
    pick_device(cfg.device, "--device")
    if args.json:
        check_output_file(args.json, "--json")
    task = get_task(_pick_task(cfg.model, given.get("task")), n_test=args.n, data_dir=data_dir)
    if len(task.test) < args.n:
        raise ValueError(
            f"--n {args.n} is more than the {len(task.test)} held-out prompts of task {task.name}; "
            f"give at most {len(task.test)}"
        )
    set_threads()
    model, tokenizer = load_policy(cfg.model, cfg.device)
    check_answer_room(model, cfg.max_new_tokens)
    greedy = evaluate(model, tokenizer, task, n_prompts=args.n, greedy=True, max_new_tokens=cfg.max_new_tokens)
    sampled = evaluate(
        model,
        tokenizer,
        task,
        n_prompts=args.n,
        samples=args.samples,
        temperature=cfg.temperature,
        max_new_tokens=cfg.max_new_tokens,
        seed=cfg.seed,
    )
    k = args.samples
    out = {
        "model": cfg.model,
        "n": greedy["n_prompts"],
        "greedy_accuracy": greedy["accuracy"],
        "greedy_mean_length": greedy["length_mean"],
        f"sampled_accuracy_t{cfg.temperature:g}": sampled["accuracy"],
        f"pass@{k}": sampled.get(f"pass@{k}", sampled["accuracy"]),
        "pass_at_k": sampled.get("pass_at_k", {1: sampled["accuracy"]}),
        "examples": greedy["examples"],
    }
    print(
        f"{cfg.model}: greedy accuracy {out['greedy_accuracy']:.3f}, pass@{k} {out[f'pass@{k}']:.3f} "
        f"(T={cfg.temperature:g}) on {out['n']} held-out prompts"
    )
    if args.json:
        save_json(out, args.json)
    return 0


def compare_command(args: argparse.Namespace) -> int:
    from ..study.compare import DEFAULT_SECONDS, check_compare_arguments, compare  # torch-heavy: when it runs

    overrides = dict(args.overrides)
    for a in args.algos:  # each run would refuse a bad --set: say so once, before the first run
        unused = unused_fields(get_algorithm(a, **overrides), overrides)
        if unused:
            name, why = next(iter(unused.items()))
            raise ValueError(
                f"--set {name}={json.dumps(overrides[name])} has no effect on {a} ({why}); "
                f"compare without it, or without {a}"
            )
    check_compare_arguments(args.algos, args.seeds, args.out)
    seconds = args.seconds
    if seconds is None and args.steps is None and args.max_samples is None:
        seconds = DEFAULT_SECONDS  # no budget named: the same time for every algorithm
    extra = [x for k, v in args.overrides for x in ("--set", f"{k}={json.dumps(v)}")]
    result = compare(
        args.algos,
        args.seeds,
        seconds,
        args.steps or 100000,
        args.eval_every,
        args.n_eval,
        args.out,
        extra,
        progress=lambda line: print(line, flush=True),
        max_samples=args.max_samples,
        pass_k=args.pass_k,
    )
    print(result["table"])  # compare wrote it, with the runs, to --out/summary.json
    return 0


def paired_command(args: argparse.Namespace) -> int:
    from ..io import check_output_file, save_json
    from ..lab.models import pick_device  # torch-heavy layers below: imported when a command runs
    from ..study.paired import format_paired_summary, paired_updates

    field, values = args.vary
    arms = {f"{field}={json.dumps(v)}": {field: v} for v in values}
    given = settings_given(args, PAIRED_FIELDS)
    if args.json:
        check_output_file(args.json, "--json")
    cfg = TrainConfig(**given, algo_overrides=dict(args.overrides))
    _warn_lr(args, cfg.lr)
    pick_device(cfg.device, "--device")
    _refuse_unused_fields(cfg.algo, dict(args.overrides))
    for v in values:
        _refuse_unused_fields(cfg.algo, dict(args.overrides) | {field: v}, flag="--vary")
    result = paired_updates(cfg, arms, cfg.steps, low_p=args.low_p, progress=not args.quiet)
    if result["summary"]:
        print(format_paired_summary(result["summary"]))
    if args.json:
        save_json(result, args.json)
    if result["stop_reason"] == "interrupted":
        kept = f"; the steps are in {args.json}" if args.json else "; nothing was saved (no --json)"
        say(args, "interrupted", f"stopped after {result['steps']} of {cfg.steps} steps{kept}")
        return 130
    return 0


PRETRAIN_OPTIONS = ("seed", "max_steps", "target_accuracy", "eval_from", "eval_every", "n_eval", "size", "hidden",
                    "layers", "heads", "ffn", "batch_size", "lr", "device", "filler", "init",
                    "max_new_tokens")  # fmt: skip
"""The ``pretrain`` flags that pass as they are, under their own names, to ``lab.pretrain.pretrain``."""


def pretrain_command(args: argparse.Namespace) -> int:
    from ..io import check_output_folder
    from ..lab.models import TINY_MODEL_DIR  # torch-heavy layers below: imported when a command runs
    from ..lab.pretrain import GPU_MODEL_DIR, pretrain

    out = args.out or (GPU_MODEL_DIR if args.size == "gpu" else TINY_MODEL_DIR)
    check_output_folder(out, "--out", keep=False)  # pretrain makes it when it saves
    with _stop_at_once_on_signals():
        s = pretrain(out_dir=out, progress=not args.quiet, **_values(args, PRETRAIN_OPTIONS))
    reached = (
        f"reached the target {s['target_accuracy']:g} at step {s['steps']}"
        if s["reached_target"]
        else f"did NOT reach the target {s['target_accuracy']:g} in {s['steps']} steps (raise --max-steps)"
    )
    print(
        f"pretrained {s['parameters']:,} parameters in {s['seconds']:.0f} s ({s['steps']} steps), saved in {out}: "
        f"{reached}; held-out greedy accuracy {s['held_out_greedy_accuracy']:.3f}, "
        f"sampled (T=1) {s['held_out_sampled_accuracy_t1']:.3f}"
    )
    return 0


def bench_command(args: argparse.Namespace) -> int:
    from ..bench.config import PARTS, BenchConfig  # imports the trainer: seconds
    from ..bench.report import format_table
    from ..bench.runner import run_bench
    from ..io import check_output_file, save_json
    from ..lab.models import pick_device

    if args.json:
        check_output_file(args.json, "--json")
    train = TrainConfig(algo="grpo", track_kl=False, **settings_given(args, BENCH_FIELDS))
    _warn_lr(args, train.lr)
    pick_device(train.device, "--device")
    cfg = BenchConfig(
        train=train,
        parts=tuple(args.only or PARTS),
        isolate=not args.in_process,
        **_values(args, ("steps", "warmup", "pairs", "rollout_repeats")),
    )
    result = run_bench(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_table(result))
    if args.json:
        save_json(result, args.json)
    return 0


def export_command(args: argparse.Namespace) -> int:
    from ..scale.export import effective_algorithm, export_recipe  # the recipe templates: when a command runs

    algo = get_algorithm(args.algo, **dict(args.overrides))
    with _stop_at_once_on_signals():  # the recipe is written aside and swapped in: a stop leaves --out as it was
        files = export_recipe(algo, args.engine, args.model, args.task, args.out, getattr(args, "data_dir", None))
    print(f"{args.algo} for {args.engine}: wrote {len(files)} files in {args.out} (read README.md there first)")
    for f in files:
        print(f"  {f}")
    lines, warnings = effective_algorithm(algo, args.engine)
    print("what the recipe runs:")
    for line in lines:
        print(f"  {line}")
    for w in warnings:
        say(args, "warning", w)
    return 0


def doctor_command(args: argparse.Namespace) -> int:
    from .doctor import run  # imports every layer: only when asked

    return run()
