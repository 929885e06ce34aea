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
and exits with status 130; ``pretrain`` and ``export`` stop at once and write nothing.

Here: the subcommands (``COMMANDS``), ``main`` and its error contract (which exception gives which line
and exit status). The flags are in ``parser.py``, what each command does in ``commands.py``.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import _interrupted_while_starting
from .commands import (
    Stopped,
    bench_command,
    compare_command,
    doctor_command,
    eval_command,
    export_command,
    paired_command,
    pretrain_command,
    say,
    train_command,
)
from .parser import (
    Parser,
    bench_arguments,
    compare_arguments,
    eval_arguments,
    export_arguments,
    paired_arguments,
    pretrain_arguments,
    train_arguments,
)


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
        train_arguments,
        train_command,
        "--prompts, --group-size or --max-new-tokens (or --n-eval), or use a smaller --model",
    ),
    "eval": Command(
        "measure a checkpoint: greedy accuracy and pass@k",
        eval_arguments,
        eval_command,
        "--samples, --n or --max-new-tokens, or use a smaller --model",
    ),
    "compare": Command(
        "several algorithms x seeds on one task and budget: a table with spread",
        compare_arguments,
        compare_command,
        "--n-eval or --pass-k (each run has the train defaults)",
    ),
    "paired": Command(
        "one batch, several update rules: each arm's update from the same weights, every step",
        paired_arguments,
        paired_command,
        "--prompts, --group-size or --max-new-tokens",
    ),
    "pretrain": Command(
        "build the tiny policy in assets/ from scratch (supervised)",
        pretrain_arguments,
        pretrain_command,
        "--batch-size, --n-eval, or the model's --hidden, --layers or --ffn",
        "nothing was written (the --out folder is as it was)",
    ),
    "bench": Command(
        "speed side by side: the lab's GRPO step against TRL's GRPOTrainer, rollout tokens/s, memory",
        bench_arguments,
        bench_command,
        "--prompts, --group-size or --max-new-tokens",
    ),
    "export": Command(
        "write a preset as a launchable TRL or verl recipe (script, configs, launch commands)",
        export_arguments,
        export_command,
        on_interrupt="nothing was written (the --out folder is as it was)",
    ),
    "doctor": Command(
        "is this machine ready? Python, torch, the model, one training step, widgets, plots, memory",
        lambda parser: None,
        doctor_command,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m grpo_lab", description="grpo_lab: RL post-training, seen step by step.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, command in COMMANDS.items():
        command.add_arguments(sub.add_parser(name, help=command.help))
    return p


def main(argv: list[str] | None = None) -> int:
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, _interrupt)  # from here on, main() handles Ctrl-C
    _ctrl_c["seen"] = False
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if getattr(args, "quiet", False):
        _quiet()
    from ..study.compare import ChildRunFailed  # the study layer imports the trainer: seconds

    command = COMMANDS[args.command]
    try:
        return command.run(args)
    except ValueError as err:  # the lab's own input checks: one line, not a traceback
        if _ctrl_c["seen"]:  # a Ctrl-C that a library re-worded as its own error (an interrupted import)
            say(args, "interrupted", f"stopped at once; {command.on_interrupt}")
            return 130
        say(args, "error", err)
        return 2
    except ChildRunFailed as err:  # a run of `compare` failed: its own line, and its exit status where it says why
        say(args, "interrupted" if err.returncode == 130 else "error", err)
        return err.returncode if err.returncode in (2, 130) else 1
    except Stopped as stop:  # SIGTERM or SIGHUP where the command stops at once (pretrain)
        say(args, "interrupted", f"stopped by {signal.Signals(stop.signum).name}; {command.on_interrupt}")
        return 128 + stop.signum
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside a training loop: stop at once
        say(args, "interrupted", f"stopped at once; {command.on_interrupt}")
        return 130
    except (torch.OutOfMemoryError, MemoryError) as err:
        say(args, "error", f"out of memory ({_first_line(err)}); lower {command.memory_knobs}")
        return 1
    except RuntimeError as err:
        if "can't allocate memory" not in str(err) and "out of memory" not in str(err):
            raise
        say(args, "error", f"out of memory ({_first_line(err)}); lower {command.memory_knobs}")
        return 1
    except OSError as err:  # the disk filled up or went away while writing
        say(args, "error", err)
        return 1


_ctrl_c = {"seen": False}


def _interrupt(signum, frame) -> None:
    """Ctrl-C outside a training loop: stop at once, and remember it, since a library may catch the
    KeyboardInterrupt and raise its own error instead (transformers does, inside a lazy import)."""
    _ctrl_c["seen"] = True
    raise KeyboardInterrupt


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return lines[0][:200] if lines else type(err).__name__


def _quiet() -> None:
    """--quiet: no progress bars from the libraries either (model shards, dataset maps)."""
    import datasets  # transformers and datasets: seconds to import, so only when asked
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
