"""The command line: the same experiments as the notebooks, outside Jupyter.

    python -m grpo_lab train --algo grpo --steps 100 --seed 0 --json runs/grpo.json
    python -m grpo_lab eval --model assets/tiny-sum3 --samples 8
    python -m grpo_lab pretrain
    python -m grpo_lab bench --json runs/bench.json
    python -m grpo_lab paired --vary clip_high=0.2,0.28 --steps 60 --set minibatches=8 --set epochs=2
    python -m grpo_lab export --algo dapo --engine verl --model Qwen/Qwen2.5-1.5B-Instruct --out recipes/dapo

Bad arguments print one line and exit with status 2; nothing prints a traceback at a learner.
Output paths are checked before the first step. Ctrl-C (or SIGTERM) stops ``train`` after the
current step, saves what was asked for, and exits with status 130.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
from typing import NoReturn

from ..algorithms import PRESETS
from . import _interrupted_while_starting

# argparse reads "-1e-4" as an unknown flag ("expected one argument"); these are numbers, so that
# "--lr -1e-4" gets the same line as any other bad number.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan|infinity)$", re.IGNORECASE)
MAX_SEED = 2**32 - 1
LR_USUAL = (1e-7, 1e-2)
"""Learning rates outside this range get a warning: above it one step can wreck a policy, below it nothing moves."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:  # one clear line, non-zero exit
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int_at_least(minimum: int, what: str):
    """An argparse type: an integer >= minimum, with one clear line when it is not."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {what} integer, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be a {what} integer, got {v}")
        return v

    return parse


_positive_int = _int_at_least(1, "positive")
_non_negative_int = _int_at_least(0, "non-negative")


def _seed(text: str) -> int:
    v = _non_negative_int(text)
    if v > MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, {MAX_SEED}] (32 bits), got {v}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return v


def _override(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"must look like FIELD=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return key, parsed


def _vary(text: str) -> tuple[str, list]:
    """FIELD=V1,V2,...: each value read as JSON (so 0.28 is a number and null is None)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"must look like FIELD=V1,V2, got {text!r}")
    key, values = text.split("=", 1)
    parsed = []
    for v in values.split(","):
        try:
            parsed.append(json.loads(v))
        except json.JSONDecodeError:
            parsed.append(v)
    if len(parsed) < 2:
        raise argparse.ArgumentTypeError(f"needs at least two values after {key}=, got {values!r}")
    return key, parsed


