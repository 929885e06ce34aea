"""The rollout's speed paths give the numbers of the plain ones (``grpo_lab/lab/rollout.py``):

- ``token_logps`` in length buckets, each group's shared prompt run once (the default on the CPU),
  equals one forward pass over the padded batch (``bucket=False``): log-probs, entropies and the
  gradients they send to the weights;
- ``length_buckets`` puts every row in exactly one group, wide enough for it;
- ``sample_group`` (prompts run once per group, finished rows leaving the batch) decodes greedily
  exactly what ``transformers``' own ``model.generate`` decodes, on a batch whose rows finish at
  different steps, so the compaction happens many times.

References are independent: the plain padded forward pass and Hugging Face's ``generate``.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from grpo_lab.lab.rollout import encode_prompts, length_buckets, sample_group, token_logps
from grpo_lab.lab.tasks import sum3_dataset


@pytest.fixture(scope="module")
def spread_rollout(tiny_policy):
    """8 sum3 prompts x G=4 sampled at T=1.3, so completion lengths spread widely."""
    model, tok = tiny_policy
    prompts = list(sum3_dataset("train", 8, seed=3)["prompt"])
    ids, mask = encode_prompts(tok, prompts)
    ro = sample_group(model, tok, ids, mask, 4, 24, 1.3, torch.Generator().manual_seed(1))
    assert len(set(ro.lengths.tolist())) >= 4, ro.lengths  # the test needs varied lengths
    return ro


def test_bucketed_log_probs_entropies_and_gradients_equal_one_padded_pass(fresh_policy, spread_rollout):
    model, _ = fresh_policy()
    ro = spread_rollout
    widths = ro.lengths
    assert len(length_buckets(widths, ro.prompt_ids.shape[1], ro.completion_ids.shape[1], "cpu")) > 1
    results = []
    for bucket in (True, False):
        model.zero_grad(set_to_none=True)
        logp, ent = token_logps(
            model,
            ro.prompt_ids,
            ro.prompt_mask,
            ro.completion_ids,
            ro.completion_mask,
            1.3,
            with_entropy=True,
            bucket=bucket,
        )
        (logp.sum() + 0.5 * ent.sum()).backward()
        results.append((logp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()]))
    (lb, eb, gb), (lp, ep, gp) = results
    assert lb.shape == lp.shape == ro.completion_ids.shape
    assert_close(lb, lp, rtol=1e-5, atol=5e-5)  # float32 rounding of values up to ~10
    assert_close(eb, ep, rtol=1e-5, atol=5e-5)
    for a, b in zip(gb, gp):  # float rounding differs with the batch shape: compare at the tensor's scale
        assert float((a - b).norm()) <= 1e-5 * float(b.norm()) + 1e-8
    pad = ro.completion_mask == 0
    assert (lb[pad] == 0).all() and (eb[pad] == 0).all()


def test_length_buckets_partition_the_rows_and_fit_each_one():
    lengths = torch.tensor([3, 30, 1, 17, 17, 8, 30, 2, 25, 9, 9, 9, 31, 4])
    groups = length_buckets(lengths, 10, 32, "cpu")
    rows = torch.cat([idx for idx, _ in groups]).sort().values
    assert torch.equal(rows, torch.arange(len(lengths)))
    for idx, width in groups:
        assert int(lengths[idx].max()) <= width <= 32
    one = length_buckets(torch.tensor([5, 5, 5]), 10, 32, "cpu")  # equal lengths: one group, cut to 5
    assert len(one) == 1 and one[0][1] == 5
    if torch.cuda.is_available():
        ((idx, width),) = length_buckets(lengths.cuda(), 10, 32, "cuda")
        assert len(idx) == len(lengths) and width == 32


def test_greedy_sample_group_decodes_what_hugging_face_generate_decodes(tiny_policy):
    model, tok = tiny_policy
    prompts = list(sum3_dataset("train", 12, seed=5)["prompt"]) + ["1+2+3=", "99+9+0="]  # two shorter: left padding
    ids, mask = encode_prompts(tok, prompts)
    G, T = 2, 28
    ro = sample_group(model, tok, ids, mask, G, T, greedy=True)
    assert len(set(ro.lengths.tolist())) >= 3  # rows finish at different steps
    with torch.no_grad():
        out = model.generate(
            input_ids=ids.repeat_interleave(G, 0),
            attention_mask=mask.repeat_interleave(G, 0),
            do_sample=False,
            max_new_tokens=T,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    hf = out[:, ids.shape[1] :]
    for i in range(ro.completion_ids.shape[0]):
        n = int(ro.lengths[i])
        assert torch.equal(ro.completion_ids[i, :n], hf[i, :n]), i
        if n < hf.shape[1]:  # after EOS, generate pads too
            assert bool(ro.finished[i]) and int(hf[i, n - 1]) == tok.eos_token_id
