"""Token ratios against GSPO's sequence ratio on answers whose length varies (notebook 06).

For each seed: one rollout of tiny-sum3-long (16 prompts x 8, up to 128 new tokens), split into 4 mini-batches,
three GSPO steps at the lab's lr (the preset's clip, AdamW, gradient clipping at 1), then the log-ratio of every
token of the batch to the policy that sampled it. Per completion it keeps the length, the sequence log-ratio
log s_i (the mean of its tokens' log-ratios), the mean |log r| and mean log r^2 of its tokens, the sign of its
advantage, the share of its sum of squared log-ratios held by its largest token, whether GSPO's clip would cut
it, and the share of its tokens a token-level clip of 0.2 would cut.

    OMP_NUM_THREADS=1 python tools/gspo_long_ratios.py --seeds 0 1 2 3 4 --json assets/histories/gspo_long_ratios.json
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpo_lab.algorithms import PRESETS  # noqa: E402
from grpo_lab.core.advantages import group_advantages  # noqa: E402
from grpo_lab.core.losses import policy_loss  # noqa: E402
from grpo_lab.io import save_json  # noqa: E402
from grpo_lab.lab.models import load_policy  # noqa: E402
from grpo_lab.lab.rollout import token_logps  # noqa: E402
from grpo_lab.lab.tasks import get_task  # noqa: E402
from grpo_lab.train.trainer import TrainConfig, Trainer  # noqa: E402

MODEL, PROMPTS, G, MAX_NEW, LR, MINIBATCHES, TOKEN_EPS = "tiny-sum3-long", 16, 8, 128, 1e-4, 4, 0.2


def one_seed(seed: int) -> dict:
    gspo = PRESETS["gspo"]
    model0, tok = load_policy(MODEL)
    cfg = TrainConfig(
        algo="gspo", model=MODEL, prompts_per_step=PROMPTS, group_size=G, max_new_tokens=MAX_NEW, seed=seed
    )
    batch = Trainer(cfg, model=model0, tokenizer=tok, task=get_task("sum3")).collect()
    ro, mask = batch.rollout, batch.rollout.completion_mask.float()
    adv = group_advantages(batch.rewards, G)

    def logps(model: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return token_logps(
            model, ro.prompt_ids[rows], ro.prompt_mask[rows], ro.completion_ids[rows], ro.completion_mask[rows], 1.0
        )[0]

    everything = torch.arange(len(adv))
    with torch.no_grad():
        old = logps(model0, everything)
    model = copy.deepcopy(model0)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    order = torch.randperm(len(adv), generator=torch.Generator().manual_seed(seed)).chunk(MINIBATCHES)
    for rows in order[:-1]:  # three steps: the last mini-batch is where the preset's fourth step would read its ratios
        loss, _ = policy_loss(
            logps(model, rows),
            old[rows],
            adv[rows],
            mask[rows],
            clip_low=gspo.clip_low,
            clip_high=gspo.clip_high,
            ratio_level="sequence",
        )
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    with torch.no_grad():
        log_r = (logps(model, everything) - old) * mask
    length = mask.sum(1)
    log_s = log_r.sum(1) / length
    pos = adv > 0
    gspo_clipped = (pos & (log_s.exp() > 1 + gspo.clip_high)) | ((adv < 0) & (log_s.exp() < 1 - gspo.clip_low))
    r = log_r.exp()
    token_cut = (
        (pos.unsqueeze(1) & (r > 1 + TOKEN_EPS)) | ((adv < 0).unsqueeze(1) & (r < 1 - TOKEN_EPS))
    ) & mask.bool()
    return {
        "seed": seed,
        "last_minibatch": order[-1].tolist(),
        "length": length.tolist(),
        "log_s": log_s.tolist(),
        "mean_abs_log_r": ((log_r.abs()).sum(1) / length).tolist(),
        "mean_sq_log_r": ((log_r**2).sum(1) / length).tolist(),
        "top_token_share": ((log_r**2).max(1).values / (log_r**2).sum(1).clamp_min(1e-30)).tolist(),
        "advantage": adv.tolist(),
        "gspo_clipped": gspo_clipped.tolist(),
        "token_clip_share": (token_cut.sum(1) / length).tolist(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    gspo = PRESETS["gspo"]
    runs = [one_seed(s) for s in args.seeds]
    save_json(
        {
            "model": MODEL,
            "prompts": PROMPTS,
            "group_size": G,
            "max_new_tokens": MAX_NEW,
            "lr": LR,
            "minibatches": MINIBATCHES,
            "steps_taken": MINIBATCHES - 1,
            "clip_low": gspo.clip_low,
            "clip_high": gspo.clip_high,
            "token_eps": TOKEN_EPS,
            "runs": runs,
        },
        args.json,
    )
    print(f"wrote {args.json}: {len(runs)} seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
