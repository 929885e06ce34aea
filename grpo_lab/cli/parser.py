"""The command line's arguments: the option types (one line for a bad value, exit status 2), the flags
generated from ``TrainConfig``'s fields (so each setting is declared once), and each subcommand's flags."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Literal, NoReturn, get_args, get_origin, get_type_hints

from ..algorithms import AlgoName
from ..core.checks import check_number, check_positive_int
from ..lab.tasks import TASKS
from ..train.config import MAX_SEED, TrainConfig

# argparse reads "-1e-4" as an unknown flag ("expected one argument"); these are numbers, so that
# "--lr -1e-4" gets the same line as any other bad number.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan|infinity)$", re.IGNORECASE)
ALGOS = get_args(AlgoName)


class Parser(argparse.ArgumentParser):
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


def flag_of(name: str) -> str:
    """The flag of a ``TrainConfig`` field: its metadata's ``flag``, else ``--field-name``."""
    f = TrainConfig.__dataclass_fields__[name]
    return f.metadata.get("flag") or "--" + name.replace("_", "-")


def _add_config_flags(parser: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """One flag per ``TrainConfig`` field in ``names``, generated from the field: its type (a ``Literal``
    gives the choices), its default and its ``help``. An untyped flag leaves no attribute on the parsed
    namespace (``argparse.SUPPRESS``), so ``settings_given`` sees what the user typed and the field's own default
    applies otherwise."""
    hints = get_type_hints(TrainConfig)
    for f in fields(TrainConfig):
        if f.name not in names:
            continue
        kind, args = hints[f.name], get_args(hints[f.name])
        if type(None) in args:  # X | None: the flag takes an X
            kind = next(a for a in args if a is not type(None))
        flag = flag_of(f.name)
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


def settings_given(args: argparse.Namespace, names: tuple[str, ...]) -> dict:
    """The ``TrainConfig`` fields among ``names`` that the user typed, with their values."""
    return {n: getattr(args, n) for n in names if hasattr(args, n)}


def _add_set_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--set FIELD=VALUE``, repeatable, collected in ``args.overrides`` (train, compare and paired share it)."""
    parser.add_argument(
        "--set", dest="overrides", type=_override, action="append", default=[], metavar="FIELD=VALUE", help=help
    )


TRAIN_FIELDS = ("algo", "model", "task", "data_dir", "steps", "seed", "prompts_per_step", "group_size",
                "max_new_tokens", "temperature", "lr", "kl_stop", "max_seconds", "max_samples", "device",
                "sampler_noise", "rollout_is", "rollout_is_max")  # fmt: skip
EVAL_FIELDS = ("model", "task", "data_dir", "temperature", "max_new_tokens", "seed", "device")
PAIRED_FIELDS = ("algo", "steps", "seed", "prompts_per_step", "group_size", "max_new_tokens", "lr", "device")
BENCH_FIELDS = ("prompts_per_step", "group_size", "max_new_tokens", "temperature", "lr", "seed", "device", "model")
RESUME_FLAGS = ("steps", "device")
"""The run settings ``train --resume`` reads (how many more steps); the rest are the saved run's own."""


def train_arguments(t: argparse.ArgumentParser) -> None:
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


def eval_arguments(e: argparse.ArgumentParser) -> None:
    _add_config_flags(e, EVAL_FIELDS)
    e.add_argument("--n", type=_positive_int, default=1000, help="held-out prompts")
    e.add_argument("--samples", type=_positive_int, default=8, help="k of pass@k (sampled at --temperature)")
    e.add_argument("--json", metavar="FILE")


def compare_arguments(c: argparse.ArgumentParser) -> None:
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


def paired_arguments(pr: argparse.ArgumentParser) -> None:
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


def pretrain_arguments(pt: argparse.ArgumentParser) -> None:
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
    pt.add_argument(
        "--filler",
        type=_non_negative_int,
        default=8,
        help="most filler dots in a training answer (default 8; tiny-sum3-long: 64)",
    )
    pt.add_argument(
        "--init",
        default=None,
        help="start from this lab model's weights and shape, not --size's; --lr and --batch-size still come from "
        "--size (tiny-sum3-long: tiny-sum3)",
    )
    pt.add_argument(
        "--max-new-tokens",
        type=_positive_int,
        default=32,
        help="completion length of the evaluations and the model's position room; at least filler + 21 "
        "(default 32; tiny-sum3-long: 128)",
    )
    pt.add_argument("--quiet", action="store_true")


BENCH_PARTS = ("lab", "lab_no_prompt_sharing", "lab_no_compaction", "lab_no_length_grouping", "trl",
               "trl_continuous_batching", "rollout")  # fmt: skip


def bench_arguments(bn: argparse.ArgumentParser) -> None:
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


def export_arguments(ex: argparse.ArgumentParser) -> None:
    ex.add_argument("--algo", choices=ALGOS, default="grpo")
    ex.add_argument("--engine", choices=["trl", "verl"], required=True)
    ex.add_argument("--model", default="Qwen/Qwen2.5-1.5B-Instruct", help="a Hugging Face name or a folder")
    ex.add_argument("--task", choices=TASKS, default="gsm8k")
    _add_config_flags(ex, ("data_dir",))
    ex.add_argument("--out", required=True, metavar="DIR", help="folder for the recipe")
    _add_set_option(ex, "change one Algorithm field of the preset, e.g. --set dynamic_sampling=false")
