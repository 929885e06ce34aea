"""The self-checking exercises: every checker passes the reference solution and fails wrong ones.

The wrong implementations are the mistakes learners make (no std guard, population std, forgetting
the mask, leaving the sample in its own baseline, the wrong sign, forgetting the min, going forwards
in GAE, the wrong KL direction) plus the notebook's stub that returns None.
"""

from __future__ import annotations

import math
import re
import statistics

import pytest
import torch

from grpo_lab.exercises import EXERCISES, Result, check, solution


def _stub(*args, **kwargs):
    return None


def _weights_wrong(normaliser):
    """A token_weights implementation whose per-row normaliser is ``normaliser(L, B, max_len, aggregation)``."""

    def fn(lengths, advantages, aggregation, max_len):
        L = torch.tensor(lengths, dtype=torch.float64)
        A = torch.tensor(advantages, dtype=torch.float64)
        mask = (torch.arange(max_len).unsqueeze(0) < L.unsqueeze(1)).double()
        return (A / normaliser(L, len(lengths), max_len, aggregation)).unsqueeze(1) * mask

    return fn


def _right_norm(L, B, max_len, agg):
    return {
        "seq_mean_token_mean": B * L,
        "token_mean": L.sum().expand_as(L),
        "seq_mean_token_sum_norm": torch.full_like(L, B * max_len),
    }[agg]


def _dr_grpo_wrong(adv_fn, norm_fn):
    def fn(logp, old_logp, rewards, mask, group_size, max_len, eps=0.2):
        A = adv_fn(rewards.view(-1, group_size)).reshape(-1, 1)
        ratio = torch.exp(logp - old_logp)
        per_token = -torch.minimum(ratio * A, ratio.clamp(1 - eps, 1 + eps) * A)
        return norm_fn(per_token * mask, mask, max_len)

    return fn


def _centred(g):
    return g - g.mean(dim=1, keepdim=True)


def _overlong_wrong(kind):
    def fn(n, max_len, cache_len):
        n, start = n.double(), max_len - cache_len
        ramp = (start - n) / cache_len
        if kind == "no_cap":  # the ramp goes on below -1 past max_len
            return torch.where(n <= start, torch.zeros_like(n), ramp)
        if kind == "hard":  # no ramp: -1 as soon as the expected maximum is passed
            return torch.where(n <= start, torch.zeros_like(n), -torch.ones_like(n))
        if kind == "over_max_len":  # the ramp divided by max_len instead of cache_len
            return torch.where(
                n <= start, torch.zeros_like(n), torch.where(n <= max_len, (start - n) / max_len, -torch.ones_like(n))
            )
        return -torch.where(
            n <= start, torch.zeros_like(n), torch.where(n <= max_len, ramp, -torch.ones_like(n))
        )  # sign flipped

    return fn


