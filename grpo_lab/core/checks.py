"""Input checks shared by the math layer.

Every public function of the lab validates what it is given and raises a ``ValueError`` that
names the argument, what it got and what it wanted. These functions keep those messages uniform.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable

import torch


def check_tensor(name: str, x: object, ndim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """Check that ``x`` is a tensor (of ``ndim`` dimensions, when given) and return it."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.is_meta:  # shapes without data: every check of values would fail inside torch
        raise ValueError(f"{name} must hold data, got a tensor on the 'meta' device")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if x.dim() not in allowed:
            want = " or ".join(f"{d}-D" for d in allowed)
            raise ValueError(f"{name} must be {want}, got shape {tuple(x.shape)}")
    return x


def check_float(name: str, x: object, ndim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """A floating-point tensor with no NaN or infinity."""
    x = check_tensor(name, x, ndim)
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if not torch.isfinite(x).all():
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} must be finite, got {bad} NaN or infinite value(s)")
    return x


def check_same_shape(name: str, x: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if x.shape != ref.shape:
        raise ValueError(f"{name} must have the shape of {ref_name} {tuple(ref.shape)}, got {tuple(x.shape)}")


def check_mask(name: str, mask: object, like_name: str, like: torch.Tensor) -> torch.Tensor:
    """A 0/1 mask (bool, int or float) with the shape of ``like``; returned as ``like``'s dtype."""
    mask = check_tensor(name, mask)
    check_same_shape(name, mask, like_name, like)
    if mask.dtype != torch.bool:
        if not ((mask == 0) | (mask == 1)).all():
            raise ValueError(f"{name} must hold only 0 and 1, got values {torch.unique(mask)[:5].tolist()}")
    return mask.to(like.dtype)


def check_rewards(name: str, x: object, ndim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """Rewards as ``check_float`` wants them, except that integer and bool tensors (0/1 correctness,
    as a learner types it) are taken and returned as float32."""
    x = check_tensor(name, x, ndim)
    if not x.is_floating_point():
        x = x.to(torch.float32)
    return check_float(name, x, ndim)


def check_positive_int(name: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer (Python's or NumPy's; not a ``bool``, not a float) in ``[minimum, maximum]``,
    returned as a Python ``int``.

    The one place the package checks a count (a group size, a length budget, a number of steps).
    """
    if maximum is not None:
        want = f"an integer in [{minimum}, {maximum}]"
    else:
        want = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):  # NumPy's bool is not Integral
        raise ValueError(f"{name} must be {want}, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {want}, got {value}")
    return value


def check_group_size(rewards: torch.Tensor, group_size: object, minimum: int = 1) -> int:
    """``group_size`` is an int >= minimum that divides the batch (groups are consecutive rows)."""
    group_size = check_positive_int("group_size", group_size, minimum=minimum)
    if rewards.shape[0] % group_size != 0:
        raise ValueError(
            f"the batch size must be a multiple of group_size={group_size} (consecutive rows form a group), "
            f"got {rewards.shape[0]} rows"
        )
    return group_size


def check_choice(name: str, value: object, choices: Iterable[str]) -> str:
    """``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}")
    return value


def check_number(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A real number in [low, high] (open ends where asked)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value}")
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and (value > high or (high_open and value == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {value}")
    return value
