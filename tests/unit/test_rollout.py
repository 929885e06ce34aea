"""Tests for ``grpo_lab.lab.rollout``: ``sample_group`` (group layout, EOS/mask/padding rules,
truncation, seeding, greedy decoding, input checks, left padding) and ``token_logps`` (the
sampling log-probs and entropies are what one full forward pass gives, at the sampling
temperature), plus ``Rollout.select``/``Rollout.cat``.

The reference for log-probs and argmax is an independent full forward pass of the model written
out in this file (positions from the attention mask), not the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from grpo_lab.lab.models import load_policy
from grpo_lab.lab.rollout import Rollout, encode_prompts, sample_group, token_logps

PROMPTS = ["07+85+29=", "1+2+3=", "99+9+0="]  # three different lengths: left padding matters


def full_forward_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask):
    """Logits ``[B, T, V]`` predicting each completion token, from one pass over prompt + completion."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    am = torch.cat([prompt_mask, completion_mask], dim=1)
    pos = (am.cumsum(dim=1) - 1).clamp_min(0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=am, position_ids=pos).logits.float()
    T = completion_ids.shape[1]
    return logits[:, -T - 1 : -1, :]


@pytest.fixture(scope="module")
def sampled(tiny_policy):
    """One sampled rollout: 3 prompts x G=3, 16 new tokens, seed 0, temperature 1."""
    model, tok = tiny_policy
    ids, mask = encode_prompts(tok, PROMPTS)
    gen = torch.Generator().manual_seed(0)
    return ids, mask, sample_group(model, tok, ids, mask, 3, 16, 1.0, gen)


def test_groups_are_consecutive_rows_that_share_their_prompt(sampled):
    ids, mask, ro = sampled
    G = 3
    assert ro.group_size == G
    assert ro.prompt_ids.shape == (len(PROMPTS) * G, ids.shape[1])
    for g in range(len(PROMPTS)):
        for i in range(g * G, g * G + G):
            assert torch.equal(ro.prompt_ids[i], ids[g])
            assert torch.equal(ro.prompt_mask[i], mask[g])


def test_mask_covers_tokens_up_to_and_including_the_first_eos_and_padding_follows(sampled, tiny_policy):
    _, tok = tiny_policy
    _, _, ro = sampled
    B, T = ro.completion_ids.shape
    assert T <= 16
    eos, pad = tok.eos_token_id, tok.pad_token_id
    for i in range(B):
        row = ro.completion_ids[i].tolist()
        if eos in row:
            e = row.index(eos)
            assert ro.completion_mask[i].tolist() == [1] * (e + 1) + [0] * (T - e - 1)
            assert row[e + 1 :] == [pad] * (T - e - 1)
            assert bool(ro.finished[i])
            length = e + 1
        else:
            assert ro.completion_mask[i].tolist() == [1] * T
            assert not bool(ro.finished[i])
            assert T == 16  # a row without EOS ran the whole budget
            length = T
        assert int(ro.lengths[i]) == length
        assert ro.texts[i] == tok.decode(row[:length], skip_special_tokens=True)
    assert torch.equal(ro.lengths, ro.completion_mask.sum(dim=1))
    assert ro.finished.any()  # the trained model does stop on these prompts


def test_max_new_tokens_1_marks_rows_without_eos_as_unfinished(tiny_policy):
    model, tok = tiny_policy
    ids, mask = encode_prompts(tok, PROMPTS)
    ro = sample_group(model, tok, ids, mask, 4, 1, 1.0, torch.Generator().manual_seed(1))
    assert ro.completion_ids.shape == (12, 1)
    assert ro.completion_mask.tolist() == [[1]] * 12
    assert ro.finished.tolist() == [t == tok.eos_token_id for t in ro.completion_ids[:, 0].tolist()]
    assert not ro.finished.all()


