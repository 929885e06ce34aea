"""Tests for ``grpo_lab.lab.tasks``: the ``sum3`` task (prompts, completions, reward, formats, splits),
the GSM8K-style reward and the offline word problems, and ``get_task``.

Expected values come from the task's definition in the module docstring, worked out by hand
(e.g. 07+85+29: 07+85 = 92, 92+29 = 121), never from running the code under test.
"""

from __future__ import annotations

import re

import pytest
import torch

from grpo_lab.lab.tasks import (
    FORMATS,
    MAX_FILLER,
    SUM3_CHARS,
    get_task,
    gsm8k_reward,
    last_number,
    longest_sum3_answer,
    sum3_completion,
    sum3_dataset,
    sum3_format,
    sum3_prompt,
    sum3_reward,
    sum3_sft_examples,
    synthetic_word_problems,
)

# --------------------------------------------------------------------------------------------
# sum3: prompts and the reference completions
# --------------------------------------------------------------------------------------------


def test_sum3_prompt_zero_pads_each_operand_to_two_digits():
    assert sum3_prompt(7, 85, 29) == "07+85+29="
    assert sum3_prompt(0, 0, 0) == "00+00+00="
    assert sum3_prompt(99, 9, 10) == "99+09+10="


@pytest.mark.parametrize("args, name", [((100, 0, 0), "a"), ((0, -1, 0), "b"), ((0, 0, 100), "c")])
def test_sum3_prompt_rejects_operands_outside_0_99_naming_the_operand(args, name):
    with pytest.raises(ValueError, match=rf"^{name} must be in \[0, 99\]"):
        sum3_prompt(*args)


@pytest.mark.parametrize(
    "operands, fmt, filler, expected",
    [
        ((7, 85, 29), "direct", 0, "121"),
        ((7, 85, 29), "short", 0, "92,121"),
        ((7, 85, 29), "verbose", 0, "07+85=92,92+29=121"),
        ((7, 85, 29), "direct", 3, "...121"),
        ((7, 85, 29), "verbose", 2, "..07+85=92,92+29=121"),
        ((0, 0, 0), "verbose", 0, "00+00=0,0+00=0"),
        ((5, 3, 1), "short", 1, ".8,9"),
        ((99, 99, 99), "short", MAX_FILLER, "........198,297"),
        ((99, 99, 99), "verbose", 0, "99+99=198,198+99=297"),
    ],
)
def test_sum3_completion_matches_hand_written_strings(operands, fmt, filler, expected):
    assert sum3_completion(*operands, fmt, filler) == expected


@pytest.mark.parametrize("operands", [(7, 85, 29), (0, 0, 0), (99, 99, 99), (50, 49, 1), (10, 0, 90)])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("filler", [0, 1, MAX_FILLER])
def test_every_reference_completion_earns_reward_1_and_is_classified_as_its_format(operands, fmt, filler):
    text = sum3_completion(*operands, fmt, filler)
    assert set(text) <= set(SUM3_CHARS)
    assert sum3_reward(text, sum(operands)) == 1.0
    assert sum3_format(text) == fmt


def test_sum3_completion_rejects_unknown_format_and_filler_out_of_range():
    with pytest.raises(ValueError, match="fmt"):
        sum3_completion(1, 2, 3, "chatty")
    with pytest.raises(ValueError, match="filler"):
        sum3_completion(1, 2, 3, "direct", MAX_FILLER + 1)
    with pytest.raises(ValueError, match="filler"):
        sum3_completion(1, 2, 3, "direct", -1)


def test_long_filler_completions_are_allowed_up_to_their_own_limit():
    assert sum3_completion(7, 85, 29, "direct", 64, max_filler=64) == "." * 64 + "121"
    with pytest.raises(ValueError, match=r"filler must be in \[0, 64\], got 65"):
        sum3_completion(7, 85, 29, "direct", 65, max_filler=64)


def test_longest_answer_counts_filler_the_longest_verbose_body_and_eos():
    # By hand: "99+99=198,198+99=297" is 20 characters, one token each, and EOS is one more.
    assert longest_sum3_answer(0) == 21
    assert longest_sum3_answer(8) == 29
    assert longest_sum3_answer(64) == 85


