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

from grpo_lab.course.exercises import EXERCISES, Result, check, solution


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


# --- the predictions and diagnoses (``ask``) -------------------------------------------------------------

from itertools import combinations  # noqa: E402

from grpo_lab.course.exercises import QUESTIONS, ask, mystery_token_weights  # noqa: E402


def _letter_sets(letters):
    return ["".join(c) for n in range(len(letters) + 1) for c in combinations(sorted(letters), n)]


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_only_the_right_letters_pass(name):
    q = QUESTIONS[name]
    assert ask(name, q.answer).ok and ask(name, q.answer.upper()).ok
    assert ask(name, ", ".join(q.answer) if q.answer else "none").ok
    for pick in _letter_sets(q.choices):
        if pick != "".join(sorted(q.answer)):
            result = ask(name, pick or "none")
            assert not result.ok and result.message.startswith("Not quite."), (pick, result)


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_each_typical_wrong_answer_gets_its_own_reply(name):
    q = QUESTIONS[name]
    assert q.replies, f"{name}: no typical wrong answer is answered"
    for pick, reply in q.replies.items():
        result = ask(name, pick or "none")
        assert not result.ok and reply in result.message and q.answer not in ("", pick)


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_no_answer_and_unreadable_answers_fail_naming_the_choices(name):
    letters = ", ".join(sorted(QUESTIONS[name].choices))
    assert not ask(name, None).ok and "replace None" in ask(name, None).message
    for bad in ("z", 3, "the first one", ["a", 3]):
        result = ask(name, bad)
        assert not result.ok and f"letters from {letters}" in result.message, (bad, result)
    assert repr(ask(name, None)).startswith(f"[FAIL] {name}: ") and "cases" not in repr(ask(name, None))


@pytest.mark.parametrize("written", ["(a)", "a.", "a)", " A ", "[a]", "a:"])
def test_a_letter_written_the_way_people_write_choices_reads_as_that_letter(written):
    assert ask("rare_success", written).ok, written  # the answer is a
    assert ask("rare_success", written.replace("a", "b").replace("A", "B")).message.startswith("Not quite.")


@pytest.mark.parametrize("written", ["b and c", "(b) and (c)", "b, c.", "b or c", "b) c)", "bc"])
def test_several_letters_joined_by_and_or_punctuation_read_as_those_letters(written):
    assert ask("clip_gradient", written).ok, written  # the answer is b and c


def test_and_or_alone_or_letters_inside_words_are_not_choices():
    for bad in ("and", "or", "a andb", "ab(c)", "..."):
        result = ask("rare_success", bad)
        assert not result.ok and "is not a choice" in result.message, (bad, result)


@pytest.mark.parametrize("empty", ["", "   ", "\n"])
def test_an_empty_answer_is_no_answer_yet_not_a_wrong_one(empty):
    result = ask("rare_success", empty)
    assert not result.ok and result.message.startswith("No answer yet") and "a, b, c" in result.message
    assert "Not quite" not in result.message


def test_an_unknown_question_is_a_value_error_listing_names():
    with pytest.raises(ValueError, match="name must be one of .*rare_success"):
        ask("nope", "a")


def _letter_of(q, words):
    (letter,) = [k for k, text in q.choices.items() if words in text]
    return letter


def _group_adv_by_hand(rewards):
    m, s = statistics.mean(rewards), statistics.stdev(rewards)
    return [(r - m) / (s + 1e-4) for r in rewards]


def test_rare_success_answer_by_hand():
    x = _group_adv_by_hand([1.0] + [0.0] * 7)[0]
    y = _group_adv_by_hand([1.0] * 7 + [0.0])[0]
    assert round(x, 2) == 2.47 and round(y, 2) == 0.35  # the numbers the reply quotes
    q = QUESTIONS["rare_success"]
    assert q.answer == _letter_of(q, "the only one") and "2.47" in q.why and "0.35" in q.why