WRONG = {
    "pass_at_k": [
        lambda n, c, k: c / n,  # pass@1 whatever k is
        lambda n, c, k: 1 - (1 - c / n) ** k,  # the biased estimator: draws with replacement
        lambda n, c, k: 1 - math.comb(c, k) / math.comb(n, k),  # right and wrong swapped
        lambda n, c, k: min(1.0, k * c / n),  # linear in k
    ],
    "standard_error": [
        lambda v: statistics.pstdev(v) / math.sqrt(len(v)),  # population std (n, not n - 1)
        lambda v: statistics.stdev(v),  # the std, not the error of the mean
        lambda v: statistics.stdev(v) / len(v),  # divided by n, not sqrt(n)
    ],
    "sum3_reward_fixed": [
        lambda c, a, f: float(c == a),  # the classic bug: a str never equals an int, the reward is flat 0
        lambda c, a, f: float(str(a) in c),  # the answer anywhere, even inside '1210' or truncated
        lambda c, a, f: float(int(c.split(",")[-1].lstrip(".")) == a),  # crashes on malformed text, ignores EOS
        lambda c, a, f: float(
            bool(re.findall(r"\d+", c)) and int(re.findall(r"\d+", c)[-1]) == a
        ),  # ignores truncation and trailing symbols
    ],
    "zero_std_share": [
        lambda r, g: float((r.view(-1, g).sum(1) == 0).float().mean()),  # counts all-wrong groups only
        lambda r, g: float(
            (r.view(-1, g) == r.view(-1, g)[:, :1]).all(1).float().repeat_interleave(g).sum()
        ),  # a count of samples, not a share
        lambda r, g: float(r.std() == 0),  # the whole batch, not each group
    ],
    "token_weights": [
        _weights_wrong(
            lambda L, B, T, agg: L if agg == "seq_mean_token_mean" else _right_norm(L, B, T, agg)
        ),  # GRPO without the 1/B
        _weights_wrong(
            lambda L, B, T, agg: torch.full_like(L, B * T) if agg == "token_mean" else _right_norm(L, B, T, agg)
        ),  # token mean counting padding
        _weights_wrong(
            lambda L, B, T, agg: (
                torch.full_like(L, B * float(L.max()))
                if agg == "seq_mean_token_sum_norm"
                else _right_norm(L, B, T, agg)
            )
        ),  # Dr. GRPO over the longest, not L_max
        lambda lengths, advantages, aggregation, max_len: (
            -_weights_wrong(_right_norm)(lengths, advantages, aggregation, max_len)
        ),  # the gradient, not the push
    ],
    "dr_grpo_loss": [
        _dr_grpo_wrong(
            lambda g: _centred(g) / (g.std(dim=1, keepdim=True) + 1e-4), lambda x, m, T: x.sum() / (m.shape[0] * T)
        ),  # divides by the std (GRPO)
        _dr_grpo_wrong(_centred, lambda x, m, T: x.sum() / m.sum()),  # token mean (DAPO)
        _dr_grpo_wrong(_centred, lambda x, m, T: (x.sum(1) / m.sum(1)).mean()),  # per-sequence mean (GRPO)
        _dr_grpo_wrong(
            _centred, lambda x, m, T: x.sum() / (m.shape[0] * m.sum(1).max())
        ),  # longest completion, not L_max
    ],
    "clip_higher_token_loss": [
        lambda r, a, lo, hi: -torch.minimum(r * a, r.clamp(1 - lo, 1 + lo) * a),  # symmetric: eps_high ignored
        lambda r, a, lo, hi: -torch.minimum(r * a, r.clamp(1 - hi, 1 + lo) * a),  # the two eps swapped
        lambda r, a, lo, hi: -r.clamp(1 - lo, 1 + hi) * a,  # clip without the min
    ],
    "soft_overlong_penalty": [
        _overlong_wrong("no_cap"),
        _overlong_wrong("hard"),
        _overlong_wrong("over_max_len"),
        _overlong_wrong("sign"),
    ],
    "group_advantages": [
        lambda r, g, use_std=True: (r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True)).flatten(),  # never divides
        lambda r, g, use_std=True: (
            (r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True)) / r.view(-1, g).std(1, keepdim=True)
        ).flatten(),  # NaN on zero std
        lambda r, g, use_std=True: (r - r.mean()) / (r.std() + 1e-4),  # batch, not group
        lambda r, g, use_std=True: (
            (r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True))
            / (r.view(-1, g).std(1, unbiased=False, keepdim=True) + 1e-4)
        ).flatten(),  # population std
    ],
    "masked_mean": [
        lambda x, m: (x * m).mean(),
        lambda x, m: x.mean(),
        lambda x, m: (x * m).sum(),
    ],
    "reinforce_loss": [
        lambda lp, r, b: ((r - b) * lp).mean(),  # wrong sign
        lambda lp, r, b: -(r * lp).mean(),  # ignores the baseline
        lambda lp, r, b: -((r - b) * lp).sum(),  # sum, not mean
    ],
    "rloo_advantages": [
        lambda r, g: (r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True)).flatten(),  # sample in its own baseline
        lambda r, g: r - r.mean(),
    ],
    "clipped_token_loss": [
        lambda ratio, a, eps: -ratio * a,  # no clip
        lambda ratio, a, eps: -ratio.clamp(1 - eps, 1 + eps) * a,  # clip, no min
        lambda ratio, a, eps: torch.minimum(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a),  # wrong sign
        lambda ratio, a, eps: -torch.maximum(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a),  # max instead of min
    ],
    "gae": [
        lambda r, v, gamma, lam: [r[t] - v[t] for t in range(len(r))],  # no bootstrap
        lambda r, v, gamma, lam: [sum(r[t:]) - v[t] for t in range(len(r))],  # ignores gamma and lambda
        lambda r, v, gamma, lam: [
            r[t] + gamma * (v[t + 1] if t + 1 < len(v) else v[t]) - v[t] for t in range(len(r))
        ],  # terminal V not 0
    ],
    "k3": [
        lambda lp, ref: lp - ref,  # that is k1
        lambda lp, ref: torch.exp(lp - ref) - 1 - (lp - ref),  # the other direction
        lambda lp, ref: 0.5 * (ref - lp) ** 2,  # k2
    ],
    "sequence_ratio": [
        lambda lp, old, m: torch.exp(
            ((lp - old) * m).sum(1)
        ),  # the raw sequence likelihood ratio, not length-normalised
        lambda lp, old, m: (torch.exp(lp - old) * m).sum(1) / m.sum(1),  # arithmetic mean of token ratios
        lambda lp, old, m: torch.exp(((lp - old) * m).mean(1)),  # mean over padding too
    ],
    "gspo_loss": [
        lambda lp, old, a, m, lo, hi: (
            -torch.minimum(torch.exp(lp - old) * a[:, None], torch.exp(lp - old).clamp(1 - lo, 1 + hi) * a[:, None])
            .mul(m)
            .sum()
            / m.sum()
        ),  # token ratios (GRPO)
        lambda lp, old, a, m, lo, hi: -(torch.exp(((lp - old) * m).sum(1) / m.sum(1)) * a).mean(),  # no clip
        lambda lp, old, a, m, lo, hi: (
            -(torch.exp(((lp - old) * m).sum(1) / m.sum(1)).clamp(1 - lo, 1 + hi) * a).mean()
        ),  # clip without the min
        lambda lp, old, a, m, lo, hi: torch.minimum(
            torch.exp(((lp - old) * m).sum(1) / m.sum(1)) * a,
            torch.exp(((lp - old) * m).sum(1) / m.sum(1)).clamp(1 - lo, 1 + hi) * a,
        ).mean(),  # wrong sign
    ],
    "gfpo_keep": [
        lambda r, L, g, k: torch.cat(
            [L.view(-1, g).argsort(1, descending=True).argsort(1) < k]
        ).flatten(),  # the k longest
        lambda r, L, g, k: (
            L.argsort(stable=True).argsort() < k * (len(L) // g)
        ),  # shortest over the whole batch, not per group
        lambda r, L, g, k: (
            r.view(-1, g).argsort(1, descending=True, stable=True).argsort(1) < k
        ).flatten(),  # the k best rewards
    ],
    "gfpo_advantages": [
        lambda r, keep, g: (
            (r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True))
            / (r.view(-1, g).std(1, unbiased=False, keepdim=True) + 1e-6)
        ).flatten(),  # stats over all G, nobody dropped
        lambda r, keep, g: (
            (
                (r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True))
                / (r.view(-1, g).std(1, unbiased=False, keepdim=True) + 1e-6)
            )
            * keep.view(-1, g)
        ).flatten(),  # stats over all G, dropped zeroed
        lambda r, keep, g: torch.cat(
            [
                torch.where(m.bool(), (x - x[m.bool()].mean()) / x[m.bool()].std(), torch.zeros_like(x))
                for x, m in zip(r.view(-1, g), keep.view(-1, g))
            ]
        ),  # Bessel std, NaN on an all-equal set
    ],
    "trl_loss": [
        lambda x, m, lt, L: (x * m).sum() / m.sum(),  # token mean whatever the loss_type
        lambda x, m, lt, L: (
            x.mean(1).mean() if lt == "grpo" else (x * m).sum() / (m.sum() if lt != "dr_grpo" else x.shape[0] * L)
        ),  # grpo ignores the mask
        lambda x, m, lt, L: (
            ((x * m).sum(1) / m.sum(1)).mean()
            if lt == "grpo"
            else (x * m).sum() / (x.shape[0] * x.shape[1] if lt == "dr_grpo" else m.sum())
        ),  # dr_grpo over the padded width, not max_completion_length
        lambda x, m, lt, L: (
            ((x * m).sum(1) / m.sum(1)).mean() if lt == "grpo" else (x * m).sum() / m.sum()
        ),  # dr_grpo as a token mean
    ],
    "trl_advantages": [
        lambda r, g, s: (
            (r - r.mean()) / (r.std() + 1e-4) if s == "batch" else EXERCISES["trl_advantages"][2](r, g, s)
        ),  # batch: centred on the batch mean
        lambda r, g, s: EXERCISES["trl_advantages"][2](r, g, "group" if s == "batch" else s),  # batch treated as group
        lambda r, g, s: EXERCISES["trl_advantages"][2](r, g, "group" if s == "none" else s),  # none still divides
        lambda r, g, s: (
            (
                (r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True))
                / (r.view(-1, g).std(1, unbiased=False, keepdim=True) + 1e-4)
            ).flatten()
            if s == "group"
            else EXERCISES["trl_advantages"][2](r, g, s)
        ),  # population std
    ],
}


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_reference_solution_passes(name):
    result = check(name, EXERCISES[name][2])
    assert isinstance(result, Result)
    assert result.ok, repr(result)
    assert result.passed == result.total >= 3


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_notebook_stub_fails_and_says_it_returned_none(name):
    result = check(name, _stub)
    assert not result.ok
    assert "None" in result.message


