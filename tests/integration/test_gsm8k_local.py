"""Task gsm8k offline: a small Hugging Face chat model (Qwen2's architecture, a real byte-level BPE tokenizer, a
chat template) trained and evaluated on a local folder of GSM8K's own files, and the exported TRL and verl recipes
reading the same files; a bad file is one line naming the file and line, exit status 2.

The model and the files are built here (``gsm8k_fixture``): nothing comes from the hub.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gsm8k_fixture
import pytest

from grpo_lab.cli.main import main
from grpo_lab.scale.export import export_recipe

tiny_qwen_chat_dir = gsm8k_fixture.tiny_qwen_chat_dir  # the fixtures
gsm8k_dir = gsm8k_fixture.gsm8k_dir
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
SMALL = ["--steps", "2", "--prompts", "2", "--group-size", "2", "--max-new-tokens", "8", "--n-eval", "4", "--quiet"]


def call(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


def questions(folder: Path, split: str) -> list[str]:
    return [json.loads(line)["question"] for line in (folder / f"{split}.jsonl").read_text().splitlines()]


def one_error_line(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert ": error: " in lines[0], lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_the_fixture_is_a_qwen2_chat_model_with_a_byte_level_bpe_tokenizer(tiny_qwen_chat_dir):
    from tokenizers.models import BPE

    from grpo_lab.lab.models import load_policy

    model, tok = load_policy(str(tiny_qwen_chat_dir), device="cpu")
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.num_key_value_heads == 2
    assert isinstance(tok.backend_tokenizer.model, BPE)
    assert (tok.eos_token, tok.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    # Qwen2's pre-tokenizer: one token per digit; byte-level: a space is "Ġ", and any text encodes (no unknown)
    assert tok.tokenize(" 305") == ["Ġ", "3", "0", "5"]
    assert tok.decode(tok("Zoë paid $7½.")["input_ids"]) == "Zoë paid $7½."
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_train_and_eval_on_a_local_gsm8k_folder_through_the_command_line(
    tiny_qwen_chat_dir, gsm8k_dir, tmp_path, monkeypatch, capsys
):
    import grpo_lab.train.trainer as trainer_mod

    seen = []
    real = trainer_mod.sample_group

    def recording(model, tokenizer, ids, mask, *args, **kwargs):
        seen.append([row[m.bool()].tolist() for row, m in zip(ids, mask)])  # each prompt without its left padding
        return real(model, tokenizer, ids, mask, *args, **kwargs)

    monkeypatch.setattr(trainer_mod, "sample_group", recording)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    model, data = str(tiny_qwen_chat_dir), str(gsm8k_dir)
    out = tmp_path / "run.json"
    argv = ["train", "--model", model, "--task", "gsm8k", "--data-dir", data, "--json", str(out)]
    assert call(argv + SMALL) == 0, capsys.readouterr().err
    summary = json.loads(out.read_text())
    assert summary["steps"] == 2 and len(summary["history"]) == 2
    assert summary["before"]["n"] == summary["after"]["n"] == 4
    assert summary["config"]["data_dir"] == data

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    prompts = [p for step in seen for p in step]
    assert len(seen) == 2 and len(prompts) == 2 * 2  # 2 steps x 2 prompts
    train_questions = questions(gsm8k_dir, "train")
    for ids in prompts:
        assert ids[0] == im_start  # the chat template was applied
        text = tok.decode(ids)
        assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>assistant\n")
        assert text.split("<|im_start|>user\n")[1].removesuffix("<|im_end|>\n<|im_start|>assistant\n") in (
            train_questions
        )

    result = tmp_path / "eval.json"
    argv = ["eval", "--model", model, "--task", "gsm8k", "--data-dir", data, "--n", "4", "--samples", "2"]
    assert call(argv + ["--max-new-tokens", "8", "--json", str(result)]) == 0, capsys.readouterr().err
    measured = json.loads(result.read_text())
    assert measured["n"] == 4 and 0 <= measured["greedy_accuracy"] <= 1


def test_a_bad_gsm8k_folder_or_file_is_one_line_naming_it_and_exit_2(tiny_qwen_chat_dir, gsm8k_dir, tmp_path, capsys):
    good = (gsm8k_dir / "train.jsonl").read_text().splitlines()
    cases = {
        "missing": (None, "data_dir", "is not a folder"),
        "no_test": ({"train.jsonl": "\n".join(good)}, "test.jsonl does not exist"),
        "empty": ({"train.jsonl": "\n\n", "test.jsonl": good[0]}, "train.jsonl holds no problems"),
        "no_marker": (
            {"train.jsonl": "\n".join([good[0], json.dumps({"question": "How many?", "answer": "It is 5."})])},
            "train.jsonl line 2: the answer must end with '#### <integer>'",
        ),
        "not_json": ({"train.jsonl": good[0] + "\n" + good[1][:-1]}, "train.jsonl line 2: not JSON"),
        "no_question": ({"train.jsonl": json.dumps({"answer": "#### 4"})}, "train.jsonl line 1: got ['answer']"),
    }
    for name, (files, *needles) in cases.items():
        folder = tmp_path / name
        if files is not None:
            folder.mkdir()
            for f, text in files.items():
                (folder / f).write_text(text)
        argv = ["train", "--model", str(tiny_qwen_chat_dir), "--task", "gsm8k", "--data-dir", str(folder)]
        assert call(argv + SMALL) == 2, name
        line = one_error_line(capsys, *needles)
        assert str(folder) in line, line
        assert call(["export", "--engine", "trl", "--data-dir", str(folder), "--out", str(tmp_path / "r")]) == 2, name
        one_error_line(capsys, *needles)
        assert not (tmp_path / "r").exists()
    # a folder with another task would change nothing: refused, not ignored
    assert call(["train", "--data-dir", str(gsm8k_dir)] + SMALL) == 2
    one_error_line(capsys, "--data-dir is read only by --task gsm8k, got no --task")
    assert call(["eval", "--task", "words", "--data-dir", str(gsm8k_dir)]) == 2
    one_error_line(capsys, "--data-dir is read only by --task gsm8k, got --task words")
    out = str(tmp_path / "w")
    assert call(["export", "--engine", "trl", "--task", "words", "--data-dir", str(gsm8k_dir), "--out", out]) == 2
    one_error_line(capsys, "data_dir (--data-dir) is read only by task gsm8k, got task 'words'")


def test_the_exported_recipes_read_the_local_gsm8k_folder_and_the_trl_smoke_runs_offline(
    tiny_qwen_chat_dir, gsm8k_dir, tmp_path
):
    model = str(tiny_qwen_chat_dir)
    export_recipe("grpo", "trl", model, "gsm8k", tmp_path / "trl", data_dir=str(gsm8k_dir))
    assert f"--data-dir {gsm8k_dir}" in (tmp_path / "trl" / "README.md").read_text()
    out = tmp_path / "run"
    # no --model and no --data-dir: the recipe's own defaults are the local model and folder
    cmd = [sys.executable, "train_grpo.py", "--smoke", "--output-dir", str(out)]
    proc = subprocess.run(cmd, cwd=tmp_path / "trl", env=OFFLINE, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resolved = json.loads((out / "resolved_config.json").read_text())
    assert resolved["global_step"] == 2 and resolved["reward_funcs"] == ["gsm8k_reward_trl"]
    import pandas as pd

    logged = pd.concat([pd.read_parquet(p) for p in sorted((out / "completions").glob("*.parquet"))])
    train_questions = questions(gsm8k_dir, "train")
    assert len(logged) == 2 * 16  # 2 steps x 4 completions per device x 4 micro-steps per generation
    for system, user in logged["prompt"]:  # TRL logs the messages it gave the chat template
        assert system["role"] == "system" and system["content"].startswith("Solve the problem.")
        assert user["role"] == "user" and user["content"] in train_questions

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.jsonl").write_text(json.dumps({"question": "How many?", "answer": "5"}) + "\n")
    cmd = [sys.executable, "train_grpo.py", "--smoke", "--data-dir", str(bad), "--output-dir", str(tmp_path / "x")]
    proc = subprocess.run(cmd, cwd=tmp_path / "trl", env=OFFLINE, capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0] == f"train_grpo.py: error: {bad}/train.jsonl line 1: the answer must end with '#### <integer>' " \
        "(GSM8K's format), got ...'5'"  # fmt: skip

    export_recipe("grpo", "verl", model, "gsm8k", tmp_path / "verl", data_dir=str(gsm8k_dir))
    cmd = [sys.executable, "prepare_data.py", "--out", "data/gsm8k"]
    proc = subprocess.run(cmd, cwd=tmp_path / "verl", env=OFFLINE, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = pd.read_parquet(tmp_path / "verl" / "data" / "gsm8k" / "train.parquet")
    first = json.loads((gsm8k_dir / "train.jsonl").read_text().splitlines()[0])
    assert len(rows) == 32 and rows.iloc[0]["prompt"][1]["content"] == first["question"]
    assert rows.iloc[0]["reward_model"]["ground_truth"] == first["answer"].split("####")[1].strip()


@pytest.mark.parametrize("task", ["sum3", "words"])
def test_an_exported_recipe_of_another_task_refuses_a_data_dir(task, tmp_path, gsm8k_dir):
    export_recipe("grpo", "verl", "m", task, tmp_path / "verl")
    cmd = [sys.executable, "prepare_data.py", "--data-dir", str(gsm8k_dir)]
    proc = subprocess.run(cmd, cwd=tmp_path / "verl", env=OFFLINE, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"prepare_data.py: error: --data-dir is read only by the gsm8k recipe, got {gsm8k_dir}"
    ]