def _add_set_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--set FIELD=VALUE``, repeatable, collected in ``args.overrides`` (train, compare and paired share it)."""
    parser.add_argument(
        "--set", dest="overrides", type=_override, action="append", default=[], metavar="FIELD=VALUE", help=help
    )


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m grpo_lab", description="grpo_lab: RL post-training, seen step by step.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser("train", help="train a policy with one algorithm and write a JSON summary")
    t.add_argument("--algo", choices=sorted(PRESETS), default="grpo")
    t.add_argument("--steps", type=_positive_int, default=100)
    t.add_argument("--seed", type=_seed, default=0)
    t.add_argument("--json", metavar="FILE", help="write the summary (before/after, history) here")
    t.add_argument("--model", default="tiny-sum3", help="'tiny-sum3' (shipped), a folder, or a Hugging Face name")
    t.add_argument(
        "--task",
        choices=["sum3", "words", "gsm8k"],
        default=None,
        help="default: sum3 for the tiny model, words otherwise",
    )
    t.add_argument("--prompts", type=_positive_int, default=16, help="prompts per step")
    t.add_argument(
        "--group-size", type=_positive_int, default=8, help="G: completions per prompt (GFPO: kept per prompt)"
    )
    t.add_argument("--max-new-tokens", type=_positive_int, default=32)
    t.add_argument("--temperature", type=_positive_float, default=1.0)
    t.add_argument("--lr", type=_positive_float, default=1e-4)
    t.add_argument("--kl-stop", type=_positive_float, default=None, help="stop (and save) when KL exceeds this")
    t.add_argument("--seconds", type=_positive_float, default=None, help="stop after this much training time")
    t.add_argument(
        "--max-samples",
        type=_positive_int,
        default=None,
        help="stop once this many completions have been sampled (a sample budget)",
    )
    t.add_argument("--n-eval", type=_positive_int, default=1000, help="held-out prompts for before/after accuracy")
    t.add_argument("--eval-every", type=_positive_int, default=None, help="also evaluate every N steps")
    t.add_argument("--save", metavar="DIR", help="save the trained run (policy + trainer state) here")
    t.add_argument(
        "--save-every",
        type=_positive_int,
        default=None,
        metavar="N",
        help="also save to --save every N steps, so a crash loses at most N steps",
    )
    t.add_argument("--resume", metavar="DIR", help="continue a run saved with --save for --steps more steps")
    t.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    _add_set_option(t, "change one Algorithm field, e.g. --set minibatches=4 --set clip_high=0.28")
    t.add_argument("--quiet", action="store_true", help="no progress bars")

    e = sub.add_parser("eval", help="measure a checkpoint: greedy accuracy and pass@k")
    e.add_argument("--model", default="tiny-sum3")
    e.add_argument("--task", choices=["sum3", "words", "gsm8k"], default=None)
    e.add_argument("--n", type=_positive_int, default=1000, help="held-out prompts")
    e.add_argument("--samples", type=_positive_int, default=8, help="k of pass@k (sampled at --temperature)")
    e.add_argument("--temperature", type=_positive_float, default=1.0)
    e.add_argument("--max-new-tokens", type=_positive_int, default=32)
    e.add_argument("--seed", type=_seed, default=0)
    e.add_argument("--device", default=None)
    e.add_argument("--json", metavar="FILE")

    c = sub.add_parser("compare", help="several algorithms x seeds on one task and budget: a table with spread")
    c.add_argument(
        "--algos", nargs="+", choices=sorted(PRESETS), default=["grpo", "dr_grpo", "gspo", "dapo", "ppo", "gfpo"]
    )
    c.add_argument("--seeds", nargs="+", type=_seed, default=[0, 1, 2])
    c.add_argument(
        "--seconds",
        type=_positive_float,
        default=None,
        help="training seconds per run, the same for every algorithm (default 90, unless --steps or --max-samples "
        "sets the budget)",
    )
    c.add_argument(
        "--steps", type=_positive_int, default=None, help="a step budget per run (no time limit unless --seconds)"
    )
    c.add_argument(
        "--max-samples",
        type=_positive_int,
        default=None,
        help="a sample budget instead of time budgets: every run stops once it has sampled this many completions",
    )
    c.add_argument(
        "--pass-k",
        type=_positive_int,
        default=None,
        help="also measure pass@1..K of each trained policy (K samples per held-out prompt)",
    )
    c.add_argument("--eval-every", type=_positive_int, default=20)
    c.add_argument("--n-eval", type=_positive_int, default=1000)
    c.add_argument("--out", default="runs/compare", help="folder for each run's JSON and the summary")
    _add_set_option(c, "change one Algorithm field in every run")

    pr = sub.add_parser(
        "paired", help="one batch, several update rules: each arm's update from the same weights, every step"
    )
    pr.add_argument("--algo", choices=sorted(PRESETS), default="grpo")
    pr.add_argument(
        "--vary",
        type=_vary,
        required=True,
        metavar="FIELD=V1,V2,...",
        help="the update field the arms differ in and its values, the first one followed, e.g. clip_high=0.2,0.28",
    )
    pr.add_argument("--steps", type=_positive_int, default=60)
    pr.add_argument("--seed", type=_seed, default=0)
    pr.add_argument("--prompts", type=_positive_int, default=16, help="prompts per step")
    pr.add_argument("--group-size", type=_positive_int, default=8)
    pr.add_argument("--max-new-tokens", type=_positive_int, default=32)
    pr.add_argument("--lr", type=_positive_float, default=1e-4)
    pr.add_argument(
        "--low-p",
        type=_positive_float,
        default=0.2,
        help="a positive-advantage token counts as low-probability below this probability",
    )
    _add_set_option(pr, "change one Algorithm field in every arm, e.g. --set minibatches=8 --set epochs=2")
    pr.add_argument("--device", default=None)
    pr.add_argument("--json", metavar="FILE")
    pr.add_argument("--quiet", action="store_true")

    pt = sub.add_parser("pretrain", help="build the tiny policy in assets/ from scratch (supervised)")
    pt.add_argument("--out", default=None, help="folder (default: assets/tiny-sum3)")
    pt.add_argument("--seed", type=_seed, default=0)
    pt.add_argument("--max-steps", type=_positive_int, default=1500)
    pt.add_argument("--target-accuracy", type=_positive_float, default=0.35)
    pt.add_argument("--eval-from", type=_positive_int, default=150)
    pt.add_argument("--eval-every", type=_positive_int, default=25)
    pt.add_argument("--n-eval", type=_positive_int, default=256, help="held-out prompts for the stopping accuracy")
    pt.add_argument(
        "--size",
        choices=["cpu", "gpu"],
        default="cpu",
        help="cpu: the shipped ~1M-parameter policy; gpu: the gpu profile's ~34M-parameter one "
        "(on a GPU; its default --out is assets/gpu-sum3)",
    )
    for name in ("hidden", "layers", "heads", "ffn", "batch-size"):
        pt.add_argument(f"--{name}", type=_positive_int, default=None, help=f"override the size's {name}")
    pt.add_argument("--lr", type=_positive_float, default=None, help="override the size's learning rate")
    pt.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    pt.add_argument("--quiet", action="store_true")

    bn = sub.add_parser(
        "bench", help="speed side by side: the lab's GRPO step against TRL's GRPOTrainer, rollout tokens/s, memory"
    )
    bn.add_argument("--prompts", type=_positive_int, default=16, help="prompts per step")
    bn.add_argument("--group-size", type=_positive_int, default=8, help="G: completions per prompt (at least 2)")
    bn.add_argument("--max-new-tokens", type=_positive_int, default=32)
    bn.add_argument("--steps", type=_positive_int, default=5, help="timed steps per run of each arm")
    bn.add_argument("--warmup", type=_non_negative_int, default=2, help="untimed steps first, in every run")
    bn.add_argument(
        "--pairs",
        type=_positive_int,
        default=5,
        help="runs of every arm, in alternating order (lab..trl, trl..lab, ...); one ratio per pair",
    )
    bn.add_argument("--rollout-repeats", type=_positive_int, default=5, help="timed calls of each generator")
    bn.add_argument("--temperature", type=_positive_float, default=1.0)
    bn.add_argument("--lr", type=_positive_float, default=1e-4)
    bn.add_argument("--seed", type=_seed, default=0)
    bn.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    bn.add_argument("--model", default="tiny-sum3", help="'tiny-sum3' (shipped) or a folder written by pretrain")
    bn.add_argument(
        "--only",
        nargs="+",
        default=None,
        choices=[
            "lab",
            "lab_no_prompt_sharing",
            "lab_no_compaction",
            "lab_no_length_grouping",
            "trl",
            "trl_continuous_batching",
            "rollout",
        ],
        help="measure only these arms (and 'rollout', the generator comparison); default: all",
    )
    bn.add_argument("--in-process", action="store_true", help="run the parts here, not each in its own forked process")
    bn.add_argument("--json", metavar="FILE", help="write the measurements here")

    ex = sub.add_parser(
        "export", help="write a preset as a launchable TRL or verl recipe (script, configs, launch commands)"
    )
    ex.add_argument("--algo", choices=sorted(PRESETS), default="grpo")
    ex.add_argument("--engine", choices=["trl", "verl"], required=True)
    ex.add_argument("--model", default="Qwen/Qwen2.5-1.5B-Instruct", help="a Hugging Face name or a folder")
    ex.add_argument("--task", choices=["gsm8k", "words", "sum3"], default="gsm8k")
    ex.add_argument("--out", required=True, metavar="DIR", help="folder for the recipe")
    sub.add_parser(
        "doctor", help="is this machine ready? Python, torch, the model, one training step, widgets, plots, memory"
    )
    return p


def _default_task(model: str, task: str | None) -> str:
    if task:
        return task
    return "sum3" if model == "tiny-sum3" else "words"


def main(argv: list[str] | None = None) -> int:
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, main() handles Ctrl-C
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if getattr(args, "quiet", False):
        _quiet()
    from ..study.experiments import ChildRunFailed

    try:
        if args.command == "train":
            return _train(args, argv)
        if args.command == "eval":
            return _eval(args)
        if args.command == "compare":
            return _compare(args)
        if args.command == "bench":
            return _bench(args)
        if args.command == "paired":
            return _paired(args)
        if args.command == "export":
            return _export(args)
        if args.command == "doctor":
            return _doctor(args)
        return _pretrain(args)
    except ValueError as err:  # the lab's own input checks: one line, not a traceback
        _say(args, "error", err)
        return 2
    except ChildRunFailed as err:  # a run of `compare` failed: its own line, and its exit status where it says why
        _say(args, "error", err)
        return err.returncode if err.returncode in (2, 130) else 1
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside a training loop: stop at once
        _say(args, "interrupted", "stopped at once; a checkpoint already on disk is whole, nothing else was written")
        return 130
    except OSError as err:  # the disk filled up or went away while writing
        _say(args, "error", err)
        return 1


def _say(args, kind: str, message) -> None:
    text = " ".join(str(message).split("\n"))
    print(f"python -m grpo_lab {args.command}: {kind}: {text}", file=sys.stderr, flush=True)


def _quiet() -> None:
    """--quiet: no progress bars from the libraries either (model shards, dataset maps)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        import datasets

        datasets.disable_progress_bars()
    except ImportError:
        pass


