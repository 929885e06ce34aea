"""grpo_lab.scale.trl_bridge: the lab's presets as TRL GRPOConfig fields, what TRL lacks, TRL's loss through the
stand-in, the reward adapter, and a real (tiny) GRPOTrainer run on the shipped model.

Expected values are written out by hand from the papers' settings (ALGORITHMS.md) and from TRL's
documented field meanings (trl 1.16, ``trl/trainer/grpo_config.py``), not read back from the code.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.testing import assert_close
from trl import GRPOConfig

from grpo_lab.algorithms import PRESETS, get_algorithm
from grpo_lab.core.losses import policy_loss
from grpo_lab.scale.engines import gaps
from grpo_lab.scale.trl_bridge import (
    grpo_config_kwargs,
    make_trl_trainer,
    reward_function,
    trl_history,
    trl_loss_type,
    trl_policy_loss,
)
from grpo_lab.train.trainer import TrainConfig

# (preset) -> the GRPOConfig fields that make it, by hand, for 16 prompts x 8, 32 new tokens
EXPECTED = {
    "grpo": dict(
        loss_type="grpo",
        importance_sampling_level="token",
        epsilon=0.2,
        epsilon_high=0.2,
        scale_rewards="group",
        beta=0.0,
        steps_per_generation=1,
        per_device_train_batch_size=128,
        num_generations=8,
    ),
    "dr_grpo": dict(loss_type="dr_grpo", scale_rewards="none", max_completion_length=32, epsilon_high=0.2),
    "dapo": dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28, mask_truncated_completions=False),
    "gspo": dict(
        loss_type="grpo",
        importance_sampling_level="sequence",
        epsilon=3e-4,
        epsilon_high=4e-4,
        steps_per_generation=4,  # the paper's 4 mini-batches: 4 optimiser steps of 32 completions per rollout
        per_device_train_batch_size=32,
    ),
    "gfpo": dict(loss_type="dapo", num_generations=8),
    "ppo": dict(beta=0.0),  # PPO's KL lives in the reward, which GRPOTrainer cannot do (a gap, below)
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_config_fields_match_the_hand_table_and_build_a_real_grpo_config(name, tmp_path):
    kw = grpo_config_kwargs(name, TrainConfig())
    for field, want in EXPECTED[name].items():
        assert kw[field] == want, (name, field, kw[field], want)
    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert set(kw) <= known, sorted(set(kw) - known)
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False, **kw)
    assert args.loss_type == kw["loss_type"] and args.epsilon_high == kw["epsilon_high"]
    assert args.generation_batch_size == 128  # one lab rollout, whatever the number of mini-batches


def test_minibatches_and_epochs_become_steps_per_generation_and_num_iterations():
    kw = grpo_config_kwargs(
        get_algorithm("grpo", minibatches=4, epochs=2), TrainConfig(prompts_per_step=8, group_size=4)
    )
    assert (kw["steps_per_generation"], kw["per_device_train_batch_size"], kw["num_iterations"]) == (4, 8, 2)
    with pytest.raises(ValueError, match="minibatches must divide"):
        grpo_config_kwargs(get_algorithm("grpo", minibatches=3), TrainConfig(prompts_per_step=8, group_size=4))


def test_dual_clip_becomes_delta_and_kl_matches_the_lab():
    kw = grpo_config_kwargs(get_algorithm("grpo", dual_clip=3.0, beta=0.04))
    assert kw["delta"] == 3.0 and kw["beta"] == 0.04 and kw["use_bias_correction_kl"] is False


def test_loss_type_mapping_and_bad_input():
    assert [trl_loss_type(a) for a in ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")] == [
        "grpo",
        "dapo",
        "dr_grpo",
    ]
    with pytest.raises(ValueError, match="aggregation"):
        trl_loss_type("token_sum")
    with pytest.raises(ValueError, match="algo"):
        grpo_config_kwargs(3)


def trl_gaps(algo):
    return gaps(algo, "trl")


def test_gaps_name_what_trl_lacks():
    assert trl_gaps("grpo") == [] and trl_gaps("dr_grpo") == [] and trl_gaps("gspo") == []
    ppo = " ".join(trl_gaps("ppo"))
    assert "critic" in ppo and "reward" in ppo
    assert "GFPO" in " ".join(trl_gaps("gfpo"))
    dapo = " ".join(trl_gaps("dapo"))
    assert "dynamic sampling" in dapo and "overlong" not in dapo  # the soft penalty is a TRL reward function
    assert "k3" in " ".join(trl_gaps(get_algorithm("grpo", beta=0.1, kl_kind="k2")))


def test_trl_policy_loss_equals_the_lab_and_checks_its_inputs():
    torch.manual_seed(0)
    logp = -torch.rand(4, 5, dtype=torch.float64) - 0.1
    old = logp + 0.3 * torch.randn(4, 5, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    trl, metrics = trl_policy_loss(
        logp, old, adv, mask, loss_type="dr_grpo", epsilon=0.2, epsilon_high=0.28, max_completion_length=8
    )
    lab, _ = policy_loss(
        logp, old, adv, mask, clip_low=0.2, clip_high=0.28, aggregation="seq_mean_token_sum_norm", max_len=8
    )
    assert_close(trl, lab, rtol=1e-12, atol=1e-14)
    assert "clip_ratio/region_mean" in metrics
    with pytest.raises(ValueError, match="loss_type"):
        trl_policy_loss(logp, old, adv, mask, loss_type="cispo")
    with pytest.raises(ValueError, match="ref_logp"):
        trl_policy_loss(logp, old, adv, mask, beta=0.1)
    with pytest.raises(ValueError, match="advantages"):
        trl_policy_loss(logp, old, adv[:3], mask)
    with pytest.raises(ValueError, match="mask"):
        trl_policy_loss(logp, old, adv, mask[:, :3])


class _Tok:
    eos_token_id = 2


def test_reward_adapter_scores_like_the_task_and_needs_eos():
    from grpo_lab.lab.tasks import get_task

    task = get_task("sum3", n_train=8, n_test=8)
    reward = reward_function(task, _Tok())
    out = reward(
        prompts=["07+85+29="] * 4,
        completions=["121", "92,121", "121", "120"],
        completion_ids=[[5, 6, 2], [5, 2], [5, 6, 7], [5, 2]],
        answer=[121] * 4,
        trainer_state=None,
    )
    assert out == [1.0, 1.0, 0.0, 0.0]  # the third never ended with EOS (truncated), the fourth is wrong


def test_make_trl_trainer_refuses_what_trl_cannot_run():
    with pytest.raises(ValueError, match="critic"):
        make_trl_trainer(None, None, None, algo="ppo")
    with pytest.raises(ValueError, match="dynamic sampling"):
        make_trl_trainer(None, None, None, algo="dapo")


def test_a_real_grpo_trainer_run_on_the_tiny_model(tmp_path):
    from grpo_lab.lab.models import load_policy
    from grpo_lab.lab.tasks import get_task

    model, tok = load_policy("tiny-sum3", device="cpu")
    before = [p.detach().clone() for p in model.parameters()]
    task = get_task("sum3", n_train=64, n_test=8)
    trainer = make_trl_trainer(
        model,
        tok,
        task,
        algo=get_algorithm("dapo", dynamic_sampling=False),
        steps=2,
        prompts_per_step=2,
        group_size=4,
        max_new_tokens=32,
        output_dir=str(tmp_path),
    )
    assert len(trainer.reward_funcs) == 2  # the task's reward and DAPO's soft overlong punishment
    trainer.train()
    hist = trl_history(trainer)
    # TRL numbers optimiser steps and logs once per rollout: DAPO's preset makes 4 per rollout, so 1 and 5
    assert [h["step"] for h in hist] == [1, 5]
    assert all(0.0 <= h["accuracy"] <= 1.0 and h["step_seconds"] > 0 and h["length_mean"] >= 1 for h in hist)
    assert any((p.detach() - b).abs().max() > 0 for p, b in zip(model.parameters(), before))


def test_the_loss_types_split_into_the_labs_four_and_those_that_change_the_per_token_loss():
    """TRL documents its loss_type values in the field's help ("Supported values are ..."); the lab computes four."""
    import re

    from grpo_lab.scale.trl_bridge import TRL_LOSS_TYPES, TRL_OTHER_LOSS_TYPES

    help_ = next(f for f in dataclasses.fields(GRPOConfig) if f.name == "loss_type").metadata["help"]
    supported = re.findall(r"'(\w+)'", help_.split("Supported values are")[1].split(".")[0])
    assert sorted(supported) == sorted(("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"))
    assert sorted(TRL_LOSS_TYPES + TRL_OTHER_LOSS_TYPES) == sorted(supported)