def test_long_sft_examples_spread_filler_over_the_whole_range():
    fillers = [len(c) - len(c.lstrip(".")) for _, c in sum3_sft_examples(2000, seed=0, max_filler=64)]
    assert min(fillers) == 0 and max(fillers) == 64
    assert 28 < sum(fillers) / len(fillers) < 36  # uniform on 0..64 has mean 32
    assert sum3_sft_examples(50, seed=3) == sum3_sft_examples(50, seed=3, max_filler=MAX_FILLER)


# --------------------------------------------------------------------------------------------
# sum3_reward on fixed completions (answer 121 = 07+85+29)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion",
    [
        "121",
        "92,121",
        "07+85=92,92+29=121",
        ".121",
        "........121",
        "...92,121",
        "........07+85=92,92+29=121",
    ],
)
def test_sum3_reward_is_1_for_the_right_answer_in_every_format_with_and_without_filler(completion):
    assert sum3_reward(completion, 121) == 1.0
    assert sum3_reward(completion, 121, finished=True) == 1.0


@pytest.mark.parametrize(
    "completion",
    [
        "120",  # wrong sum
        "92,122",
        "07+85=92,92+29=122",
        "...120",
        "",  # empty
        "...",  # filler only, no number
        "+=,",  # no digits at all
        "121,",  # trailing garbage after the answer
        "121.",
        "121+",
        "121=",
        "121,92",  # the right number, but not the last one
        "07+85=121,121+29=150",
        "1210",  # the right digits inside a bigger number
    ],
)
def test_sum3_reward_is_0_for_wrong_empty_malformed_or_misplaced_answers(completion):
    assert sum3_reward(completion, 121) == 0.0


@pytest.mark.parametrize("completion", ["121", "92,121", "07+85=92,92+29=121", "....121"])
def test_sum3_reward_is_0_for_a_truncated_completion_even_when_the_answer_is_right(completion):
    assert sum3_reward(completion, 121, finished=False) == 0.0


def test_last_number_returns_the_last_integer_or_none():
    assert last_number("07+85=92,92+29=121") == 121
    assert last_number("a1b22c") == 22
    assert last_number("x -3") == -3
    assert last_number("...") is None
    assert last_number("") is None


# --------------------------------------------------------------------------------------------
# sum3_format
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, fmt",
    [
        ("121", "direct"),
        ("....121", "direct"),
        ("7", "direct"),
        ("92,121", "short"),
        ("..92,121", "short"),
        ("07+85=92,92+29=121", "verbose"),
        ("........07+85=92,92+29=121", "verbose"),
        ("", "other"),
        ("...", "other"),
        ("121,", "other"),
        ("92,121,5", "other"),
        ("07+85=92", "other"),  # half a verbose answer
        ("07+85=92,92+29=", "other"),
        ("1.21", "other"),  # dots after the first digit are not filler
        ("121...", "other"),
    ],
)
def test_sum3_format_classifies_completions_ignoring_leading_filler(completion, fmt):
    assert sum3_format(completion) == fmt


# --------------------------------------------------------------------------------------------
# sum3_dataset: columns, answers, determinism, disjoint splits
# --------------------------------------------------------------------------------------------


def _operand_set(ds):
    return {tuple(o) for o in ds["operands"]}


def test_sum3_dataset_rows_are_consistent_prompt_answer_and_operands():
    ds = sum3_dataset("train", n=200, seed=0)
    assert len(ds) == 200
    assert set(ds.column_names) == {"prompt", "answer", "operands"}
    for prompt, answer, ops in zip(ds["prompt"], ds["answer"], ds["operands"]):
        m = re.fullmatch(r"(\d\d)\+(\d\d)\+(\d\d)=", prompt)
        assert m is not None, prompt
        a, b, c = (int(x) for x in m.groups())
        assert [a, b, c] == list(ops)
        assert all(0 <= v <= 99 for v in ops)
        assert answer == a + b + c


def test_sum3_dataset_is_deterministic_for_a_seed():
    assert sum3_dataset("train", 64, seed=5).to_dict() == sum3_dataset("train", 64, seed=5).to_dict()
    assert sum3_dataset("test", 64, seed=5).to_dict() == sum3_dataset("test", 64, seed=5).to_dict()
    assert sum3_dataset("train", 64, seed=5)["prompt"] != sum3_dataset("train", 64, seed=6)["prompt"]


