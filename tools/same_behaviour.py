"""Does a refactor keep behaviour? Train every preset a few steps from seed 0 and write each run's
history and a digest of its final weights, so two commits' outputs can be compared byte for byte.

    python tools/same_behaviour.py --out before.json      # on the old commit
    python tools/same_behaviour.py --out after.json       # on the new one
    python tools/same_behaviour.py --compare before.json after.json

Runs in one thread (a 2-core machine's kernels then choose the same reductions every time).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys

import torch


def _imports():
    try:  # the layered package
        from grpo_lab.algorithms import PRESETS
        from grpo_lab.train.trainer import TrainConfig, Trainer
    except ImportError:  # the flat one it replaced
        from grpo_lab.algorithms import PRESETS
        from grpo_lab.train.trainer import TrainConfig, Trainer
    return PRESETS, TrainConfig, Trainer


def _digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _is_timing(key: str) -> bool:
    """Clock readings differ between any two runs; everything else must not."""
    return any(word in key for word in ("seconds", "time", "per_s", "memory"))


def _plain(x):
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def measure(steps: int) -> dict:
    torch.set_num_threads(1)
    presets, TrainConfig, Trainer = _imports()
    out = {}
    for name in presets:
        trainer = Trainer(TrainConfig(algo=name, seed=0, steps=steps, prompts_per_step=4, group_size=4))
        history = [{k: v for k, v in m.items() if not _is_timing(k)} for m in trainer.train(steps, progress=False)]
        weights = _digest(trainer.model) + (_digest(trainer.critic) if trainer.critic is not None else "")
        out[name] = {"history": _plain(history), "weights": hashlib.sha256(weights.encode()).hexdigest()}
        print(f"{name}: {out[name]['weights'][:16]}", flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    a = p.parse_args()
    if a.compare:
        before, after = (json.load(open(f)) for f in a.compare)
        differ = [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)]
        for k in sorted(differ):
            print(f"{k}: differs")
        print("identical histories and weights for every preset" if not differ else f"{len(differ)} presets differ")
        return 1 if differ else 0
    if not a.out:
        p.error("--out FILE or --compare BEFORE AFTER")
    json.dump(measure(a.steps), open(a.out, "w"), indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
