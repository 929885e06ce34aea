"""The lab's task code written into a recipe, so an exported script runs without grpo_lab installed."""

from __future__ import annotations

import inspect
from importlib.resources import files

from ..core.checks import check_choice
from ..lab import tasks as t
from ..lab.tasks import TASKS

_NO_DATA_DIR = (
    "if data_dir:  # the other tasks make their prompts: a folder of files would change nothing\n"
    '        raise ValueError(f"--data-dir is read only by the gsm8k recipe, got {data_dir}")\n    '
)
ROWS = {
    "sum3": _NO_DATA_DIR
    + 'rows = [{"prompt": sum3_prompt(*t), "answer": sum(t)} for t in sum3_triples(split, n or 4096, 0)]',
    "words": _NO_DATA_DIR
    + (
        'ds = synthetic_word_problems(n or 4096, 0 if split == "train" else 1)\n'
        '    rows = [{"prompt": p, "answer": a} for p, a in zip(ds["prompt"], ds["answer"])]'
    ),
    "gsm8k": (
        "if data_dir:  # GSM8K's own files: train.jsonl and test.jsonl, one question and answer per line\n"
        '        rows = gsm8k_rows(os.path.join(data_dir, f"{split}.jsonl"))\n'
        "    else:\n"
        "        from datasets import load_dataset\n\n"
        '        ds = load_dataset("openai/gsm8k", "main", split=split)\n'
        '        rows = [{"prompt": r["question"], "answer": gsm8k_answer(r["answer"])} for r in ds]\n'
        "    rows = rows if n is None else rows[:n]"
    ),
}
"""The body of a recipe's row builder per task: ``rows``, a list of {"prompt", "answer"}. A bad ``data_dir`` raises
``ValueError`` with one line, which the script prints as its error."""


def task_source(task: str, with_data: bool = True) -> tuple[str, str]:
    """The lab's own code for ``task`` (from grpo_lab/lab/tasks.py: the reward, and the prompts when ``with_data``)
    and the reward's name."""
    check_choice("task", task, TASKS)
    reward = t.sum3_reward if task == "sum3" else t.gsm8k_reward
    data = {
        "sum3": [t.sum3_prompt, t.sum3_triples],
        "words": [t.synthetic_word_problems],
        "gsm8k": [t.gsm8k_answer, t.gsm8k_rows],
    }[task]
    graders = [t.last_number, t.check_answer] if task == "sum3" else [t.check_answer, t.read_number]
    funcs = graders + [reward] + (data if with_data else [])
    # What those functions read from the module: its imports and constants (json and os: the data templates').
    head = (
        "import math\nimport numbers\nfrom fractions import Fraction\n\n"
        f"MAX_ANSWER_DIGITS = {t.MAX_ANSWER_DIGITS!r}\n"
        f"INTEGER = re.compile({t.INTEGER.pattern!r})\n"
        f"FINAL_NUMBER = {t.FINAL_NUMBER!r}\n"
        f"AFTER_MARKER = re.compile({t.AFTER_MARKER.pattern!r})\n"
        f"ANY_NUMBER = re.compile({t.ANY_NUMBER.pattern!r})\n"
        f"SOLUTION_ANSWER = re.compile({t.SOLUTION_ANSWER.pattern!r})\n"
        f"GSM8K_SYSTEM = {t.GSM8K_SYSTEM!r}\n\n\n"
    )
    return head + "\n\n".join(inspect.getsource(f) for f in funcs), reward.__name__


def render(template: str, **values: object) -> str:
    """The file ``templates/<template>.in`` with each ``@name@`` replaced by ``str(values[name])``."""
    text = (files(__package__) / "templates" / f"{template}.in").read_text()
    for name, value in values.items():
        text = text.replace(f"@{name}@", str(value))
    left = sorted({w for w in text.split("@")[1::2] if w.isidentifier()})
    if left:
        raise ValueError(f"template {template} has placeholders without a value: {left}")
    return text