def test_clip_gradient_answer_by_autograd_of_the_formula():
    q = QUESTIONS["clip_gradient"]
    moving = set()
    for letter, text in q.choices.items():
        r, a = (float(x) for x in re.fullmatch(r"r = ([\d.]+), A = ([+-]\d)", text).groups())
        logp = torch.tensor(math.log(r), requires_grad=True)
        ratio = logp.exp()
        (-torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a)).backward()
        if logp.grad.abs() > 0:
            moving.add(letter)
    assert "".join(sorted(moving)) == q.answer == "bc"


def test_std_scale_answer_by_hand():
    p = _group_adv_by_hand([0.9, 1.0])[1]
    qq = _group_adv_by_hand([0.0, 1.0])[1]
    assert abs(p - qq) < 0.01 and round(p, 2) == 0.71 and round(qq, 2) == 0.71
    q = QUESTIONS["std_scale"]
    assert q.answer == _letter_of(q, "about the same")


def test_mystery_heatmap_is_the_token_mean_by_hand():
    m = mystery_token_weights()
    w, lengths = m["weights"], m["lengths"]
    total = sum(lengths)
    assert total == 21 and len(lengths) * m["max_len"] == 48  # the numbers the replies quote
    for i, (n, a) in enumerate(zip(lengths, m["advantages"])):
        assert torch.allclose(w[i, :n], torch.full((n,), a / total, dtype=w.dtype)) and not w[i, n:].any()
    q = QUESTIONS["mystery_aggregation"]
    assert q.answer == _letter_of(q, "token_mean (DAPO")


def _keeps_gradient(r, a, low, high):
    logp = torch.tensor(math.log(r), requires_grad=True)
    ratio = logp.exp()
    (-torch.minimum(ratio * a, ratio.clamp(1 - low, 1 + high) * a)).backward()
    return bool(logp.grad.abs() > 0)


def test_clip_higher_frees_answer_by_autograd_of_the_formula():
    q = QUESTIONS["clip_higher_frees"]
    changed = set()
    for letter, text in q.choices.items():
        sign, r = re.fullmatch(r"A ([<>]) 0, ratio ([\d.]+)", text).groups()
        a = 1.0 if sign == ">" else -1.0
        if _keeps_gradient(float(r), a, 0.2, 0.2) != _keeps_gradient(float(r), a, 0.2, 0.28):
            changed.add(letter)
    assert "".join(sorted(changed)) == q.answer


def test_clip_higher_who_answer_by_hand():
    reachable = {p: 1.2 * p < 1.0 for p in (0.9, 0.05)}  # can the new probability pass 1.2 x the old one?
    assert reachable == {0.9: False, 0.05: True}
    q = QUESTIONS["clip_higher_who"]
    assert q.answer == _letter_of(q, "probability 0.05")


def _mystery_tool():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "mystery_run.py"
    spec = importlib.util.spec_from_file_location("mystery_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_mystery_runs_reward_pays_every_answer():
    reward = _mystery_tool().buggy_reward
    assert [reward(c, 121, f) for c, f in (("121", True), ("92,120", True), ("", True), ("121", False))] == [1.0] * 4


def test_the_mystery_dashboard_shows_what_its_answers_say():
    from grpo_lab.study.histories import load_history

    run = load_history("mystery_run_seed0")
    h = run["history"]
    assert len(h) >= 10 and run["config"]["algo"] == "grpo"
    # failure c: every answer paid, so no group varies, no gradient, and the policy never moves
    assert all(x["reward_mean"] == 1.0 and x["zero_std_frac"] == 1.0 and x["grad_norm"] == 0.0 for x in h)
    assert all(x["kl"] < 1e-9 for x in h)  # 0 up to float rounding
    assert run["after"]["accuracy"] == run["before"]["accuracy"] < 0.5  # the real task: nothing learnt, far from 1
    # symptom b, not c: at step 1 a healthy run's KL is 0 as well, while its zero-std share is below 1
    healthy = load_history("grpo_seed0")["history"][0]
    assert healthy["step"] == 1 and healthy["kl"] < 1e-9 and healthy["zero_std_frac"] < 1.0
    q_fail, q_symptom = QUESTIONS["mystery_failure"], QUESTIONS["mystery_symptom"]
    assert q_fail.answer == _letter_of(q_fail, "pays every answer")
    assert q_symptom.answer == _letter_of(q_symptom, "zero-std share")
