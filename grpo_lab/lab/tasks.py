"""Verifiable tasks: prompts as a ``datasets.Dataset`` and a programmatic reward.

The default task, ``sum3``, asks for the sum of three two-digit numbers: ``07+85+29=``. A
completion may think before it answers, and the reward checks only the final number:

    direct    121
    short     92,121                  (the first partial sum, then the answer)
    verbose   07+85=92,92+29=121      (every step written out)

and any of them may start with a run of filler dots (``...``), "thinking" that does not help: up to
``MAX_FILLER`` dots for the shipped ``tiny-sum3`` (answers of at most 29 tokens), up to ``LONG_FILLER`` for
``tiny-sum3-long`` (at most 85), so that there length is the learner's choice over a range of ten to one and more.
The formats make accuracy depend on what the policy chooses to write, and the filler makes
length vary independently of correctness, so length bias (Dr. GRPO), overlong shaping (DAPO)
and length filtering (GFPO) have something to act on that is not the same thing as being right.

Two more tasks are for real models on a GPU: ``gsm8k``, grade-school word problems whose answer follows
``####``, and ``words``, problems of the same shape made offline by ``synthetic_word_problems``.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Literal, get_args

from ..core.checks import check_choice

if TYPE_CHECKING:
    from datasets import Dataset

from ..io import first_line

SUM3_CHARS = "0123456789+=,."
MAX_FILLER = 8
LONG_FILLER = 64
"""Filler dots in ``tiny-sum3-long``'s training answers (answers of up to 85 tokens): room for length effects."""
LONG_MAX_NEW_TOKENS = 128
"""The completion length the long model's runs use: its longest trained answer (85 tokens) and room to grow."""
FORMATS = ("direct", "short", "verbose")
INTEGER = re.compile(r"-?[0-9]+")  # ASCII digits only: "²" or "١" are not digits of an answer
MAX_ANSWER_DIGITS = 100
"""A number written with more digits than this scores 0 without being read (no task's answer is that long)."""


def sum3_prompt(a: int, b: int, c: int) -> str:
    for name, v in (("a", a), ("b", b), ("c", c)):
        if not 0 <= v <= 99:
            raise ValueError(f"{name} must be in [0, 99], got {v}")
    return f"{a:02d}+{b:02d}+{c:02d}="


def sum3_completion(a: int, b: int, c: int, fmt: str, filler: int = 0, max_filler: int = MAX_FILLER) -> str:
    """A correct completion (without EOS) in the given format, after ``filler`` dots (at most ``max_filler``)."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if not 0 <= filler <= max_filler:
        raise ValueError(f"filler must be in [0, {max_filler}], got {filler}")
    ab, total = a + b, a + b + c
    body = {
        "direct": f"{total}",
        "short": f"{ab},{total}",
        "verbose": f"{a:02d}+{b:02d}={ab},{ab}+{c:02d}={total}",
    }[fmt]
    return "." * filler + body


def sum3_triples(split: str, n: int, seed: int) -> list[tuple[int, int, int]]:
    """Disjoint train/test triples: a triple belongs to 'test' iff a fixed hash says so (1 in 8)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"sum3-{split}-{seed}")
    out = []
    while len(out) < n:
        a, b, c = rng.randrange(100), rng.randrange(100), rng.randrange(100)
        in_test = (a * 7919 + b * 104729 + c * 1299709) % 8 == 0
        if in_test == (split == "test"):
            out.append((a, b, c))
    return out


