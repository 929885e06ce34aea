"""Shared fixtures for the lab-layer tests (tasks, models, rollout, trainer, command line).

- ``tiny_policy``: the shipped ``tiny-sum3`` model and tokenizer, loaded once per session. Tests
  that train must work on ``fresh_policy()`` (a deep copy), never on the shared model.
- ``small_task``: the ``sum3`` task with a small train split, so trainers start fast.
- ``tiny_qwen_dir``: a randomly initialised ``Qwen2ForCausalLM`` from a small config plus a
  character tokenizer *with a chat template*, saved with ``save_pretrained`` into a temporary
  folder. Loading it exercises the load-by-name path (``from_pretrained`` on a folder) offline.

Threads: the trainer's ``set_threads`` uses every core unless ``OMP_NUM_THREADS`` is set. On a
small shared machine that oversubscribes the CPU (a 4-row training step went from ~0.1 s to ~10 s
next to another busy process), so the tests run torch on one thread unless told otherwise.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# The fixture tokenizer's characters (id = 3 + index; 0, 1, 2 are <pad>, <bos>, <eos>). No space:
# transformers picks ``Qwen2Tokenizer`` for a folder whose config says qwen2, and its byte-level
# pre-tokenizer turns a space into a symbol this vocabulary does not have.
QWEN_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789?>"
QWEN_CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}>{% endif %}"


@pytest.fixture
def nan_policy_loss(monkeypatch):
    """The trainer's policy loss turned NaN, so every update is skipped (as an lr far too high does)."""
    import grpo_lab.train.trainer as trainer_mod

    real = trainer_mod.policy_loss

    def nan_loss(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return loss * float("nan"), stats

    monkeypatch.setattr(trainer_mod, "policy_loss", nan_loss)


@pytest.fixture(scope="session")
def tiny_policy():
    """``(model, tokenizer)`` of the shipped tiny model. Read-only: do not train it."""
    from grpo_lab.lab.models import load_policy

    model, tokenizer = load_policy("tiny-sum3", device="cpu")
    return model, tokenizer


@pytest.fixture
def fresh_policy(tiny_policy):
    """A function returning ``(deep copy of the tiny model, tokenizer)``, safe to train."""
    model, tokenizer = tiny_policy

    def make():
        return copy.deepcopy(model), tokenizer

    return make


@pytest.fixture(scope="session")
def small_task():
    from grpo_lab.lab.tasks import get_task

    return get_task("sum3", seed=0, n_train=256, n_test=16)


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory):
    """A folder holding a tiny random Qwen2ForCausalLM and a char tokenizer with a chat template."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from grpo_lab.lab.models import build_char_tokenizer

    tok = build_char_tokenizer(QWEN_CHARS)
    tok.chat_template = QWEN_CHAT_TEMPLATE
    cfg = Qwen2Config(
        vocab_size=3 + len(QWEN_CHARS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(1234)
    model = Qwen2ForCausalLM(cfg)
    path = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


TESTS = Path(__file__).resolve().parent
SLOW_TIERS = ("integration", "deploy")
"""Tests under these folders start processes, build environments or train through TRL: marked ``slow``,
so ``pytest tests/unit`` (or ``-m "not slow"``) is the fast tier; ``make test`` runs every tier."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(TESTS).parts
        if parts and parts[0] in SLOW_TIERS:
            item.add_marker(pytest.mark.slow)