def test_sum3_train_and_test_splits_share_no_operand_triple():
    train = _operand_set(sum3_dataset("train", 4096, seed=0))
    test = _operand_set(sum3_dataset("test", 512, seed=0))
    assert len(test) > 100 and len(train) > 1000
    assert train.isdisjoint(test)


def test_sum3_test_split_is_disjoint_from_the_train_split_of_another_seed():
    assert _operand_set(sum3_dataset("train", 2048, seed=1)).isdisjoint(_operand_set(sum3_dataset("test", 256, seed=0)))


def test_sum3_dataset_rejects_bad_split_and_size():
    with pytest.raises(ValueError, match="split"):
        sum3_dataset("validation", 4)
    with pytest.raises(ValueError, match="n must be"):
        sum3_dataset("train", 0)


# --------------------------------------------------------------------------------------------
# GSM8K-style reward and the offline word problems
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("Ada has 6 boxes of 7. 6 * 7 = 42. #### 42", 42, 1.0),
        ("6 * 7 = 42. #### 42", 41, 0.0),
        ("First 40, then 2 more. #### 42", 42, 1.0),
        ("#### 40 ... wait, #### 42", 42, 1.0),  # the last '####' counts
        ("#### 1,234", 1234, 1.0),  # thousands separator
        ("The total is 1,234", 1234, 1.0),  # no '####': the last number
        ("So the answer is 42", 42, 1.0),
        ("#### -5", -5, 1.0),
        ("no number here", 42, 0.0),
        ("####", 42, 0.0),
        ("", 0, 0.0),
    ],
)
def test_gsm8k_reward_reads_the_number_after_the_last_marker_else_the_last_number(completion, answer, expected):
    assert gsm8k_reward(completion, answer) == expected


def test_gsm8k_reward_takes_the_number_right_after_the_marker_not_a_later_one():
    # The docstring: "the number after the last '####'". Text after the answer must not replace it.
    assert gsm8k_reward("#### 42 (6 boxes of 7)", 42) == 1.0


def test_gsm8k_reward_is_0_when_not_finished():
    assert gsm8k_reward("#### 42", 42, finished=False) == 0.0


_WORDS = re.compile(
    r"(\w+) has (\d+) (\w+) and finds (\d+) more\. Then \1 gets (\d+) times that many in all\. "
    r"How many \3 does \1 have\?"
)


def test_synthetic_word_problem_answers_follow_the_stated_arithmetic():
    ds = synthetic_word_problems(n=100, seed=0)
    assert len(ds) == 100
    assert set(ds.column_names) == {"prompt", "answer"}
    for prompt, answer in zip(ds["prompt"], ds["answer"]):
        m = _WORDS.fullmatch(prompt)
        assert m is not None, prompt
        a, b, c = int(m.group(2)), int(m.group(4)), int(m.group(5))
        assert answer == (a + b) * c
        assert gsm8k_reward(f"{a}+{b}={a + b}, times {c}. #### {answer}", answer) == 1.0


def test_synthetic_word_problems_are_deterministic_for_a_seed():
    assert synthetic_word_problems(20, seed=3).to_dict() == synthetic_word_problems(20, seed=3).to_dict()


# --------------------------------------------------------------------------------------------
# get_task
# --------------------------------------------------------------------------------------------


def test_get_task_sum3_has_the_requested_splits_and_the_sum3_reward():
    task = get_task("sum3", n_train=32, n_test=8)
    assert task.name == "sum3"
    assert (len(task.train), len(task.test)) == (32, 8)
    assert task.reward_fn is sum3_reward
    assert task.chat is False
    assert _operand_set(task.train).isdisjoint(_operand_set(task.test))


def test_get_task_words_is_a_chat_task_graded_like_gsm8k():
    task = get_task("words", n_train=16, n_test=4)
    assert task.chat is True
    assert task.reward_fn is gsm8k_reward
    assert (len(task.train), len(task.test)) == (16, 4)


def test_get_task_with_an_unknown_name_raises_listing_the_valid_names():
    with pytest.raises(ValueError) as err:
        get_task("sum4")
    message = str(err.value)
    for name in ("sum3", "words", "gsm8k", "sum4"):
        assert name in message