def sum3_dataset(split: str = "train", n: int = 2048, seed: int = 0) -> Dataset:
    """Prompts of the ``sum3`` task: columns ``prompt``, ``answer`` (int) and ``operands``.

    The ``test`` split never shares a triple with ``train``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rows = sum3_triples(split, n, seed)
    from datasets import Dataset  # pandas and pyarrow: seconds, so not at the command line's start-up

    return Dataset.from_dict(
        {
            "prompt": [sum3_prompt(*t) for t in rows],
            "answer": [sum(t) for t in rows],
            "operands": [list(t) for t in rows],
        }
    )


def sum3_sft_examples(
    n: int, seed: int = 0, format_weights: Sequence[float] = (0.4, 0.3, 0.3), max_filler: int = MAX_FILLER
) -> list[tuple[str, str]]:
    """Supervised (prompt, completion) pairs from the train split, formats mixed, filler uniform in [0, max_filler]."""
    rng = random.Random(f"sum3-sft-{seed}")
    triples = sum3_triples("train", n, seed + 1)
    out = []
    for a, b, c in triples:
        fmt = rng.choices(FORMATS, weights=format_weights)[0]
        filler = rng.randint(0, max_filler)
        out.append((sum3_prompt(a, b, c), sum3_completion(a, b, c, fmt, filler, max_filler)))
    return out


def longest_sum3_answer(max_filler: int) -> int:
    """Tokens in the longest trained answer: the filler, the verbose body ("99+99=198,198+99=297"), and EOS."""
    return max_filler + len(sum3_completion(99, 99, 99, "verbose")) + 1


def last_number(text: str) -> int | None:
    """The last integer in ``text``, ASCII digits only (None when there is none, or when it has
    more than ``MAX_ANSWER_DIGITS`` digits)."""
    found = INTEGER.findall(text)
    if not found or len(found[-1].lstrip("-")) > MAX_ANSWER_DIGITS:
        return None
    return int(found[-1])


def check_answer(answer: object) -> None:
    """An answer must be a number (an int, or a finite float or Fraction); a string is refused, since
    a grader comparing a number to the text "121" would score every completion 0 without a word."""
    ok = isinstance(answer, numbers.Rational) or (isinstance(answer, float) and math.isfinite(answer))
    if isinstance(answer, bool) or not ok:
        raise ValueError(f"answer must be a number (int), got {type(answer).__name__} {answer!r}")


def sum3_reward(completion: str, answer: int, finished: bool = True) -> float:
    """1.0 when the completion finished (ended with EOS) and its last number is the answer, else 0.0.

    ``completion`` is the decoded text without special tokens. Malformed text (no number, stray
    symbols after the answer, truncated, digits other than ASCII 0-9, a number of more than
    ``MAX_ANSWER_DIGITS`` digits) scores 0: the answer must be the final thing written.
    """
    check_answer(answer)
    if not isinstance(completion, str):
        raise ValueError(f"completion must be a str, got {type(completion).__name__}")
    if not finished:
        return 0.0
    text = completion.strip()
    if not text or text[-1] not in "0123456789":
        return 0.0
    return 1.0 if last_number(text) == answer else 0.0


def sum3_features(completion: str) -> dict[str, float]:
    """What RL changes in a ``sum3`` completion besides correctness: filler dots and the format."""
    fmt = sum3_format(completion)
    return {
        "filler": float(len(completion) - len(completion.lstrip("."))),
        "verbose": float(fmt == "verbose"),
        "direct": float(fmt == "direct"),
    }


def sum3_format(completion: str) -> str:
    """Which format a completion used, ignoring filler: 'direct', 'short', 'verbose' or 'other'."""
    body = completion.lstrip(".")
    if re.fullmatch(r"\d+", body):
        return "direct"
    if re.fullmatch(r"\d+,\d+", body):
        return "short"
    if re.fullmatch(r"\d+\+\d+=\d+,\d+\+\d+=\d+", body):
        return "verbose"
    return "other"


def score_completions(
    reward_fn: Callable[[str, int, bool], float], texts: list[str], answers: list[int], finished: list[bool]
) -> list[float]:
    """``reward_fn`` on each decoded completion, with its answer and whether it ended with EOS."""
    if not len(texts) == len(answers) == len(finished):
        raise ValueError(
            "texts, answers and finished must have one entry per completion, "
            f"got {len(texts)}, {len(answers)} and {len(finished)}"
        )
    scores = []
    for i, (t, a, f) in enumerate(zip(texts, answers, finished)):
        r = reward_fn(t, a, bool(f))
        # A reward that is not a finite number would turn into NaN advantages several steps later.
        try:
            value = float(r) if r is not None and not isinstance(r, (str, bytes)) else None
        except (TypeError, ValueError):
            value = None
        if value is None or not math.isfinite(value):
            name = getattr(reward_fn, "__name__", type(reward_fn).__name__)
            raise ValueError(f"reward_fn {name} must return a finite number, got {r!r} for completion {i} ({t[:40]!r})")
        scores.append(value)
    return scores


# --- GSM8K-style word problems (real models) ------------------------------------------------

GSM8K_SYSTEM = "Solve the problem. Think step by step, then give the final answer after '####'."


# A final number: sign, digits with or without thousands separators, then decimals or a fraction.
FINAL_NUMBER = r"([-+]?)([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(\.[0-9]+)?(?:/([0-9]+))?"
AFTER_MARKER = re.compile(r"\s*\$?\s*" + FINAL_NUMBER)
ANY_NUMBER = re.compile(r"(?<![0-9.])" + FINAL_NUMBER + r"(?![0-9])")


def read_number(match: re.Match) -> Fraction | None:
    """The exact value of a ``FINAL_NUMBER`` match (None when it is too long, divides by zero, or runs
    on into digits that are not ASCII)."""
    sign, whole, decimals, denominator = match.groups()
    if match.string[match.end() : match.end() + 1].isdigit():  # "5²" or "5٣": not the number 5
        return None
    digits = whole.replace(",", "") + (decimals or "")[1:] + (denominator or "")
    if len(digits) > MAX_ANSWER_DIGITS:
        return None
    value = Fraction(whole.replace(",", "") + (decimals or ""))
    if denominator is not None:
        if int(denominator) == 0:
            return None
        value /= int(denominator)
    return -value if sign == "-" else value


def gsm8k_reward(completion: str, answer: int, finished: bool = True) -> float:
    """1.0 when the number right after the last '####' (else the last number) equals the answer exactly.

    The whole number is read: sign, thousands separators (``1,234``), decimals (``5.5``) and
    fractions (``5/2``), so ``#### 5.5`` is not 5. ASCII digits only; a number of more than
    ``MAX_ANSWER_DIGITS`` digits scores 0.
    """
    check_answer(answer)
    if not isinstance(completion, str):
        raise ValueError(f"completion must be a str, got {type(completion).__name__}")
    if not finished:
        return 0.0
    if "####" in completion:
        # The answer is the number right after the marker; anything written later does not count.
        found = AFTER_MARKER.match(completion.rsplit("####", 1)[-1])
    else:
        found = None
        for found in ANY_NUMBER.finditer(completion):
            pass
    got = read_number(found) if found else None
    return 1.0 if got is not None and got == Fraction(answer) else 0.0


def synthetic_word_problems(n: int = 256, seed: int = 0) -> Dataset:
    """GSM8K-shaped problems made offline (two-step arithmetic with a '####' answer)."""
    rng = random.Random(f"words-{seed}")
    names = ["Ada", "Ben", "Chen", "Dana", "Eli", "Fatima", "Gus", "Hana"]
    things = ["apples", "marbles", "stickers", "books", "coins", "shells"]
    prompts, answers = [], []
    for _ in range(n):
        who, what = rng.choice(names), rng.choice(things)
        a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(1, 9)
        total = (a + b) * c
        prompts.append(
            f"{who} has {a} {what} and finds {b} more. Then {who} gets {c} times that many in all. "
            f"How many {what} does {who} have?"
        )
        answers.append(total)
    from datasets import Dataset  # pandas and pyarrow: seconds, so not at the command line's start-up

    return Dataset.from_dict({"prompt": prompts, "answer": answers})


GSM8K_FILES = ("train.jsonl", "test.jsonl")
"""A local copy of GSM8K: a folder holding these two files, in GSM8K's own format (as its authors publish it)."""
SOLUTION_ANSWER = re.compile(r"####\s*(-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+))\s*$")
"""The end of a GSM8K solution: '####', then the final answer, an integer (thousands separators allowed)."""