def _typed(argv: list[str], command: str) -> set[str]:
    """The options of ``command`` the user typed (argparse alone cannot tell a typed value from its default)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    for action in sub._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv))) - {"command"}


def _long_option(command: str, dest: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return next(a.option_strings[-1] for a in sub._actions if a.dest == dest)


def _warn_lr(args, lr: float, flag: str = "--lr") -> None:
    low, high = LR_USUAL
    usual = "the usual range (1e-7 to 1e-2; default 1e-4)"
    if lr > high:
        _say(args, "warning", f"{flag} {lr:g} is far above {usual}: one step can wreck the policy")
    elif lr < low:
        _say(args, "warning", f"{flag} {lr:g} is far below {usual}: the policy will hardly move")


def _refuse_unused_fields(algo_name: str, overrides: dict, flag: str = "--set") -> None:
    """A ``--set`` field the algorithm does not read would change nothing: refuse it by name."""
    from ..algorithms import get_algorithm
    from ..train.trainer import unused_fields

    algo = get_algorithm(algo_name, **overrides)
    unused = unused_fields(algo, overrides)
    if unused:
        name, why = next(iter(unused.items()))
        raise ValueError(f"{flag} {name}={json.dumps(overrides[name])} has no effect with --algo {algo_name}: {why}")


RESUME_OPTIONS = {"steps", "save", "save_every", "json", "quiet", "resume", "device"}
"""What ``train --resume`` reads; every other option is the saved run's own and cannot change."""


