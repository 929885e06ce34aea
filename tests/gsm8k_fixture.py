"""A small Hugging Face chat model and a local GSM8K, built offline (fixtures for the integration tier; a test
module takes them as ``tiny_qwen_chat_dir = gsm8k_fixture.tiny_qwen_chat_dir``).

- ``tiny_qwen_chat_dir``: a randomly initialised ``Qwen2ForCausalLM`` (Qwen2.5-0.5B-Instruct's architecture at
  toy sizes: hidden 32, 2 layers, 4 heads, 2 key-value heads, tied embeddings) with a *real* byte-level BPE
  tokenizer trained here with the ``tokenizers`` library (Qwen2's pre-tokenizer split, its special tokens
  ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``) and a chat template of Qwen2.5's shape; eos is
  ``<|im_end|>``, pad ``<|endoftext|>``. Saved with ``save_pretrained``, so it loads as a downloaded model does.
- ``gsm8k_dir``: a folder with ``train.jsonl`` (32 problems) and ``test.jsonl`` (8), made-up problems in GSM8K's
  own format: one JSON object per line, "question" and "answer", the answer ending ``#### <integer>``.

Both are session-scoped and written under pytest's temporary folder; nothing is downloaded.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Qwen2's special tokens, in its order (ids 0, 1, 2 here; 151643, 151644, 151645 in Qwen2.5)."""
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""Qwen2's pre-tokenizer pattern (its tokenizer.json): words, single digits, punctuation runs, whitespace."""
DEFAULT_SYSTEM = "You are a helpful assistant."
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message['role'] == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen2.5-Instruct's template without tools: a default system turn, then <|im_start|>role\\n...<|im_end|>\\n."""
NAMES = ("Ada", "Ben", "Chen", "Dana", "Eli", "Fatima")
THINGS = ("apples", "books", "coins", "stickers")


def gsm8k_problem(rng: random.Random) -> dict:
    """A made-up problem in GSM8K's format: a two-step question, a worked solution ending '#### <answer>'."""
    who, what = rng.choice(NAMES), rng.choice(THINGS)
    a, b, c = rng.randint(2, 60), rng.randint(2, 60), rng.randint(2, 9)
    question = f"{who} has {a} {what} and buys {b} more. Then {who} gets {c} times as many. How many {what} now?"
    answer = f"{who} has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {what}.\nThen {a + b} * {c} = {(a + b) * c}.\n"
    return {"question": question, "answer": answer + f"#### {(a + b) * c}"}


def build_tiny_qwen_chat(folder: Path, corpus: list[str], seed: int = 0) -> Path:
    """Train the BPE tokenizer on ``corpus``, build the random Qwen2 model, save both into ``folder``."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte: any text encodes, none is unknown
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.pad_token_id,  # Qwen2.5: bos is <|endoftext|> (never prepended)
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_gsm8k(folder: Path, n_train: int = 32, n_test: int = 8, seed: int = 0) -> Path:
    """``folder/train.jsonl`` and ``folder/test.jsonl``: made-up problems, one JSON object per line."""
    rng = random.Random(f"gsm8k-fixture-{seed}")
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        rows = [gsm8k_problem(rng) for _ in range(n)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture(scope="session")
def gsm8k_dir(tmp_path_factory) -> Path:
    return write_gsm8k(tmp_path_factory.mktemp("gsm8k"))


@pytest.fixture(scope="session")
def tiny_qwen_chat_dir(tmp_path_factory, gsm8k_dir) -> Path:
    """The tiny Qwen2 chat model; its tokenizer learnt from problems like ``gsm8k_dir``'s and the chat turns."""
    rng = random.Random("gsm8k-fixture-corpus")
    problems = [gsm8k_problem(rng) for _ in range(200)]
    corpus = [p["question"] + "\n" + p["answer"] for p in problems]
    corpus += [CHAT_TEMPLATE, "system\nuser\nassistant\n" + DEFAULT_SYSTEM]
    corpus += ["Solve the problem. Think step by step, then give the final answer after '####'."]
    return build_tiny_qwen_chat(tmp_path_factory.mktemp("tiny-qwen2-chat"), corpus)