def gsm8k_answer(solution: str) -> int:
    """The final answer of a GSM8K solution, the integer after the '####' that ends it ("... #### 1,200" is 1200)."""
    found = SOLUTION_ANSWER.search(solution) if isinstance(solution, str) else None
    if found is None:
        tail = solution[-30:] if isinstance(solution, str) else solution
        raise ValueError(f"the answer must end with '#### <integer>' (GSM8K's format), got ...{tail!r}")
    return int(found.group(1).replace(",", ""))


def gsm8k_rows(path: str | os.PathLike) -> list[dict]:
    """The problems of a GSM8K-format file (JSON lines, each with "question" and "answer", the answer ending
    '#### <integer>') as rows ``{"prompt", "answer"}``. Blank lines are skipped; anything else that is not
    such a problem is refused with one line naming the file and the line."""
    path = os.fspath(path)
    want = 'one JSON object per line with "question" and "answer" (ending \'#### <integer>\')'
    if not os.path.isfile(path):
        raise ValueError(f"GSM8K file {path} does not exist; wanted a file of {want}")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"GSM8K file {path} is not UTF-8 text; wanted {want}") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} line {number}: not JSON ({err.msg}); wanted {want}") from None
        if not isinstance(record, dict) or not all(
            isinstance(record.get(k), str) and record[k].strip() for k in ("question", "answer")
        ):
            got = sorted(record) if isinstance(record, dict) else type(record).__name__
            raise ValueError(f"{path} line {number}: got {got}; wanted a JSON object with \"question\" and "
                             '"answer", both non-empty text')  # fmt: skip
        try:
            answer = gsm8k_answer(record["answer"])
        except ValueError as err:
            raise ValueError(f"{path} line {number}: {err}") from None
        rows.append({"prompt": record["question"], "answer": answer})
    if not rows:
        raise ValueError(f"GSM8K file {path} holds no problems; wanted {want}")
    return rows