def test_same_generator_seed_gives_identical_samples(tiny_policy):
    model, tok = tiny_policy
    ids, mask = encode_prompts(tok, PROMPTS)
    a = sample_group(model, tok, ids, mask, 3, 12, 1.0, torch.Generator().manual_seed(7))
    b = sample_group(model, tok, ids, mask, 3, 12, 1.0, torch.Generator().manual_seed(7))
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.completion_mask, b.completion_mask)
    assert torch.equal(a.sample_logp, b.sample_logp)
    assert a.texts == b.texts


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sample_logp_equals_a_full_forward_pass_at_the_sampling_temperature(tiny_policy, temperature):
    model, tok = tiny_policy
    ids, mask = encode_prompts(tok, PROMPTS)
    ro = sample_group(model, tok, ids, mask, 3, 16, temperature, torch.Generator().manual_seed(3))
    m = ro.completion_mask.float()

    logits = (
        full_forward_logits(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask) / temperature
    )
    logprobs = torch.log_softmax(logits, dim=-1)
    want = logprobs.gather(2, ro.completion_ids.unsqueeze(2)).squeeze(2) * m
    p = logprobs.exp()
    want_ent = -(p * logprobs).sum(dim=-1) * m
    assert_close(ro.sample_logp, want, atol=1e-4, rtol=0)
    assert_close(ro.entropy, want_ent, atol=1e-4, rtol=0)

    with torch.no_grad():
        got, got_ent = token_logps(
            model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, temperature, with_entropy=True
        )
    assert_close(got, ro.sample_logp, atol=1e-4, rtol=0)
    assert_close(got_ent, ro.entropy, atol=1e-4, rtol=0)


def test_sample_logp_at_temperature_07_differs_from_the_temperature_1_log_probs(tiny_policy):
    model, tok = tiny_policy
    ids, mask = encode_prompts(tok, PROMPTS)
    ro = sample_group(model, tok, ids, mask, 2, 12, 0.7, torch.Generator().manual_seed(3))
    with torch.no_grad():
        at_1, _ = token_logps(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, 1.0)
    assert (ro.sample_logp - at_1).abs().max() > 1e-3


def test_token_logps_has_gradients_outside_no_grad_and_none_entropy_by_default(tiny_policy):
    model, tok = tiny_policy
    ids, mask = encode_prompts(tok, PROMPTS[:1])
    ro = sample_group(model, tok, ids, mask, 2, 8, 1.0, torch.Generator().manual_seed(0))
    logp, ent = token_logps(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    assert ent is None
    assert logp.requires_grad
    assert logp.shape == ro.completion_ids.shape


def test_sample_log_probs_and_entropies_are_in_range_and_zero_on_padding(sampled, tiny_policy):
    model, _ = tiny_policy
    _, _, ro = sampled
    pad = ro.completion_mask == 0
    assert (ro.sample_logp <= 0).all()
    assert (ro.entropy >= 0).all()
    assert (ro.entropy <= math.log(model.config.vocab_size) + 1e-5).all()
    assert (ro.sample_logp[pad] == 0).all()
    assert (ro.entropy[pad] == 0).all()


def test_greedy_is_deterministic_and_takes_the_argmax_at_every_step(tiny_policy):
    model, tok = tiny_policy
    ids, mask = encode_prompts(tok, PROMPTS)
    a = sample_group(model, tok, ids, mask, 2, 16, 1.0, torch.Generator().manual_seed(0), greedy=True)
    b = sample_group(model, tok, ids, mask, 2, 16, 1.0, torch.Generator().manual_seed(99), greedy=True)
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.completion_ids[0::2], a.completion_ids[1::2])  # both rows of a group agree

    logits = full_forward_logits(model, a.prompt_ids, a.prompt_mask, a.completion_ids, a.completion_mask)
    argmax = logits.argmax(dim=-1)
    real = a.completion_mask.bool()
    assert torch.equal(a.completion_ids[real], argmax[real])


def test_sample_group_restores_training_mode(tiny_policy):
    model, tok = tiny_policy
    ids, mask = encode_prompts(tok, PROMPTS[:1])
    model.train()
    try:
        sample_group(model, tok, ids, mask, 2, 4, 1.0, torch.Generator().manual_seed(0))
        assert model.training
    finally:
        model.eval()


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"group_size": 0}, "group_size"),
        ({"group_size": -2}, "group_size"),
        ({"group_size": 1.5}, "group_size"),
        ({"group_size": True}, "group_size"),
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
    ],
)
def test_sample_group_rejects_bad_arguments_naming_them(tiny_policy, kwargs, name):
    model, tok = tiny_policy
    ids, mask = encode_prompts(tok, PROMPTS[:1])
    args = {"group_size": 2, "max_new_tokens": 4, "temperature": 1.0} | kwargs
    with pytest.raises(ValueError, match=name):
        sample_group(model, tok, ids, mask, **args)