def _train(args, argv: list[str]) -> int:
    from ..io import check_output_file
    from ..lab.models import pick_device
    from ..train.checkpoint import check_checkpoint_target
    from ..train.run import continue_run, train_and_evaluate
    from ..train.trainer import TrainConfig

    if args.save_every is not None and not args.save:
        raise ValueError("--save-every needs --save DIR (where to save)")
    pick_device(args.device)  # a device this torch cannot use: say so before loading anything
    if args.json:
        check_output_file(args.json, "--json")
    if args.save:
        check_checkpoint_target(args.save, "--save")
    if args.resume:
        ignored = sorted(_typed(argv, "train") - RESUME_OPTIONS)
        if ignored:
            names = ", ".join(_long_option("train", d) for d in ignored)
            raise ValueError(
                f"{names} cannot be used with --resume: a resumed run continues with the settings it was "
                "saved with; only --steps, --save, --save-every, --json, --device and --quiet apply "
                "(start a new run to change them)"
            )
        device = args.device if "device" in _typed(argv, "train") else None
        summary = continue_run(args.resume, args.steps, not args.quiet, args.save, args.save_every, args.json, device)
    else:
        _warn_lr(args, args.lr)
        cfg = TrainConfig(
            algo=args.algo,
            model=args.model,
            task=_default_task(args.model, args.task),
            steps=args.steps,
            seed=args.seed,
            prompts_per_step=args.prompts,
            group_size=args.group_size,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            lr=args.lr,
            kl_stop=args.kl_stop,
            max_seconds=args.seconds,
            device=args.device,
            max_samples=args.max_samples,
            algo_overrides=dict(args.overrides),
        )
        _refuse_unused_fields(cfg.algo, cfg.algo_overrides)
        summary = train_and_evaluate(
            cfg,
            n_eval=args.n_eval,
            progress=not args.quiet,
            eval_every=args.eval_every,
            save_dir=args.save,
            save_every=args.save_every,
            json_path=args.json,
        )
        if summary["stop_reason"] != "interrupted":
            b, a = summary["before"], summary["after"]
            print(
                f"{cfg.algo}: greedy accuracy {b['accuracy']:.3f} -> {a['accuracy']:.3f} on {a['n']} held-out prompts, "
                f"mean length {b['mean_length']:.1f} -> {a['mean_length']:.1f}, "
                f"{summary['train_seconds']:.0f} s of training"
                + (f"; stopped: {summary['stop_reason']}" if summary["stop_reason"] else "")
            )
    if summary["stop_reason"] == "interrupted":
        kept = [f"checkpoint saved to {args.save}"] if args.save else []
        kept += [f"summary written to {args.json}"] if args.json else []
        _say(
            args,
            "interrupted",
            f"{summary['algo']} stopped after step {summary['steps']}"
            + ("; " + ", ".join(kept) if kept else "; nothing was saved (no --save or --json)"),
        )
        return 130
    return 0