# --------------------------------------------------------------------------------------------
# Exact graders: the whole final number, ASCII digits only, types checked
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("#### 5.5", 5, 0.0),  # not 5: the decimals are part of the number
        ("#### 5/2", 5, 0.0),  # not 5: a fraction
        ("#### 5.5", 5.5, 1.0),
        ("#### 11/2", 5.5, 1.0),  # 11/2 = 5.5 exactly
        ("#### 10/2", 5, 1.0),
        ("#### 5.0", 5, 1.0),
        ("#### 5/0", 5, 0.0),  # no value
        ("#### 1,234,567", 1234567, 1.0),
        ("#### 1,234.50", 1234.5, 1.0),
        ("#### $1,000", 1000, 1.0),
        ("#### -1,234", -1234, 1.0),
        ("#### -5", 5, 0.0),  # the sign counts
        ("#### +5", 5, 1.0),
        ("#### 5.", 5, 1.0),  # a full stop after the answer is not a decimal point
        ("The answer is 2.5", 2, 0.0),  # no marker: the whole last number
        ("The answer is 3,4,5", 5, 1.0),  # a list, not a thousands separator: 5 is the last number
        ("#### ٥", 5, 0.0),  # Arabic-Indic five: not an ASCII digit
        ("#### ５", 5, 0.0),  # full-width five
        ("#### 5²", 5, 0.0),  # 5 squared is not 5
        ("#### 5²", 25, 0.0),  # nor read as 25: ASCII digits only
    ],
)
def test_gsm8k_reward_reads_the_whole_final_number_and_compares_exactly(completion, answer, expected):
    assert gsm8k_reward(completion, answer) == expected


def test_gsm8k_reward_gives_0_to_an_absurdly_long_number_without_an_error():
    assert gsm8k_reward("#### " + "1" * 5000, 5) == 0.0
    assert gsm8k_reward("so " + "9" * 5000, 5) == 0.0
    assert gsm8k_reward("#### " + "5" + "0" * 99, 5 * 10**99) == 1.0  # 100 digits: still read


@pytest.mark.parametrize("completion", ["121²", "12¹", "١٢١", "１２１", "1" * 5000, "07+85=92,92+29=" + "1" * 5000])
def test_sum3_reward_reads_ascii_digits_only_and_scores_absurd_numbers_0(completion):
    assert sum3_reward(completion, 121) == 0.0


def test_last_number_reads_ascii_digits_only_and_refuses_absurd_lengths():
    assert last_number("١٢١") is None
    assert last_number("7 then 121²") == 121  # the digits before the superscript
    assert last_number("1" * 5000) is None
    assert last_number("1" * 100) == int("1" * 100)


@pytest.mark.parametrize("reward", [sum3_reward, gsm8k_reward], ids=["sum3", "gsm8k"])
@pytest.mark.parametrize("answer", ["121", None, True, float("nan"), [121]], ids=repr)
def test_a_non_number_answer_is_a_clear_error_not_a_silent_0(reward, answer):
    with pytest.raises(ValueError, match=r"answer must be a number \(int\), got"):
        reward("121", answer)


def test_score_completions_refuses_a_reward_function_returning_none_naming_it():
    from grpo_lab.lab.tasks import score_completions

    def forgot_to_return(completion, answer, finished):
        completion == str(answer)  # noqa: B015  (the bug: no return)

    with pytest.raises(
        ValueError, match=r"reward_fn forgot_to_return must return a finite number, got None for completion 0"
    ):
        score_completions(forgot_to_return, ["121"], [121], [True])
    with pytest.raises(ValueError, match="got nan"):
        score_completions(lambda c, a, f: float("nan"), ["121"], [121], [True])
    with pytest.raises(ValueError, match="got '1'"):
        score_completions(lambda c, a, f: "1", ["1"], [1], [True])
    # a bool, a 0-d tensor: numbers in all but type, accepted
    assert score_completions(lambda c, a, f: c == str(a), ["1", "2"], [1, 1], [True, True]) == [1.0, 0.0]
    assert score_completions(lambda c, a, f: torch.tensor(0.5), ["1"], [1], [True]) == [0.5]


def test_gsm8k_offline_is_one_line_pointing_to_the_offline_task(monkeypatch):
    import datasets

    from grpo_lab.lab.tasks import get_task

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match="task 'gsm8k' needs the Hugging Face hub.*use task 'words'") as info:
        get_task("gsm8k")
    assert "\n" not in str(info.value)


