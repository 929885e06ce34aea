"""Policies: the lab's tiny Llama and its character tokenizer, or any causal LM by name.

The tiny model is a real ``LlamaForCausalLM`` (about 1M parameters) with a tokenizer built
with the ``tokenizers`` library and saved as a ``PreTrainedTokenizerFast``. Both load with
``from_pretrained`` from ``assets/tiny-sum3``, so the code that trains it also trains a
Hugging Face model by name on a GPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

ASSETS = Path(__file__).resolve().parent.parent / "assets"
TINY_MODEL_DIR = ASSETS / "tiny-sum3"
DEFAULT_MODEL = "tiny-sum3"


def build_char_tokenizer(chars: str):
    """A character-level ``PreTrainedTokenizerFast``: ``<pad>``, ``<bos>``, ``<eos>`` then ``chars``.

    Encoding adds ``<bos>`` in front, like Llama's tokenizers; decoding joins characters with no
    spaces.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if len(set(chars)) != len(chars):
        raise ValueError(f"chars must not repeat characters, got {chars!r}")
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2}
    for c in chars:
        vocab[c] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", padding_side="left"
    )


def tiny_llama_config(
    vocab_size: int, hidden: int = 128, layers: int = 4, heads: int = 4, ffn: int = 512, max_positions: int = 64
):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )


def pick_device(device: str | None = None) -> torch.device:
    """``device`` if given, else CUDA when there is one, else CPU."""
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_model_path(name_or_path: str) -> str:
    """``"tiny-sum3"`` means the shipped model; anything else goes to ``from_pretrained`` as is."""
    if name_or_path == DEFAULT_MODEL:
        if not (TINY_MODEL_DIR / "config.json").exists():
            raise ValueError(
                f"model {name_or_path!r} is not built yet: {TINY_MODEL_DIR} has no config.json; "
                "run `python -m grpo_lab pretrain`"
            )
        return str(TINY_MODEL_DIR)
    return name_or_path


def load_policy(name_or_path: str = DEFAULT_MODEL, device: str | None = None, dtype: torch.dtype | None = None):
    """Load ``(model, tokenizer)`` with ``from_pretrained``: the shipped tiny model, a local
    folder, or a Hugging Face model name (which needs the hub or a local cache).

    On CUDA the default dtype is bf16, on the CPU float32. The tokenizer pads on the left, so a
    batch of prompts ends where generation starts.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path)
    dev = pick_device(device)
    if dtype is None:
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    from transformers.utils import logging as hf_logging

    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # A 1M-parameter model loads in milliseconds: its progress bar would only clutter a notebook.
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(dev)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def set_threads(n: int | None = None) -> None:
    """Use every core of a small CPU (torch may default to fewer), unless the user set OMP_NUM_THREADS."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(n or os.cpu_count() or 1)