def _eval(args) -> int:
    from ..io import check_output_file, save_json
    from ..lab.metrics import evaluate
    from ..lab.models import load_policy, set_threads
    from ..lab.tasks import get_task

    if args.json:
        check_output_file(args.json, "--json")
    set_threads()
    model, tokenizer = load_policy(args.model, args.device)
    task = get_task(_default_task(args.model, args.task), n_test=args.n)
    greedy = evaluate(model, tokenizer, task, n_prompts=args.n, greedy=True, max_new_tokens=args.max_new_tokens)
    sampled = evaluate(
        model,
        tokenizer,
        task,
        n_prompts=args.n,
        samples=args.samples,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )
    k = args.samples
    out = {
        "model": args.model,
        "n": greedy["n_prompts"],
        "greedy_accuracy": greedy["accuracy"],
        "greedy_mean_length": greedy["length_mean"],
        f"sampled_accuracy_t{args.temperature:g}": sampled["accuracy"],
        f"pass@{k}": sampled.get(f"pass@{k}", sampled["accuracy"]),
        "pass_at_k": sampled.get("pass_at_k", {1: sampled["accuracy"]}),
        "examples": greedy["examples"],
    }
    print(
        f"{args.model}: greedy accuracy {out['greedy_accuracy']:.3f}, pass@{k} {out[f'pass@{k}']:.3f} "
        f"(T={args.temperature:g}) on {out['n']} held-out prompts"
    )
    if args.json:
        save_json(out, args.json)
    return 0


