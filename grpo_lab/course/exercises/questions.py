"""The lettered questions, in notebook order: predict an outcome or diagnose a run before the next cell
shows it. Each has its choices, the right letter(s), a reply to each typical wrong answer and the idea
said when the answer is right; the notebook prints the choices and ``ask`` checks a pick.
"""

from __future__ import annotations

from typing import NamedTuple

from ...core.losses import token_gradient_weights


class Question(NamedTuple):
    """A prediction or a diagnosis: lettered choices, the right letter(s), and a reply to each typical
    wrong answer saying what it overlooks. The notebook prints the choices; ``ask`` checks a pick."""

    choices: dict[str, str]
    answer: str
    """The right letters, e.g. ``"b"`` or ``"bc"`` when several apply (``""``: none applies)."""
    replies: dict[str, str]
    """A typical wrong answer (its letters, sorted) -> what it overlooks."""
    hint: str
    why: str
    """Said when the answer is right: the idea, in one or two sentences."""


QUESTIONS: dict[str, Question] = {}


def _ask_declare(name: str, choices: dict[str, str], answer: str, replies: dict[str, str], hint: str, why: str):
    if set(answer) - set(choices) or any(set(k) - set(choices) for k in replies) or answer in replies:
        raise ValueError(f"question {name!r}: its answer and replies must use the letters {sorted(choices)}")
    QUESTIONS[name] = Question(choices, answer, replies, hint, why)


# notebook 00: the group baseline
_ask_declare(
    "rare_success",
    choices={
        "a": "the right answer in X, the group where it is the only one",
        "b": "a right answer in Y, the group where most are right",
        "c": "neither: both earn the same reward, 1, so both get the same advantage",
    },
    answer="a",
    replies={
        "b": "Y being the better group does not help its right answers: the advantage is the reward minus the "
        "group's mean, and in Y the mean is already 7/8.",
        "c": "The reward is the same, but the advantage is the reward minus its group's mean: 1 - 1/8 in X, "
        "1 - 7/8 in Y, before the same std divides both.",
    },
    hint="Work out each group's mean first; the advantage is the distance to it.",
    why="A success that is rare in its group stands far above the group's mean: 2.47 against 0.35. The "
    "group is its own baseline, so GRPO pushes hardest where the model rarely succeeds.",
)

# notebook 02: which tokens the clipped objective silences
_ask_declare(
    "clip_gradient",
    choices={
        "a": "r = 1.5, A = +1",
        "b": "r = 1.5, A = -1",
        "c": "r = 0.5, A = +1",
        "d": "r = 0.5, A = -1",
    },
    answer="bc",
    replies={
        "ad": "Those two are exactly the ones the clip silences: each ratio already moved the way its advantage "
        "asks (up for A > 0, down for A < 0) past the bound. The other two moved the wrong way.",
        "": "All four ratios are outside [0.8, 1.2], but the min takes the clipped branch only when it is the "
        "smaller one. For a ratio that moved against its advantage the unclipped term is smaller, so it stays, "
        "with its gradient.",
        "abcd": "Then the clip would never act. It does, on the tokens that moved the way their advantage asks "
        "past the bound.",
    },
    hint="For each token compare r*A with clip(r, 0.8, 1.2)*A: the min picks one, and only the unclipped term "
    "depends on the policy.",
    why="The min is pessimistic: it removes the incentive to move further the way the advantage asks, and "
    "keeps the full gradient that pulls back a token which moved the wrong way.",
)

# notebook 03: what the std division does to a small gap
_ask_declare(
    "std_scale",
    choices={
        "a": "the better answer of P",
        "b": "the better answer of Q: its gap to the other answer is ten times larger",
        "c": "about the same, close to +0.71 each",
        "d": "neither: both groups are mostly right, so the advantages are about 0",
    },
    answer="c",
    replies={
        "b": "That is the answer without the std (Dr. GRPO, scale='none'): +0.5 against +0.05. GRPO divides "
        "each group by its own std, which is ten times smaller in P.",
        "d": "Only an all-equal group gives zeros. Centring on the group mean leaves a gap in each group, and "
        "the std division then sets its size.",
    },
    hint="Centre each group on its mean, then divide by that group's std: how does the std scale with the gap?",
    why="Dividing by the group's std makes any gap, however small, the same size: a 0.1 difference in reward "
    "is pushed as hard as a 1.0 difference. That is the difficulty bias Dr. GRPO removes (notebook 04).",
)

# notebook 04: which aggregation made a heatmap (the heatmap is mystery_token_weights())
_ask_declare(
    "mystery_aggregation",
    choices={
        "a": "seq_mean_token_mean (GRPO): each answer's tokens share 1 / (B |o_i|)",
        "b": "token_mean (DAPO, and TRL's default loss_type): one normaliser, the batch's valid tokens",
        "c": "seq_mean_token_sum_norm (Dr. GRPO): a constant, B L_max",
    },
    answer="b",
    replies={
        "a": "Under GRPO each row is divided by its own length, so a short answer's tokens would weigh more than "
        "a long one's. In the heatmap every token weighs the same.",
        "c": "Dr. GRPO's tokens also weigh the same, but its constant is 1 / (B L_max) = 1/48, about 0.021. Read "
        "the value in the heatmap and invert it.",
    },
    hint="First: do a short and a long row's tokens weigh the same? Then invert the weight: which count is it?",
    why="Every token weighs 1/21, and 21 is the number of valid tokens in the batch (3 + 6 + 12): one "
    "normaliser over all tokens, the token mean.",
)