@pytest.mark.parametrize("name,index", [(n, i) for n, fs in WRONG.items() for i in range(len(fs))])
def test_wrong_implementation_fails_and_names_a_case(name, index):
    result = check(name, WRONG[name][index])
    assert not result.ok, f"{name} wrong implementation #{index} passed"
    assert result.message.startswith("Case '")
    assert "Hint:" in result.message or "raised" in result.message


def test_every_exercise_has_wrong_implementations():
    assert set(WRONG) == set(EXERCISES)


def test_a_learner_function_that_raises_is_reported_not_propagated():
    def boom(*args, **kwargs):
        raise RuntimeError("oops")

    result = check("k3", boom)
    assert not result.ok and "RuntimeError: oops" in result.message


def test_wrong_shape_is_reported():
    result = check("k3", lambda lp, ref: torch.zeros(7))
    assert not result.ok and "shape" in result.message


def test_result_renders_in_a_notebook():
    assert "PASS" in repr(check("k3", EXERCISES["k3"][2]))
    assert check("k3", _stub)._repr_markdown_().startswith("❌")


def test_solution_returns_source_of_a_function():
    src = solution("gae")
    assert src.startswith("def _sol_gae") and "return adv" in src


def test_unknown_exercise_is_a_value_error_listing_names():
    with pytest.raises(ValueError, match="name must be one of .*gae"):
        check("nope", _stub)
    with pytest.raises(ValueError, match="name must be one of"):
        solution("nope")
    with pytest.raises(ValueError, match="fn must be a function"):
        check("gae", 3)