def test_sample_group_rejects_prompt_mask_of_another_shape(tiny_policy):
    model, tok = tiny_policy
    ids, mask = encode_prompts(tok, PROMPTS[:2])
    with pytest.raises(ValueError, match="prompt_mask"):
        sample_group(model, tok, ids, mask[:, 1:], 2, 4)


def _check_batch_equals_alone(model, tok, prompts, max_new_tokens):
    ids, mask = encode_prompts(tok, prompts)
    assert (mask == 0).any()  # the batch really is left-padded
    batch = sample_group(model, tok, ids, mask, 1, max_new_tokens, greedy=True)
    for i, p in enumerate(prompts):
        one_ids, one_mask = encode_prompts(tok, [p])
        alone = sample_group(model, tok, one_ids, one_mask, 1, max_new_tokens, greedy=True)
        n = int(alone.lengths[0])
        assert int(batch.lengths[i]) == n
        assert torch.equal(batch.completion_ids[i, :n], alone.completion_ids[0, :n])
        assert bool(batch.finished[i]) == bool(alone.finished[0])
        assert batch.texts[i] == alone.texts[0]
        assert_close(batch.sample_logp[i, :n], alone.sample_logp[0, :n], atol=1e-4, rtol=0)


def test_left_padded_prompts_decode_as_each_prompt_alone_tiny_llama(tiny_policy):
    model, tok = tiny_policy
    _check_batch_equals_alone(model, tok, PROMPTS + ["5+5="], 16)


def test_left_padded_prompts_decode_as_each_prompt_alone_tiny_qwen2(tiny_qwen_dir):
    model, tok = load_policy(str(tiny_qwen_dir), device="cpu")
    _check_batch_equals_alone(model, tok, ["ab", "hello9?", "xyz0123456"], 8)


# --------------------------------------------------------------------------------------------
# Rollout.select and Rollout.cat (DAPO's refill joins rollouts of different lengths)
# --------------------------------------------------------------------------------------------


def _toy_rollout(P, T, base, n=2, G=2):
    return Rollout(
        prompt_ids=torch.full((n, P), base, dtype=torch.long),
        prompt_mask=torch.ones(n, P, dtype=torch.long),
        completion_ids=torch.full((n, T), base + 1, dtype=torch.long),
        completion_mask=torch.ones(n, T, dtype=torch.long),
        sample_logp=torch.full((n, T), -0.5),
        entropy=torch.full((n, T), 0.25),
        finished=torch.tensor([True, False][:n]),
        group_size=G,
        texts=[f"t{base}{i}" for i in range(n)],
    )


def test_rollout_cat_left_pads_prompts_and_right_pads_completions():
    a, b = _toy_rollout(P=2, T=3, base=5), _toy_rollout(P=4, T=1, base=7)
    c = Rollout.cat([a, b], pad_token_id=0)
    assert c.prompt_ids.tolist() == [[0, 0, 5, 5]] * 2 + [[7, 7, 7, 7]] * 2
    assert c.prompt_mask.tolist() == [[0, 0, 1, 1]] * 2 + [[1, 1, 1, 1]] * 2
    assert c.completion_ids.tolist() == [[6, 6, 6]] * 2 + [[8, 0, 0]] * 2
    assert c.completion_mask.tolist() == [[1, 1, 1]] * 2 + [[1, 0, 0]] * 2
    assert c.sample_logp.tolist() == [[-0.5] * 3] * 2 + [[-0.5, 0.0, 0.0]] * 2
    assert c.entropy.tolist() == [[0.25] * 3] * 2 + [[0.25, 0.0, 0.0]] * 2
    assert c.lengths.tolist() == [3, 3, 1, 1]
    assert c.finished.tolist() == [True, False, True, False]
    assert c.texts == ["t50", "t51", "t70", "t71"]


def test_rollout_select_takes_rows_by_index_or_mask():
    r = _toy_rollout(P=2, T=3, base=5)
    by_mask = r.select(torch.tensor([False, True]))
    by_index = r.select(torch.tensor([1]))
    for s in (by_mask, by_index):
        assert s.completion_ids.shape == (1, 3)
        assert s.finished.tolist() == [False]
        assert s.texts == ["t51"]