# notebook 05: clip-higher
_ask_declare(
    "clip_higher_frees",
    choices={
        "a": "A > 0, ratio 1.25",
        "b": "A < 0, ratio 1.25",
        "c": "A < 0, ratio 0.75",
        "d": "A > 0, ratio 0.75",
    },
    answer="a",
    replies={
        "b": "A token with A < 0 whose ratio rose has moved against its advantage: the pessimistic min never "
        "clips it, at 1.2 or at 1.28.",
        "c": "That token is stopped by the lower bound, 0.8, which DAPO leaves where it was.",
        "d": "A token with A > 0 whose ratio fell moved against its advantage: it keeps its gradient under "
        "either clip.",
    },
    hint="Only the upper bound moved. Which tokens can the upper bound stop at all?",
    why="Only a token the advantage wants more of, whose ratio rose past 1.2, is stopped by the old bound "
    "and not by the new one: clip-higher lets up-weighted tokens rise further, nothing else.",
)

_ask_declare(
    "clip_higher_who",
    choices={
        "a": "only the token the old policy gave probability 0.9",
        "b": "only the token the old policy gave probability 0.05",
        "c": "both",
        "d": "neither",
    },
    answer="b",
    replies={
        "a": "1.2 x 0.9 = 1.08: no probability reaches it, so a likely token is never clipped from above.",
        "c": "One of them cannot be: 1.2 x 0.9 = 1.08, more than any probability.",
        "d": "1.2 x 0.05 = 0.06: a small step of the policy reaches it.",
    },
    hint="The upper clip acts once the new probability passes 1.2 times the old one. Can a probability pass 1?",
    why="The ratio of a token with old probability p can never pass 1/p, so the upper clip only ever stops "
    "unlikely tokens. Raising it lets rare tokens grow, which is why DAPO says it keeps exploration alive.",
)

# notebook 09: a mystery dashboard (the committed run mystery_run_seed0)
_ask_declare(
    "mystery_failure",
    choices={
        "a": "the policy has solved the task: its reward and accuracy are 1.0",
        "b": "sampling too cold: every group agrees",
        "c": "the reward function pays every answer",
        "d": "a learning rate too high: a KL blow-up",
        "e": "length collapse",
    },
    answer="c",
    replies={
        "a": "A policy that started near 0.37 cannot be perfect at step 1, and its KL to the reference stays "
        "0: its weights never moved. The 'accuracy' is the reward's own verdict, not a check of the sums.",
        "b": "Cold sampling makes groups agree on right and on wrong answers: the reward would sit between 0 "
        "and 1, and the entropy would be low. Here every answer is paid.",
        "d": "A blow-up shows the KL climbing; here it stays at 0.",
        "e": "The lengths only wander: the policy is not changing at all.",
    },
    hint="Start from the KL: did the policy change? Then ask why every answer earns the same reward.",
    why="Reward and 'accuracy' at 1.0 from step 1 while the KL stays 0: every answer is paid, every group is "
    "all-equal, every advantage is 0, and nothing is learnt. A reward bug, the mirror image of section 1's.",
)

_ask_declare(
    "mystery_symptom",
    choices={
        "a": "the reward, flat at 1.0",
        "b": "the zero-std share, 1.0",
        "c": "the KL to the reference, 0",
        "d": "the entropy",
    },
    answer="b",
    replies={
        "a": "A reward of 1.0 is also what a solved task looks like. The zero-std share says why nothing "
        "moves: every group is all-equal, so every advantage is 0.",
        "c": "At step 1 the KL is 0 in every run, healthy or not: the policy starts as the reference. It shows "
        "that nothing moved only from step 2 on.",
        "d": "The entropy of a policy that does not change still wanders from batch to batch; it proves nothing "
        "at step 1.",
    },
    hint="Which panel would read differently at step 1 in a healthy run, and says why there is no gradient?",
    why="A zero-std share of 1.0 means every group is all-right or all-wrong, so every advantage, and the "
    "whole gradient, is 0. It reads so at step 1, before any other curve can show that nothing is learnt.",
)

_MYSTERY_AGGREGATION = "token_mean"  # the answer to notebook 04's question


def mystery_token_weights() -> dict:
    """The heatmap of notebook 04's question: each token's push under an aggregation it does not name.

    Three answers of 3, 6 and 12 tokens with advantages +1, -1, +1, padded to L_max = 16; the weights
    come from ``token_gradient_weights`` (autograd through ``policy_loss``)."""
    lengths, advantages, max_len = [3, 6, 12], [1.0, -1.0, 1.0], 16
    weights = token_gradient_weights(lengths, advantages, _MYSTERY_AGGREGATION, max_len)
    return {"lengths": lengths, "advantages": advantages, "max_len": max_len, "weights": weights}