def gsm8k_split(data_dir: str, split: str) -> list[dict]:
    """The rows of ``split`` ('train' or 'test') of a local GSM8K: ``data_dir``'s ``<split>.jsonl`` (``gsm8k_rows``)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not os.path.isdir(data_dir):
        raise ValueError(
            f"data_dir {data_dir} is not a folder; wanted a folder holding GSM8K's {' and '.join(GSM8K_FILES)}"
        )
    return gsm8k_rows(os.path.join(data_dir, f"{split}.jsonl"))


def gsm8k_dataset(split: str = "train", n: int | None = None, data_dir: str | None = None) -> Dataset:
    """GSM8K as columns ``prompt`` and ``answer``: from the Hugging Face hub (needs internet or its cache), or
    from ``data_dir``, a folder holding GSM8K's ``train.jsonl`` and ``test.jsonl`` (see ``gsm8k_rows``)."""
    from datasets import Dataset, load_dataset

    if data_dir is not None:
        rows = gsm8k_split(data_dir, split)
        return Dataset.from_list(rows if n is None else rows[:n])
    try:
        ds = load_dataset("openai/gsm8k", "main", split=split)
    except Exception as err:  # offline, no cache, hub down: each raises its own type
        raise ValueError(
            f"task 'gsm8k' needs the Hugging Face hub (dataset openai/gsm8k) or its local cache, and could not "
            f"load it ({first_line(err)}); use task 'words' (made offline) instead, or give data_dir, a folder "
            f"with GSM8K's {' and '.join(GSM8K_FILES)}"
        ) from None
    ds = ds.map(lambda r: {"prompt": r["question"], "answer": gsm8k_answer(r["answer"])})
    ds = ds.select_columns(["prompt", "answer"])
    return ds if n is None else ds.select(range(min(n, len(ds))))


@dataclass(frozen=True)
class Task:
    """What the trainer needs of a task: prompts and a reward on decoded text."""

    name: str
    train: Dataset
    test: Dataset
    reward_fn: object  # (completion: str, answer: int, finished: bool) -> float
    chat: bool = False  # wrap prompts in the tokenizer's chat template (instruct models)
    features: object = None  # optional (completion: str) -> dict[str, float], tracked for right and wrong answers


TaskName = Literal["sum3", "words", "gsm8k"]
TASKS: tuple[str, ...] = get_args(TaskName)
"""The tasks by name: the one list the trainer, the command line's choices and the docs read."""
CHAT_TASKS = ("words", "gsm8k")
"""Tasks whose prompts go through the tokenizer's chat template (they need an instruct model)."""
N_TEST = 1024
"""Held-out prompts ``get_task`` builds by default (what a training run evaluates on at most)."""


def check_data_dir(task: str, data_dir: object) -> None:
    """``data_dir`` (GSM8K's files) is read by task gsm8k only: with another task it would change nothing."""
    if data_dir is None:
        return
    if not isinstance(data_dir, str) or not data_dir:
        raise ValueError(f"data_dir must be a folder (a path), got {type(data_dir).__name__} {data_dir!r}")
    if task != "gsm8k":
        raise ValueError(
            f"data_dir (--data-dir) is read only by task gsm8k, got task {task!r}; give task gsm8k (--task gsm8k) "
            "or no data_dir"
        )


def get_task(
    name: str = "sum3", seed: int = 0, n_train: int = 4096, n_test: int = N_TEST, data_dir: str | None = None
) -> Task:
    """The named task: ``sum3`` (the lab's), ``words`` (GSM8K-shaped, offline) or ``gsm8k`` (from the hub, or
    from ``data_dir``, a folder with GSM8K's ``train.jsonl`` and ``test.jsonl``)."""
    check_choice("task", name, TASKS)
    check_data_dir(name, data_dir)
    if name == "sum3":
        return Task(
            "sum3",
            sum3_dataset("train", n_train, seed),
            sum3_dataset("test", n_test, seed),
            sum3_reward,
            features=sum3_features,
        )
    if name == "words":
        return Task(
            "words",
            synthetic_word_problems(n_train, seed),
            synthetic_word_problems(n_test, seed + 1),
            gsm8k_reward,
            chat=True,  # one of CHAT_TASKS
        )
    train, test = gsm8k_dataset("train", n_train, data_dir), gsm8k_dataset("test", n_test, data_dir)
    return Task("gsm8k", train, test, gsm8k_reward, chat=True)  # one of CHAT_TASKS
