"""Make the committed run behind notebook 09's mystery dashboard (instructors: this names the answer).

    python tools/mystery_run.py                      # writes assets/histories/mystery_run_seed0.json

GRPO from the shipped model with the defaults of ``python -m grpo_lab train`` (16 prompts x 8, lr 1e-4),
12 steps, seed 0, with a reward function whose bug pays every answer: it compares the answer with itself.
Held-out greedy accuracy on 500 problems before and after, scored by the task's real reward. The command
line has no switch for a custom reward, hence this script; its JSON has the keys of the command line's.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from pathlib import Path

from grpo_lab.io import save_json
from grpo_lab.lab.metrics import evaluate
from grpo_lab.lab.tasks import Task, get_task, sum3_features
from grpo_lab.train.trainer import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parents[1]


def buggy_reward(completion: str, answer: int, finished: bool = True) -> float:
    """Meant to compare the completion's last number with the answer; compares the answer with itself."""
    numbers = "".join(ch if ch.isdigit() else " " for ch in completion).split()
    last = int(numbers[-1]) if numbers else None
    return float(answer == answer or last == answer)  # the typo: `answer == answer`, not `last == answer`


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "assets" / "histories" / "mystery_run_seed0.json"))
    args = parser.parse_args()
    task = get_task("sum3")
    cfg = TrainConfig(algo="grpo", steps=args.steps, seed=args.seed)
    t = Trainer(cfg, task=Task("sum3", task.train, task.test, buggy_reward, features=sum3_features))
    ev = dict(n_prompts=500, greedy=True, max_new_tokens=cfg.max_new_tokens)
    before = evaluate(t.model, t.tokenizer, task, **ev)  # the real task's reward, not the buggy one
    t0 = time.perf_counter()
    t.train()
    train_seconds = time.perf_counter() - t0
    after = evaluate(t.model, t.tokenizer, task, **ev)
    summary = lambda e: {"accuracy": e["accuracy"], "mean_length": e["length_mean"], "n": e["n_prompts"]}  # noqa: E731
    run = {
        "algo": "grpo", "seed": args.seed, "steps": t.step,
        "wall_seconds": None, "train_seconds": round(train_seconds, 2),
        "before": summary(before), "after": summary(after),
        "evals": [{"step": t.step, "accuracy": after["accuracy"], "length_mean": after["length_mean"]}],
        "peak_memory_mb": None, "config": asdict(cfg), "history": t.history,
    }
    save_json(run, args.out)
    print(f"wrote {args.out}: {t.step} steps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
