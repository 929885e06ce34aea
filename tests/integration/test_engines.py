"""grpo_lab.scale.engines, checked against the installed engines: every TRL field is a field of TRL 1.16's
``GRPOConfig``, every TRL metric key is in the log of a real ``GRPOTrainer`` step on the shipped tiny model, and
every verl key composes with verl 0.9.1's own Hydra config and is read by the code ``main_ppo`` runs (the V1
trainer, the reward loop), at the line fragment the table names. What an engine cannot run has one home."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import verl_env
from verl_env import compose_verl, get

from grpo_lab.algorithms import PRESETS, get_algorithm
from grpo_lab.scale.engines import (
    METRICS,
    SETTINGS,
    TRL_KL_ONLY_WITH_BETA,
    VERL_READS,
    gaps,
    refusal,
    setting,
    verl_keys,
)
from grpo_lab.scale.trl_recipe import trl_settings
from grpo_lab.scale.verl_recipe import verl_overrides

verl_python = verl_env.verl_python  # the fixture


def test_every_trl_field_of_the_table_and_of_the_recipes_is_a_grpo_config_field():
    from trl import GRPOConfig

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    named = {f for s in SETTINGS for f in s.trl if " " not in f}
    assert named - fields == set()
    for algo in ("grpo", "dr_grpo", "gspo", get_algorithm("dapo", dynamic_sampling=False)):
        assert set(trl_settings(algo)) - fields == set()


def test_every_verl_key_of_the_table_has_where_verl_reads_it():
    assert sorted(verl_keys()) == sorted(VERL_READS)


def test_counts_and_sizes_are_said_where_they_differ():
    mb = setting("minibatches")
    assert "COUNT" in mb.note and "SIZE" in mb.note and mb.verl == ("actor_rollout_ref.actor.ppo_mini_batch_size",)
    assert "no trainer.seed" in setting("seed").note
    with pytest.raises(ValueError, match="lab"):
        setting("no_such_knob")


@pytest.fixture(scope="module")
def trl_logs(tmp_path_factory):
    """TRL's own log of one optimiser step on the tiny model: at beta = 0, and at beta = 0.04."""
    from grpo_lab.lab.models import load_policy
    from grpo_lab.lab.tasks import get_task
    from grpo_lab.scale.trl_bridge import make_trl_trainer

    task = get_task("sum3", n_train=16, n_test=4)
    logs = {}
    for beta in (0.0, 0.04):
        model, tok = load_policy("tiny-sum3", device="cpu")
        trainer = make_trl_trainer(
            model,
            tok,
            task,
            algo=get_algorithm("grpo", beta=beta),
            steps=1,
            prompts_per_step=2,
            group_size=4,
            max_new_tokens=8,
            output_dir=str(tmp_path_factory.mktemp(f"beta{beta}")),
        )
        trainer.train()
        logs[beta] = next(r for r in trainer.state.log_history if "reward" in r)
    return logs


def test_every_trl_metric_key_is_in_trls_own_log(trl_logs):
    for m in METRICS:
        if not m.trl:
            continue
        assert m.trl in trl_logs[0.04], (m.lab, m.trl, sorted(trl_logs[0.04]))
        assert (m.trl in trl_logs[0.0]) == (m.trl not in TRL_KL_ONLY_WITH_BETA), (m.lab, m.trl)
    # TRL's reward_std is the batch's std, not the groups': both are logged next to each other
    assert "reward_std" in trl_logs[0.0] and "frac_reward_zero_std" in trl_logs[0.0]


def test_trls_reward_std_is_over_the_batch_and_frac_reward_zero_std_over_groups():
    """The formulas the table states, read from TRL's source."""
    import inspect

    from trl import GRPOTrainer

    src = inspect.getsource(GRPOTrainer)
    assert 'self._metrics[mode]["reward_std"].append(nanstd(rewards).item())' in src
    assert "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)" in src
    assert 'self._metrics[mode]["frac_reward_zero_std"].append(is_std_zero.float().mean().item())' in src
    assert "if self.beta != 0.0:" in src


def test_every_verl_key_composes_and_is_read_where_the_table_says(verl_python):
    out = json.loads(compose_verl(verl_python, []).stdout)
    root = Path(out["root"])
    missing, unread = [], []
    for key, (rel, fragment) in VERL_READS.items():
        if not key.startswith("+"):
            try:
                get(out["config"], key)
            except KeyError:
                missing.append(key)
        if fragment not in (root / rel).read_text():
            unread.append((key, rel, fragment))
    assert not missing and not unread, (missing, unread)
    # the + keys are not in the trainer config: they are appended, and only the dapo reward manager reads them
    for key in (k for k in VERL_READS if k.startswith("+")):
        with pytest.raises(KeyError):
            get(out["config"], key)
    for m in METRICS:
        if m.verl:
            rel, fragment = m.verl_read
            assert fragment in (root / rel).read_text(), (m.lab, m.verl)


def test_verl_has_no_trainer_seed_and_its_top_level_custom_reward_function_is_not_what_the_recipe_sets(verl_python):
    proc = compose_verl(verl_python, ["trainer.seed=0"])
    assert proc.returncode != 0 and "Could not override 'trainer.seed'" in proc.stderr
    recipe = verl_overrides("grpo")
    assert "reward.custom_reward_function.path=reward.py" in recipe
    assert not any(o.startswith("custom_reward_function.") for o in recipe)


def test_verls_dual_clip_is_always_on_in_the_vanilla_loss_unless_set(verl_python):
    out = json.loads(compose_verl(verl_python, []).stdout)
    assert get(out["config"], "actor_rollout_ref.actor.clip_ratio_c") == 3.0
    src = (Path(out["root"]) / "trainer" / "ppo" / "core_algos.py").read_text()
    vanilla = src[src.index("def compute_policy_loss_vanilla") : src.index("def compute_policy_loss_gspo")]
    gspo = src[src.index("def compute_policy_loss_gspo") :]
    gspo = gspo[: gspo.index("\ndef ", 10)]
    assert "pg_losses3 = -advantages * clip_ratio_c" in vanilla and "clip_ratio_c" not in gspo


def test_one_home_for_what_an_engine_cannot_run():
    exported = {(a, e) for a in PRESETS for e in ("trl", "verl") if refusal(a, e) is None}
    assert exported == {
        ("grpo", "trl"),
        ("dr_grpo", "trl"),
        ("gspo", "trl"),
        ("grpo", "verl"),
        ("dr_grpo", "verl"),
        ("gspo", "verl"),
        ("dapo", "verl"),
        ("ppo", "verl"),
    }
    assert all(refusal(a, e) == (gaps(a, e) or [None])[0] for a in PRESETS for e in ("trl", "verl"))
    assert "--task gsm8k" in refusal("gfpo", "trl")
    with pytest.raises(ValueError, match="engine"):
        gaps("grpo", "deepspeed")


def _code(names) -> str:
    return ", ".join(f"`{n}`" for n in names) or "-"


def test_the_docs_page_quotes_the_table_row_for_row():
    """docs/engines.md holds SETTINGS and METRICS as written here: a change to the table shows there."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "engines.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    want = [f"| `{s.lab}` | {_code(s.trl)} | {_code(s.verl)} | {s.note} |" for s in SETTINGS]
    want += [
        f"| `{m.lab}` | {_code([m.trl] if m.trl else [])} | {m.trl_means} | "
        f"{_code([m.verl] if m.verl else [])} | {m.verl_means} |"
        for m in METRICS
    ]
    assert rows == want
