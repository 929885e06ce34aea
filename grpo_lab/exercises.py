"""Self-checking exercises: a learner writes a function, ``check`` compares it with the package.

    from grpo_lab.exercises import check, solution
    def my_group_advantages(rewards, group_size): ...
    check("group_advantages", my_group_advantages)     # says which case failed and why
    solution("group_advantages")                       # the reference answer, when wanted

Every checker runs several cases, including the edge cases that bite (an all-equal group, a
clipped token, padding), and reports the first failure with the input, what was expected, what
came back, and a hint. The expected values come from the package, which is itself tested
against the papers' numbers (``tests/``).
"""

from __future__ import annotations

import inspect
import math
import textwrap
from dataclasses import dataclass

import torch

from .advantages import gae, group_advantages, rloo_advantages
from .kl import kl_estimate
from .losses import masked_mean, policy_loss


@dataclass
class Result:
    """What ``check`` found; shows itself as a short verdict in a notebook."""

    name: str
    ok: bool
    passed: int
    total: int
    message: str

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        mark = "PASS" if self.ok else "FAIL"
        return f"[{mark}] {self.name}: {self.passed}/{self.total} cases. {self.message}"

    def _repr_markdown_(self) -> str:
        icon = "✅" if self.ok else "❌"
        return f"{icon} **{self.name}**: {self.passed}/{self.total} cases pass. {self.message}"


# --- reference solutions: short, in the notebook's own terms ---------------------------------


def _sol_group_advantages(rewards: torch.Tensor, group_size: int, use_std: bool = True) -> torch.Tensor:
    g = rewards.view(-1, group_size)
    centred = g - g.mean(dim=1, keepdim=True)
    if use_std:
        centred = centred / (g.std(dim=1, keepdim=True) + 1e-4)
    return centred.reshape(-1)


def _sol_masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum()


def _sol_reinforce_loss(seq_logp: torch.Tensor, rewards: torch.Tensor, baseline: float) -> torch.Tensor:
    return -((rewards - baseline) * seq_logp).mean()


def _sol_rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    g = rewards.view(-1, group_size)
    others_mean = (g.sum(dim=1, keepdim=True) - g) / (group_size - 1)
    return (g - others_mean).reshape(-1)


def _sol_clipped_token_loss(ratio: torch.Tensor, advantage: torch.Tensor, eps: float) -> torch.Tensor:
    return -torch.minimum(ratio * advantage, ratio.clamp(1 - eps, 1 + eps) * advantage)


def _sol_gae(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    adv, next_adv, next_value = [0.0] * len(rewards), 0.0, 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_value - values[t]
        next_adv = delta + gamma * lam * next_adv
        adv[t], next_value = next_adv, values[t]
    return adv


def _sol_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    log_r = ref_logp - logp
    return torch.exp(log_r) - 1 - log_r


# --- the cases ---------------------------------------------------------------------------------


def _cases_group_advantages():
    return [
        ("one group [1, 0, 0, 0]", (torch.tensor([1.0, 0, 0, 0]), 4), {}),
        ("two groups of 3", (torch.tensor([1.0, 0, 1, 0, 0, 1]), 3), {}),
        ("an all-correct group must give zeros, not NaN", (torch.tensor([1.0, 1, 1, 1, 0, 1, 0, 1]), 4), {}),
        ("rewards that are not 0/1", (torch.tensor([0.2, 0.5, 0.9, 0.4]), 2), {}),
        ("without the std (Dr. GRPO)", (torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 1]), 4), {"use_std": False}),
    ]


def _ref_group_advantages(rewards, group_size, use_std=True):
    return group_advantages(rewards, group_size, scale="group" if use_std else "none")


def _cases_masked_mean():
    x = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 5.0, 99.0, 99.0]])
    m = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    return [
        ("no padding", (torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.ones(2, 2)), {}),
        ("padding (99) must be ignored", (x, m), {}),
        ("a single valid token", (x, torch.tensor([[0.0, 0, 1, 0], [0, 0, 0, 0]])), {}),
    ]


def _cases_reinforce():
    lp = torch.tensor([-1.0, -2.0, -0.5, -3.0])
    r = torch.tensor([1.0, 0.0, 1.0, 0.0])
    return [
        ("no baseline", (lp, r, 0.0), {}),
        ("baseline 0.5", (lp, r, 0.5), {}),
        ("all rewards equal to the baseline give 0", (lp, torch.ones(4), 1.0), {}),
    ]


def _ref_reinforce(seq_logp, rewards, baseline):
    # The definition (Williams 1992): the surrogate whose gradient is -E[(R - b) grad log pi(y|x)].
    return torch.stack([-(r - baseline) * lp for r, lp in zip(rewards, seq_logp)]).mean()


def _cases_rloo():
    return [
        ("[1, 0, 0, 1]", (torch.tensor([1.0, 0, 0, 1]), 4), {}),
        ("[0.2, 0.5, 0.9]", (torch.tensor([0.2, 0.5, 0.9]), 3), {}),
        ("two groups of 2", (torch.tensor([1.0, 0, 1, 1]), 2), {}),
    ]


def _cases_clipped():
    r = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5])
    return [
        ("A = +1 across the clip range", (r, torch.ones(5), 0.2), {}),
        ("A = -1 across the clip range", (r, -torch.ones(5), 0.2), {}),
        ("mixed advantages, eps 0.1", (r, torch.tensor([2.0, -1.0, 0.5, -0.5, 1.0]), 0.1), {}),
    ]


