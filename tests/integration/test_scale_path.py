"""The path a GPU user takes, tested offline: ``--model PATH`` with any causal LM saved by
``save_pretrained`` and a tokenizer with a chat template, on the GSM8K-shaped ``words`` task.

The model is a randomly initialised ``LlamaForCausalLM`` from a small config (no hub): the point is
that the lab's code runs end to end on a model it did not build, through the chat template.
"""

from __future__ import annotations

import json
import string

import pytest
import torch

from grpo_lab.cli.main import main
from grpo_lab.lab.models import build_char_tokenizer, load_policy
from grpo_lab.lab.rollout import encode_prompts
from grpo_lab.lab.tasks import get_task

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def chat_model_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    chars = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")
    tok = build_char_tokenizer(chars)
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    path = tmp_path_factory.mktemp("chat-llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_the_chat_template_wraps_a_word_problem(chat_model_dir):
    model, tok = load_policy(str(chat_model_dir), device="cpu")
    task = get_task("words", n_train=4, n_test=4)
    ids, mask = encode_prompts(tok, [task.test[0]["prompt"]], chat=True, system="Be brief.")
    text = tok.decode(ids[0][mask[0].bool()])
    assert text.startswith("<|system|>Be brief.\n<|user|>") and text.endswith("<|assistant|>")
    assert task.test[0]["prompt"] in text


@pytest.mark.parametrize("algo", ["grpo", "ppo", "gspo"])
def test_train_runs_end_to_end_on_a_model_by_path(chat_model_dir, tmp_path, algo):
    out = tmp_path / "run.json"
    rc = main(
        [
            "train",
            "--algo",
            algo,
            "--model",
            str(chat_model_dir),
            "--task",
            "words",
            "--steps",
            "1",
            "--prompts",
            "2",
            "--group-size",
            "2",
            "--max-new-tokens",
            "8",
            "--n-eval",
            "4",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    s = json.loads(out.read_text())
    assert s["config"]["task"] == "words" and s["steps"] == 1
    assert 0.0 <= s["after"]["accuracy"] <= 1.0
    h = s["history"][0]
    assert h["updates"] >= 1 and h["skipped_updates"] == 0


def test_the_task_defaults_to_words_for_a_model_that_is_not_the_tiny_one(chat_model_dir, tmp_path):
    out = tmp_path / "run.json"
    assert (
        main(
            [
                "train",
                "--model",
                str(chat_model_dir),
                "--steps",
                "1",
                "--prompts",
                "2",
                "--group-size",
                "2",
                "--max-new-tokens",
                "4",
                "--n-eval",
                "2",
                "--json",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["config"]["task"] == "words"
