"""``claim``: a sentence of the course checked against the numbers printed beside it."""

from __future__ import annotations


class ClaimFailed(AssertionError):
    """A sentence the course asserts no longer holds for the numbers beside it."""


def claim(holds: object, sentence: str) -> None:
    """Print ``sentence``, a conclusion drawn from numbers the notebook just computed, and raise
    ``ClaimFailed`` when ``holds`` is false, so the notebook fails the day its prose stops being true.

    Write the numbers into the sentence with an f-string, so what is printed is what was checked::

        claim(gspo_clip > 10 * grpo_clip, f"GSPO clips {gspo_clip:.1%} of tokens, GRPO {grpo_clip:.1%}")
    """
    if not isinstance(sentence, str) or not sentence.strip():
        raise ValueError(f"sentence must be a non-empty str, got {sentence!r}")
    if not bool(holds):
        raise ClaimFailed(f"this no longer holds: {sentence}")
    print(sentence)