def _compare(args) -> int:
    from ..algorithms import get_algorithm
    from ..io import check_output_folder, save_json
    from ..study.experiments import DEFAULT_SECONDS, compare
    from ..train.trainer import unused_fields

    overrides = dict(args.overrides)
    for a in args.algos:  # each run would refuse a bad --set: say so once, before the first run
        unused = unused_fields(get_algorithm(a, **overrides), overrides)
        if unused:
            name, why = next(iter(unused.items()))
            raise ValueError(
                f"--set {name}={json.dumps(overrides[name])} has no effect on {a} ({why}); "
                f"compare without it, or without {a}"
            )
    check_output_folder(args.out, "--out")
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
    save_json(result, f"{args.out}/summary.json")
    print(result["table"])
    return 0


def _paired(args) -> int:
    from ..io import check_output_file, save_json
    from ..lab.models import pick_device
    from ..study.experiments import format_paired_summary, paired_updates
    from ..train.trainer import TrainConfig

    field, values = args.vary
    arms = {f"{field}={json.dumps(v)}": {field: v} for v in values}
    if args.json:
        check_output_file(args.json, "--json")
    _warn_lr(args, args.lr)
    pick_device(args.device)
    cfg = TrainConfig(
        algo=args.algo,
        steps=args.steps,
        seed=args.seed,
        prompts_per_step=args.prompts,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        lr=args.lr,
        device=args.device,
        algo_overrides=dict(args.overrides),
    )
    _refuse_unused_fields(args.algo, dict(args.overrides))
    for v in values:
        _refuse_unused_fields(args.algo, dict(args.overrides) | {field: v}, flag="--vary")
    result = paired_updates(cfg, arms, args.steps, low_p=args.low_p, progress=not args.quiet)
    print(format_paired_summary(result["summary"]))
    if args.json:
        save_json(result, args.json)
    return 0


def _pretrain(args) -> int:
    from ..io import check_output_folder
    from ..lab.models import TINY_MODEL_DIR
    from ..lab.pretrain import GPU_MODEL_DIR, pretrain

    out = args.out or (GPU_MODEL_DIR if args.size == "gpu" else TINY_MODEL_DIR)
    check_output_folder(out, "--out")
    s = pretrain(
        out_dir=out,
        seed=args.seed,
        max_steps=args.max_steps,
        target_accuracy=args.target_accuracy,
        eval_from=args.eval_from,
        eval_every=args.eval_every,
        n_eval=args.n_eval,
        progress=not args.quiet,
        size=args.size,
        hidden=args.hidden,
        layers=args.layers,
        heads=args.heads,
        ffn=args.ffn,
        batch_size=args.batch_size,
        lr=args.lr,
        device=args.device,
    )
    print(
        f"pretrained {s['parameters']:,} parameters in {s['seconds']:.0f} s ({s['steps']} steps): held-out greedy "
        f"accuracy {s['held_out_greedy_accuracy']:.3f}, sampled (T=1) {s['held_out_sampled_accuracy_t1']:.3f}"
    )
    return 0


def _bench(args) -> int:
    from ..bench.runner import PARTS, BenchConfig, format_table, run_bench
    from ..io import check_output_file, save_json
    from ..train.trainer import TrainConfig

    if args.json:
        check_output_file(args.json, "--json")
    _warn_lr(args, args.lr)
    train = TrainConfig(
        algo="grpo",
        model=args.model,
        seed=args.seed,
        prompts_per_step=args.prompts,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        lr=args.lr,
        track_kl=False,
        device=args.device,
    )
    cfg = BenchConfig(
        train=train,
        steps=args.steps,
        warmup=args.warmup,
        pairs=args.pairs,
        rollout_repeats=args.rollout_repeats,
        parts=tuple(args.only or PARTS),
        isolate=not args.in_process,
    )
    result = run_bench(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_table(result))
    if args.json:
        save_json(result, args.json)
    return 0


def _export(args) -> int:
    from ..scale.export import export_recipe

    files = export_recipe(args.algo, args.engine, args.model, args.task, args.out)
    print(f"{args.algo} for {args.engine}: wrote {len(files)} files in {args.out} (read README.md there first)")
    for f in files:
        print(f"  {f}")
    return 0


def _doctor(args) -> int:
    from .doctor import run

    return run()