def _ref_clipped(ratio, advantage, eps):
    # The package's policy_loss on one token at a time is exactly that token's clipped loss.
    out = []
    for r, a in zip(ratio.tolist(), advantage.tolist()):
        loss, _ = policy_loss(torch.tensor([[math.log(r)]]), torch.zeros(1, 1), torch.tensor([a]), torch.ones(1, 1),
                              clip_low=eps, aggregation="token_mean")
        out.append(float(loss))
    return torch.tensor(out)


def _cases_gae():
    return [
        ("ALGORITHMS.md vector, gamma 1, lambda 0.95", ([0.0, 0.0, 1.0], [0.5, 0.6, 0.7], 1.0, 0.95), {}),
        ("lambda = 0 is the one-step TD error", ([0.0, 0.0, 1.0], [0.5, 0.6, 0.7], 1.0, 0.0), {}),
        ("gamma 0.9, lambda 1", ([0.5, -0.2, 1.0, 0.0], [0.1, 0.2, 0.3, 0.4], 0.9, 1.0), {}),
    ]


def _ref_gae(rewards, values, gamma, lam):
    r, v = torch.tensor([rewards], dtype=torch.float64), torch.tensor([values], dtype=torch.float64)
    adv, _ = gae(r, v, torch.ones_like(r), gamma, lam)
    return adv[0].tolist()


def _cases_k3():
    return [
        ("ALGORITHMS.md: logp -1, ref -1.5", (torch.tensor([-1.0]), torch.tensor([-1.5])), {}),
        ("ALGORITHMS.md: logp -2, ref -1", (torch.tensor([-2.0]), torch.tensor([-1.0])), {}),
        ("equal log-probs give 0", (torch.tensor([-0.7, -3.0]), torch.tensor([-0.7, -3.0])), {}),
    ]


EXERCISES = {
    "group_advantages": (_cases_group_advantages, _ref_group_advantages, _sol_group_advantages,
                         "Centre each group on its mean; divide by its std (+1e-4) only when use_std. Groups are consecutive rows: rewards.view(-1, group_size)."),
    "masked_mean": (_cases_masked_mean, lambda x, m: masked_mean(x, m), _sol_masked_mean,
                    "Multiply by the mask before summing, and divide by the number of valid tokens, not by x.numel()."),
    "reinforce_loss": (_cases_reinforce, _ref_reinforce, _sol_reinforce_loss,
                       "The loss is minus the mean of (R - b) * log pi(y|x): minimising it raises log pi where R > b."),
    "rloo_advantages": (_cases_rloo, lambda r, g: rloo_advantages(r, g), _sol_rloo_advantages,
                        "The baseline for sample i is the mean of the *other* G-1 rewards of its group."),
    "clipped_token_loss": (_cases_clipped, _ref_clipped, _sol_clipped_token_loss,
                           "loss = -min(r*A, clip(r, 1-eps, 1+eps)*A): the min, then the minus sign."),
    "gae": (_cases_gae, _ref_gae, _sol_gae,
            "Go backwards: delta_t = r_t + gamma*V_{t+1} - V_t with V after the last token = 0; A_t = delta_t + gamma*lam*A_{t+1}."),
    "k3": (_cases_k3, lambda lp, ref: kl_estimate(lp, ref, "k3"), _sol_k3,
           "With log r = ref_logp - logp: k3 = (r - 1) - log r, which is >= 0 for every token."),
}


def _as_tensor(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64)
    return torch.as_tensor(x, dtype=torch.float64)


def check(name: str, fn) -> Result:
    """Run exercise ``name`` against ``fn``; the verdict names the first failing case and why."""
    if name not in EXERCISES:
        raise ValueError(f"name must be one of {', '.join(sorted(EXERCISES))}; got {name!r}")
    if not callable(fn):
        raise ValueError(f"fn must be a function, got {type(fn).__name__}")
    cases_fn, reference, _, hint = EXERCISES[name]
    cases = cases_fn()
    for i, (label, args, kwargs) in enumerate(cases):
        expected = _as_tensor(reference(*args, **kwargs))
        try:
            got_raw = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
        except Exception as err:  # the learner's code raised: report it as this case's failure
            return Result(name, False, i, len(cases), f"Case '{label}' raised {type(err).__name__}: {err}. Hint: {hint}")
        if got_raw is None:
            return Result(name, False, i, len(cases), f"Case '{label}': your function returned None (a missing return?). Hint: {hint}")
        try:
            got = _as_tensor(got_raw)
        except Exception:
            return Result(name, False, i, len(cases), f"Case '{label}': could not read {type(got_raw).__name__} as numbers.")
        if got.shape != expected.shape:
            return Result(name, False, i, len(cases), f"Case '{label}': expected shape {tuple(expected.shape)}, got {tuple(got.shape)}. Hint: {hint}")
        if not torch.isfinite(got).all():
            return Result(name, False, i, len(cases), f"Case '{label}': your result has NaN or infinity: {got.tolist()}. Hint: {hint}")
        if not torch.allclose(got, expected, atol=1e-4, rtol=1e-4):
            return Result(name, False, i, len(cases),
                          f"Case '{label}': expected {_fmt(expected)}, got {_fmt(got)}. Hint: {hint}")
    return Result(name, True, len(cases), len(cases), "Well done.")


def _fmt(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in t.flatten().tolist()) + "]"


def solution(name: str) -> str:
    """The reference solution's source, to read when stuck (display it; nothing is printed here)."""
    if name not in EXERCISES:
        raise ValueError(f"name must be one of {', '.join(sorted(EXERCISES))}; got {name!r}")
    return textwrap.dedent(inspect.getsource(EXERCISES[name][2]))