def test_the_task_names_are_one_list_and_an_unknown_one_is_one_line():
    from grpo_lab.lab.tasks import CHAT_TASKS, N_TEST, TASKS

    assert TASKS == ("sum3", "words", "gsm8k")
    assert set(CHAT_TASKS) < set(TASKS)
    with pytest.raises(ValueError, match=r"^task must be one of 'sum3', 'words', 'gsm8k'; got 'sum4'$"):
        get_task("sum4")
    assert len(get_task("sum3").test) == N_TEST == 1024
    assert get_task("words", n_test=4).chat and not get_task("sum3", n_test=4).chat


# --------------------------------------------------------------------------------------------
# GSM8K's own files: the final answer after '####', a local folder of train.jsonl and test.jsonl
# --------------------------------------------------------------------------------------------


def test_gsm8k_answer_reads_the_integer_after_the_final_marker():
    from grpo_lab.lab.tasks import gsm8k_answer

    # GSM8K's first training problem (Natalia's clips): 48 in April, 48/2 = 24 in May, 48 + 24 = 72
    solution = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
    assert gsm8k_answer(solution) == 72
    assert gsm8k_answer("so #### 1,200\n") == 1200  # thousands separators, a trailing newline
    assert gsm8k_answer("#### 5 then #### -3") == -3  # the last marker
    for bad in ("the answer is 72", "#### 5.5", "#### 5 more", "#### 1,20", ""):
        with pytest.raises(ValueError, match=r"^the answer must end with '#### <integer>' \(GSM8K's format\), got"):
            gsm8k_answer(bad)


def test_a_local_gsm8k_folder_is_read_as_prompts_and_answers(tmp_path):
    import json

    rows = [{"question": "Ann has 2 apples and buys 3. How many?", "answer": "2+3=5\n#### 5"},
            {"question": "Ben has 10 and gives 4 away. How many?", "answer": "10-4=6\n#### 6"}]  # fmt: skip
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")  # a blank last line
    (tmp_path / "test.jsonl").write_text(json.dumps(rows[1]) + "\n")
    task = get_task("gsm8k", n_train=1, data_dir=str(tmp_path))
    assert task.chat and task.reward_fn is gsm8k_reward
    assert task.train["prompt"] == [rows[0]["question"]] and task.train["answer"] == [5]
    assert task.test["prompt"] == [rows[1]["question"]] and task.test["answer"] == [6]
    assert len(get_task("gsm8k", data_dir=str(tmp_path)).train) == 2


@pytest.mark.parametrize(
    "text, message",
    [
        ("", r"^GSM8K file .*train\.jsonl holds no problems; wanted one JSON object per line"),
        ('{"question": "q", "answer": "#### 1"}\n{"question": "q"', r"^.*train\.jsonl line 2: not JSON \("),
        ('["q", "#### 1"]', r"^.*train\.jsonl line 1: got list; wanted a JSON object with \"question\" and \"answer\""),
        ('\n{"question": " ", "answer": "#### 1"}', r"^.*train\.jsonl line 2: got \['answer', 'question'\]; wanted"),
        ('{"question": "q", "answer": "4"}', r"^.*train\.jsonl line 1: the answer must end with '#### <integer>'"),
    ],
)
def test_a_bad_gsm8k_file_is_one_line_naming_the_file_and_line(tmp_path, text, message):
    from grpo_lab.lab.tasks import gsm8k_rows

    (tmp_path / "train.jsonl").write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        gsm8k_rows(tmp_path / "train.jsonl")
    assert "\n" not in str(info.value)


def test_a_data_dir_is_for_task_gsm8k_only_and_must_be_a_folder(tmp_path):
    from grpo_lab.train.config import TrainConfig

    with pytest.raises(ValueError, match=r"^data_dir \(--data-dir\) is read only by task gsm8k, got task 'sum3'"):
        TrainConfig(data_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"^data_dir \(--data-dir\) is read only by task gsm8k, got task 'words'"):
        get_task("words", data_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"^data_dir .*nowhere is not a folder; wanted a folder holding GSM8K's"):
        get_task("gsm8k", data_dir=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"^GSM8K file .*train\.jsonl does not exist"):
        get_task("gsm8k", data_dir=str(tmp_path))
    assert TrainConfig(task="gsm8k", data_dir=str(tmp_path)).data_dir == str(tmp_path)  # read when the run starts
