"""The self-checking exercises: every checker passes the reference solution and fails wrong ones.

The wrong implementations are the mistakes learners make (no std guard, population std, forgetting
the mask, leaving the sample in its own baseline, the wrong sign, forgetting the min, going forwards
in GAE, the wrong KL direction) plus the notebook's stub that returns None.
"""

from __future__ import annotations

import pytest
import torch

from grpo_lab.exercises import EXERCISES, Result, check, solution


def _stub(*args, **kwargs):
    return None


WRONG = {
    "group_advantages": [
        lambda r, g, use_std=True: (r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True)).flatten(),  # never divides
        lambda r, g, use_std=True: ((r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True)) / r.view(-1, g).std(1, keepdim=True)).flatten(),  # NaN on zero std
        lambda r, g, use_std=True: ((r - r.mean()) / (r.std() + 1e-4)),  # batch, not group
        lambda r, g, use_std=True: ((r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True)) / (r.view(-1, g).std(1, unbiased=False, keepdim=True) + 1e-4)).flatten(),  # population std
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
        lambda r, v, gamma, lam: [r[t] + gamma * (v[t + 1] if t + 1 < len(v) else v[t]) - v[t] for t in range(len(r))],  # terminal V not 0
    ],
    "k3": [
        lambda lp, ref: lp - ref,  # that is k1
        lambda lp, ref: torch.exp(lp - ref) - 1 - (lp - ref),  # the other direction
        lambda lp, ref: 0.5 * (ref - lp) ** 2,  # k2
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
