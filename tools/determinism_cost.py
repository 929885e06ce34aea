"""What the bit-for-bit repeatable gather costs: GRPO steps with the lab's ``index_select`` against the same steps
with advanced indexing (``x[rows]``, whose CPU backward adds repeated rows in a thread-dependent order).

    python tools/determinism_cost.py --steps 20 --repeats 3 --json assets/bench/determinism_cost.json

Each repeat trains ``--steps`` GRPO steps from seed 0 with each gather, interleaved (index_select, advanced, ...),
on the threads torch has; the figure is the median step time of each, with every repeat's median beside it.
Run it on a quiet machine: it measures time.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys

import torch

from grpo_lab.train.trainer import TrainConfig, Trainer

_INDEX_SELECT = torch.Tensor.index_select


def _advanced(self: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    """``index_select`` as the lab wrote it before: advanced indexing along dim 0."""
    return self[index] if dim == 0 else _INDEX_SELECT(self, dim, index)


def step_seconds(steps: int, advanced: bool) -> list[float]:
    """The ``step_seconds`` of ``steps`` GRPO steps from seed 0, gathering with ``x[rows]`` when ``advanced``."""
    torch.Tensor.index_select = _advanced if advanced else _INDEX_SELECT
    try:
        history = Trainer(TrainConfig(algo="grpo", seed=0, track_kl=False)).train(steps, progress=False)
    finally:
        torch.Tensor.index_select = _INDEX_SELECT
    return [h["step_seconds"] for h in history[1:]]  # the first step pays for warm-up


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.steps < 2 or args.repeats < 1:
        print(f"error: --steps must be >= 2 and --repeats >= 1, got {args.steps} and {args.repeats}", file=sys.stderr)
        return 2
    runs: dict[str, list[float]] = {"index_select": [], "advanced": []}
    for r in range(args.repeats):
        for name in runs:
            med = statistics.median(step_seconds(args.steps, name == "advanced"))
            runs[name].append(med)
            print(f"repeat {r}: {name:12} median step {med:.3f} s", flush=True)
    out = {
        "command": "python tools/determinism_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{torch.get_num_threads()} torch threads, {platform.machine()}, Python {platform.python_version()}",
        "median_step_seconds": {k: statistics.median(v) for k, v in runs.items()},
        "per_repeat": runs,
    }
    cost = out["median_step_seconds"]["index_select"] / out["median_step_seconds"]["advanced"] - 1
    out["index_select_minus_advanced"] = cost
    print(f"index_select costs {cost:+.1%} step time against advanced indexing (medians of {args.repeats} repeats)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
