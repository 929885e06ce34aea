"""The committed runs that notebooks 02 and 03 read were made with the settings their prose states.

Notebook 02 compares PPO's preset (2 epochs x 2 mini-batches) with 4 x 4 rollout by rollout, and 4 x 4 with
and without an approx-KL early stop on the same five seeds; notebook 04 runs GRPO with its own aggregation and
with the constant normaliser, nothing else changed, on five seeds; notebook 03
compares a GRPO run without a KL term with one that pays for KL in the loss; notebooks 03, 06 and 08 read
the two races, which they say ran today's presets, one with the same seconds and one with the same samples
for every run. If a file is regenerated with other settings, these fail before the prose silently stops
describing it.
"""

from __future__ import annotations

import pytest

from grpo_lab.study.histories import load_history


@pytest.mark.parametrize("name, epochs, minibatches", [("ppo_ep2mb2_seed0", 2, 2), ("ppo_ep4mb4_seed0", 4, 4)])
def test_ppo_tradeoff_runs_have_the_stated_updates_per_rollout(name, epochs, minibatches):
    run = load_history(name)
    assert run["algo"] == "ppo" and run["seed"] == 0
    assert (run["algorithm"]["epochs"], run["algorithm"]["minibatches"]) == (epochs, minibatches)
    assert run["steps"] == 40 and run["config"]["lr"] == 1e-4
    assert all(h["updates"] == epochs * minibatches for h in run["history"])  # none skipped


def test_ppo_tradeoff_runs_differ_only_in_updates_per_rollout():
    a, b = load_history("ppo_ep2mb2_seed0"), load_history("ppo_ep4mb4_seed0")
    differ = {k for k in a["algorithm"] if a["algorithm"][k] != b["algorithm"][k]}
    assert differ == {"epochs", "minibatches"}
    same_config = {k for k in a["config"] if k != "algo_overrides" and a["config"][k] != b["config"][k]}
    assert same_config == set()


@pytest.mark.parametrize("seed", range(5))
def test_target_kl_pair_changes_only_target_kl_on_the_same_seed(seed):
    plain, stopped = load_history(f"ppo_ep4mb4_seed{seed}"), load_history(f"ppo_ep4mb4_tkl0.02_seed{seed}")
    differ = {k for k in plain["algorithm"] if plain["algorithm"][k] != stopped["algorithm"][k]}
    assert differ == {"target_kl"} and stopped["algorithm"]["target_kl"] == 0.02
    assert (plain["algorithm"]["epochs"], plain["algorithm"]["minibatches"]) == (4, 4)
    same_config = {k for k in plain["config"] if k != "algo_overrides" and plain["config"][k] != stopped["config"][k]}
    assert same_config == set() and plain["seed"] == stopped["seed"] == seed and plain["steps"] == 40


@pytest.mark.parametrize("seed", range(5))
def test_aggregation_pair_changes_only_the_aggregation_on_the_same_seed(seed):
    grpo, const = load_history(f"grpo100_seed{seed}"), load_history(f"grpo100_tokensumnorm_seed{seed}")
    differ = {k for k in grpo["algorithm"] if grpo["algorithm"][k] != const["algorithm"][k]}
    assert differ == {"aggregation"} and grpo["algorithm"]["aggregation"] == "seq_mean_token_mean"
    assert const["algorithm"]["aggregation"] == "seq_mean_token_sum_norm" and grpo["algorithm"]["scale"] == "group"
    assert grpo["seed"] == const["seed"] == seed and grpo["steps"] == const["steps"] == 100


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_beta_pair_is_grpo_with_only_beta_changed(beta):
    run = load_history(f"grpo_beta{beta:g}_seed0")
    assert run["algo"] == "grpo" and run["seed"] == 0 and run["steps"] == 30
    alg = run["algorithm"]
    assert alg["beta"] == beta and alg["kl_kind"] == "k3" and not alg["kl_in_reward"]
    assert (alg["epochs"], alg["minibatches"]) == (1, 1)


@pytest.mark.parametrize(
    "pattern, seeds, budget",
    [
        ("timed_{algo}_seed{seed}", range(5), ("max_seconds", 90.0)),
        ("samples_{algo}_seed{seed}", range(3), ("max_samples", 6400)),
    ],
)
def test_the_races_ran_todays_presets_with_one_budget(pattern, seeds, budget):
    from grpo_lab.algorithms import PRESETS

    field, value = budget
    for algo in ("grpo", "dr_grpo", "gspo", "dapo", "ppo", "gfpo"):
        for seed in seeds:
            run = load_history(pattern.format(algo=algo, seed=seed))
            assert run["algo"] == algo and run["seed"] == seed and run["config"][field] == value
            preset = PRESETS[algo]
            differs = {k for k, v in run["algorithm"].items() if k != "name" and getattr(preset, k) != v}
            assert not differs, f"{pattern.format(algo=algo, seed=seed)}: ran {differs} unlike today's preset"
