"""The command line: the same experiments as the notebooks, outside Jupyter.

    python -m grpo_lab train --algo grpo --steps 100 --seed 0 --json runs/grpo.json
    python -m grpo_lab eval --model assets/tiny-sum3 --samples 8
    python -m grpo_lab pretrain
    python -m grpo_lab bench --json runs/bench.json
    python -m grpo_lab paired --vary clip_high=0.2,0.28 --steps 60 --set minibatches=8 --set epochs=2
    python -m grpo_lab export --algo dapo --engine verl --model Qwen/Qwen2.5-1.5B-Instruct --out recipes/dapo

The run's settings are ``TrainConfig``'s fields: their flags are generated from the fields (name, type,
choices, help), so each setting is declared once. Bad arguments print one line and exit with status 2;
nothing prints a traceback at a learner. Every check (arguments, output paths, model and task) comes
before any work. Ctrl-C (or SIGTERM) stops ``train`` after the current step, saves what was asked for,
and exits with status 130; ``pretrain`` stops at once and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, fields, replace
from typing import Literal, NoReturn, get_args, get_origin, get_type_hints

import torch

from ..algorithms import AlgoName, get_algorithm, unused_fields
from ..core.checks import check_number, check_positive_int
from ..lab.tasks import CHAT_TASKS, N_TEST, TASKS
from ..train.config import MAX_SEED, TrainConfig
from . import _interrupted_while_starting

# argparse reads "-1e-4" as an unknown flag ("expected one argument"); these are numbers, so that
# "--lr -1e-4" gets the same line as any other bad number.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan|infinity)$", re.IGNORECASE)
LR_USUAL = (1e-7, 1e-2)
"""Learning rates outside this range get a warning: above it one step can wreck a policy, below it nothing moves."""
ALGOS = get_args(AlgoName)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:  # one clear line, non-zero exit
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int_in(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [minimum, maximum], checked by ``check_positive_int``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = text
        try:
            return check_positive_int("value", value, minimum, maximum)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix("value ")) from None

    return parse


_positive_int = _int_in(1)
_non_negative_int = _int_in(0)
_seed = _int_in(0, MAX_SEED)


def _positive_float(text: str) -> float:
    try:
        return check_number("value", float(text), low=0, low_open=True)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}") from None


def _json_value(text: str) -> object:
    """A ``--set``/``--vary`` value read as JSON (so 0.28 is a number and null is None), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _override(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"must look like FIELD=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key, _json_value(value)


def _vary(text: str) -> tuple[str, list]:
    """FIELD=V1,V2,...: each value read as JSON."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"must look like FIELD=V1,V2, got {text!r}")
    key, values = text.split("=", 1)
    parsed = [_json_value(v) for v in values.split(",")]
    if len(parsed) < 2:
        raise argparse.ArgumentTypeError(f"needs at least two values after {key}=, got {values!r}")
    return key, parsed


def _flag(name: str) -> str:
    """The flag of a ``TrainConfig`` field: its metadata's ``flag``, else ``--field-name``."""
    f = TrainConfig.__dataclass_fields__[name]
    return f.metadata.get("flag") or "--" + name.replace("_", "-")


def _add_config_flags(parser: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """One flag per ``TrainConfig`` field in ``names``, generated from the field: its type (a ``Literal``
    gives the choices), its default and its ``help``. An untyped flag leaves no attribute on the parsed
    namespace (``argparse.SUPPRESS``), so ``_given`` sees what the user typed and the field's own default
    applies otherwise."""
    hints = get_type_hints(TrainConfig)
    for f in fields(TrainConfig):
        if f.name not in names:
            continue
        kind, args = hints[f.name], get_args(hints[f.name])
        if type(None) in args:  # X | None: the flag takes an X
            kind = next(a for a in args if a is not type(None))
        flag = _flag(f.name)
        kwargs: dict = {"dest": f.name, "default": argparse.SUPPRESS, "metavar": flag[2:].upper().replace("-", "_")}
        if get_origin(kind) is Literal:
            del kwargs["metavar"]
            kwargs["choices"] = get_args(kind)
        elif kind is int:
            kwargs["type"] = _seed if f.name == "seed" else _positive_int
        elif kind is float:
            kwargs["type"] = _positive_float
        default = "" if f.default in (MISSING, None) or f.name == "task" else f" (default: {f.default})"
        parser.add_argument(flag, help=f.metadata["help"] + default, **kwargs)


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> dict:
    """The ``TrainConfig`` fields among ``names`` that the user typed, with their values."""
    return {n: getattr(args, n) for n in names if hasattr(args, n)}


def _add_set_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--set FIELD=VALUE``, repeatable, collected in ``args.overrides`` (train, compare and paired share it)."""
    parser.add_argument(
        "--set", dest="overrides", type=_override, action="append", default=[], metavar="FIELD=VALUE", help=help
    )


TRAIN_FIELDS = ("algo", "model", "task", "steps", "seed", "prompts_per_step", "group_size", "max_new_tokens",
                "temperature", "lr", "kl_stop", "max_seconds", "max_samples", "device")  # fmt: skip
EVAL_FIELDS = ("model", "task", "temperature", "max_new_tokens", "seed", "device")
PAIRED_FIELDS = ("algo", "steps", "seed", "prompts_per_step", "group_size", "max_new_tokens", "lr", "device")
BENCH_FIELDS = ("prompts_per_step", "group_size", "max_new_tokens", "temperature", "lr", "seed", "device", "model")
RESUME_FLAGS = ("steps", "device")
"""The run settings ``train --resume`` reads (how many more steps); the rest are the saved run's own."""


def _train_parser(t: argparse.ArgumentParser) -> None:
    _add_config_flags(t, TRAIN_FIELDS)
    t.add_argument("--json", metavar="FILE", help="write the summary (before/after, history) here")
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
    _add_set_option(t, "change one Algorithm field, e.g. --set minibatches=4 --set clip_high=0.28")
    t.add_argument("--quiet", action="store_true", help="no progress bars")


def _eval_parser(e: argparse.ArgumentParser) -> None:
    _add_config_flags(e, EVAL_FIELDS)
    e.add_argument("--n", type=_positive_int, default=1000, help="held-out prompts")
    e.add_argument("--samples", type=_positive_int, default=8, help="k of pass@k (sampled at --temperature)")
    e.add_argument("--json", metavar="FILE")


def _compare_parser(c: argparse.ArgumentParser) -> None:
    c.add_argument("--algos", nargs="+", choices=ALGOS, default=["grpo", "dr_grpo", "gspo", "dapo", "ppo", "gfpo"])
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


def _paired_parser(pr: argparse.ArgumentParser) -> None:
    pr.add_argument(
        "--vary",
        type=_vary,
        required=True,
        metavar="FIELD=V1,V2,...",
        help="the update field the arms differ in and its values, the first one followed, e.g. clip_high=0.2,0.28",
    )
    _add_config_flags(pr, PAIRED_FIELDS)
    pr.set_defaults(steps=60)  # a paired comparison's own default: short, each step pays for every arm
    pr.add_argument(
        "--low-p",
        type=_positive_float,
        default=0.2,
        help="a positive-advantage token counts as low-probability below this probability",
    )
    _add_set_option(pr, "change one Algorithm field in every arm, e.g. --set minibatches=8 --set epochs=2")
    pr.add_argument("--json", metavar="FILE")
    pr.add_argument("--quiet", action="store_true")


def _target_accuracy(text: str) -> float:
    try:
        return check_number("value", float(text), low=0, high=1, low_open=True)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a share of prompts in (0, 1], got {text}") from None


def _pretrain_parser(pt: argparse.ArgumentParser) -> None:
    pt.add_argument("--out", default=None, help="folder (default: assets/tiny-sum3)")
    pt.add_argument("--seed", type=_seed, default=0)
    pt.add_argument("--max-steps", type=_positive_int, default=1500)
    pt.add_argument(
        "--target-accuracy",
        type=_target_accuracy,
        default=0.35,
        help="stop once the held-out greedy accuracy reaches this share (in (0, 1])",
    )
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


BENCH_PARTS = ("lab", "lab_no_prompt_sharing", "lab_no_compaction", "lab_no_length_grouping", "trl",
               "trl_continuous_batching", "rollout")  # fmt: skip


def _bench_parser(bn: argparse.ArgumentParser) -> None:
    _add_config_flags(bn, BENCH_FIELDS)
    bn.add_argument("--steps", type=_positive_int, default=5, help="timed steps per run of each arm")
    bn.add_argument("--warmup", type=_non_negative_int, default=2, help="untimed steps first, in every run")
    bn.add_argument(
        "--pairs",
        type=_positive_int,
        default=5,
        help="runs of every arm, in alternating order (lab..trl, trl..lab, ...); one ratio per pair",
    )
    bn.add_argument("--rollout-repeats", type=_positive_int, default=5, help="timed calls of each generator")
    bn.add_argument(
        "--only",
        nargs="+",
        default=None,
        choices=BENCH_PARTS,
        help="measure only these arms (and 'rollout', the generator comparison); default: all",
    )
    bn.add_argument("--in-process", action="store_true", help="run the parts here, not each in its own forked process")
    bn.add_argument("--json", metavar="FILE", help="write the measurements here")


def _export_parser(ex: argparse.ArgumentParser) -> None:
    ex.add_argument("--algo", choices=ALGOS, default="grpo")
    ex.add_argument("--engine", choices=["trl", "verl"], required=True)
    ex.add_argument("--model", default="Qwen/Qwen2.5-1.5B-Instruct", help="a Hugging Face name or a folder")
    ex.add_argument("--task", choices=TASKS, default="gsm8k")
    ex.add_argument("--out", required=True, metavar="DIR", help="folder for the recipe")
    _add_set_option(ex, "change one Algorithm field of the preset, e.g. --set dynamic_sampling=false")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m grpo_lab", description="grpo_lab: RL post-training, seen step by step.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, command in COMMANDS.items():
        command.add_arguments(sub.add_parser(name, help=command.help))
    return p


def main(argv: list[str] | None = None) -> int:
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, main() handles Ctrl-C
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if getattr(args, "quiet", False):
        _quiet()
    from ..study.compare import ChildRunFailed  # the study layer imports the trainer: seconds

    command = COMMANDS[args.command]
    try:
        return command.run(args)
    except ValueError as err:  # the lab's own input checks: one line, not a traceback
        _say(args, "error", err)
        return 2
    except ChildRunFailed as err:  # a run of `compare` failed: its own line, and its exit status where it says why
        _say(args, "error", err)
        return err.returncode if err.returncode in (2, 130) else 1
    except Stopped as stop:  # SIGTERM or SIGHUP where the command stops at once (pretrain)
        _say(args, "interrupted", f"stopped by {signal.Signals(stop.signum).name}; {command.on_interrupt}")
        return 128 + stop.signum
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside a training loop: stop at once
        _say(args, "interrupted", f"stopped at once; {command.on_interrupt}")
        return 130
    except (torch.OutOfMemoryError, MemoryError) as err:
        _say(args, "error", f"out of memory ({_first_line(err)}); lower {command.memory_knobs}")
        return 1
    except RuntimeError as err:
        if "can't allocate memory" not in str(err) and "out of memory" not in str(err):
            raise
        _say(args, "error", f"out of memory ({_first_line(err)}); lower {command.memory_knobs}")
        return 1
    except OSError as err:  # the disk filled up or went away while writing
        _say(args, "error", err)
        return 1


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return lines[0][:200] if lines else type(err).__name__


def _say(args, kind: str, message) -> None:
    text = " ".join(str(message).split("\n"))
    print(f"python -m grpo_lab {args.command}: {kind}: {text}", file=sys.stderr, flush=True)


def _quiet() -> None:
    """--quiet: no progress bars from the libraries either (model shards, dataset maps)."""
    import datasets  # transformers and datasets: seconds to import, so only when asked
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()


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


def _warn_lr(args, lr: float, flag: str = "--lr") -> None:
    low, high = LR_USUAL
    usual = "the usual range (1e-7 to 1e-2; default 1e-4)"
    if lr > high:
        _say(args, "warning", f"{flag} {lr:g} is far above {usual}: one step can wreck the policy")
    elif lr < low:
        _say(args, "warning", f"{flag} {lr:g} is far below {usual}: the policy will hardly move")


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


def _train(args) -> int:
    from ..lab.models import pick_device  # torch-heavy layers below: imported when a command runs
    from ..train import run as run_mod  # (a module, so that tests may stand in for its functions)

    given = _given(args, TRAIN_FIELDS)
    if args.save_every is not None and not args.save:
        raise ValueError("--save-every needs --save DIR (where to save)")
    if args.resume:
        ignored = [_flag(n) for n in given if n not in RESUME_FLAGS] + (["--set"] if args.overrides else [])
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
    from ..lab.metrics import evaluate  # torch-heavy layers below: imported when a command runs
    from ..lab.models import load_policy, pick_device, set_threads
    from ..lab.tasks import get_task

    given = _given(args, EVAL_FIELDS)
    cfg = TrainConfig(**given | {"task": "sum3"})  # the same checks and defaults as a run's settings
    pick_device(cfg.device, "--device")
    if args.json:
        check_output_file(args.json, "--json")
    task = get_task(_pick_task(cfg.model, given.get("task")), n_test=args.n)
    if len(task.test) < args.n:
        raise ValueError(
            f"--n {args.n} is more than the {len(task.test)} held-out prompts of task {task.name}; "
            f"give at most {len(task.test)}"
        )
    set_threads()
    model, tokenizer = load_policy(cfg.model, cfg.device)
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


def _compare(args) -> int:
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


def _paired(args) -> int:
    from ..io import check_output_file, save_json
    from ..lab.models import pick_device  # torch-heavy layers below: imported when a command runs
    from ..study.paired import format_paired_summary, paired_updates

    field, values = args.vary
    arms = {f"{field}={json.dumps(v)}": {field: v} for v in values}
    given = _given(args, PAIRED_FIELDS)
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
        _say(args, "interrupted", f"stopped after {result['steps']} of {cfg.steps} steps{kept}")
        return 130
    return 0


def _pretrain(args) -> int:
    from ..io import check_output_folder
    from ..lab.models import TINY_MODEL_DIR  # torch-heavy layers below: imported when a command runs
    from ..lab.pretrain import GPU_MODEL_DIR, pretrain

    out = args.out or (GPU_MODEL_DIR if args.size == "gpu" else TINY_MODEL_DIR)
    check_output_folder(out, "--out")
    with _stop_at_once_on_signals():
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


def _bench(args) -> int:
    from ..bench.config import PARTS, BenchConfig  # imports the trainer: seconds
    from ..bench.report import format_table
    from ..bench.runner import run_bench
    from ..io import check_output_file, save_json
    from ..lab.models import pick_device

    if args.json:
        check_output_file(args.json, "--json")
    train = TrainConfig(algo="grpo", track_kl=False, **_given(args, BENCH_FIELDS))
    _warn_lr(args, train.lr)
    pick_device(train.device, "--device")
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
    from ..scale.export import effective_algorithm, export_recipe  # the recipe templates: when a command runs

    algo = get_algorithm(args.algo, **dict(args.overrides))
    files = export_recipe(algo, args.engine, args.model, args.task, args.out)
    print(f"{args.algo} for {args.engine}: wrote {len(files)} files in {args.out} (read README.md there first)")
    for f in files:
        print(f"  {f}")
    lines, warnings = effective_algorithm(algo, args.engine)
    print("what the recipe runs:")
    for line in lines:
        print(f"  {line}")
    for w in warnings:
        _say(args, "warning", w)
    return 0


def _doctor(args) -> int:
    from .doctor import run  # imports every layer: only when asked

    return run()


@dataclass(frozen=True)
class Command:
    """A subcommand: its flags, what it does, what to lower when it runs out of memory, and what is left
    on disk when a signal stops it at once."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    memory_knobs: str = "the batch sizes"
    on_interrupt: str = "a checkpoint already on disk is whole, nothing else was written"


COMMANDS: dict[str, Command] = {
    "train": Command(
        "train a policy with one algorithm and write a JSON summary",
        _train_parser,
        _train,
        "--prompts, --group-size or --max-new-tokens (or --n-eval), or use a smaller --model",
    ),
    "eval": Command(
        "measure a checkpoint: greedy accuracy and pass@k",
        _eval_parser,
        _eval,
        "--samples, --n or --max-new-tokens, or use a smaller --model",
    ),
    "compare": Command(
        "several algorithms x seeds on one task and budget: a table with spread",
        _compare_parser,
        _compare,
        "--n-eval or --pass-k (each run has the train defaults)",
    ),
    "paired": Command(
        "one batch, several update rules: each arm's update from the same weights, every step",
        _paired_parser,
        _paired,
        "--prompts, --group-size or --max-new-tokens",
    ),
    "pretrain": Command(
        "build the tiny policy in assets/ from scratch (supervised)",
        _pretrain_parser,
        _pretrain,
        "--batch-size, --n-eval, or the model's --hidden, --layers or --ffn",
        "nothing was written (the --out folder is as it was)",
    ),
    "bench": Command(
        "speed side by side: the lab's GRPO step against TRL's GRPOTrainer, rollout tokens/s, memory",
        _bench_parser,
        _bench,
        "--prompts, --group-size or --max-new-tokens",
    ),
    "export": Command(
        "write a preset as a launchable TRL or verl recipe (script, configs, launch commands)",
        _export_parser,
        _export,
    ),
    "doctor": Command(
        "is this machine ready? Python, torch, the model, one training step, widgets, plots, memory",
        lambda parser: None,
        _doctor,
    ),
}
