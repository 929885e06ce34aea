"""``paired.paired_updates``: one batch, several update rules, each from the same weights.

What must hold, whatever the numbers: identical arms differ by exactly zero (the state is restored
between arms); the followed arm is an ordinary training run (same weights as ``Trainer.train``);
with one update per rollout the ratio is 1, so the upper clip cannot act and clip-higher changes
nothing (ALGORITHMS.md); and a much tighter upper clip holds back the positive-advantage tokens.
"""

from __future__ import annotations

import json
import signal

import pytest
import torch

from grpo_lab.study.paired import PAIRED_METRICS, format_paired_summary, paired_updates
from grpo_lab.train.trainer import TrainConfig, Trainer


def _trainer(fresh_policy, small_task, **kw):
    model, tok = fresh_policy()
    overrides = kw.pop("algo_overrides", {})
    cfg = TrainConfig(
        algo=kw.pop("algo", "grpo"),
        prompts_per_step=kw.pop("prompts_per_step", 2),
        group_size=4,
        max_new_tokens=kw.pop("max_new_tokens", 10),
        seed=3,
        lr=kw.pop("lr", 1e-4),
        algo_overrides=overrides,
        **kw,
    )
    return Trainer(cfg, model=model, tokenizer=tok, task=small_task)


def test_identical_arms_differ_by_exactly_zero(fresh_policy, small_task):
    t = _trainer(fresh_policy, small_task, algo_overrides={"minibatches": 2, "epochs": 2})
    out = paired_updates(None, {"a": {"clip_high": 0.28}, "b": {"clip_high": 0.28}}, steps=2, progress=False, trainer=t)
    for h in out["history"]:
        assert h["arms"]["a"] == h["arms"]["b"]
    diffs = out["summary"]["b"]["vs_first"]
    assert all(diffs[m]["diff"] == 0.0 for m in diffs)


def test_the_followed_arm_is_an_ordinary_training_run(fresh_policy, small_task):
    overrides = {"minibatches": 2}
    plain = _trainer(fresh_policy, small_task, algo_overrides={**overrides, "clip_high": 0.28})
    plain.train(3, progress=False)
    paired = _trainer(fresh_policy, small_task, algo_overrides=overrides)
    paired_updates(
        None, {"symmetric": {}, "higher": {"clip_high": 0.28}}, steps=3, follow="higher", progress=False, trainer=paired
    )
    assert paired.step == plain.step == 3
    for (name, p), q in zip(plain.model.state_dict().items(), paired.model.state_dict().values()):
        assert torch.equal(p, q), name


def test_with_one_update_per_rollout_an_arm_that_varies_only_the_clip_is_refused(fresh_policy, small_task):
    # The only update is on-policy: every ratio is exactly 1, inside any clip range, so the arms would
    # differ by exactly zero. Said before any step, as the command line does for --set fields without effect.
    t = _trainer(fresh_policy, small_task)
    for field, values in (("clip_high", (0.2, 0.28)), ("clip_low", (0.2, 0.1)), ("dual_clip", (None, 3.0))):
        arms = {f"{field}={v}": {field: v} for v in values}
        with pytest.raises(ValueError, match=f"the arms vary {field}, which has no effect with one update per"):
            paired_updates(None, arms, steps=1, progress=False, trainer=t)
    assert t.step == 0 and t.history == []
    # one arm with a second epoch: its ratios leave 1, so the clip can act there
    out = paired_updates(
        None, {"a": {"clip_high": 0.2}, "b": {"clip_high": 0.28, "epochs": 2}}, steps=1, progress=False, trainer=t
    )
    assert [out["history"][0]["arms"][n]["updates"] for n in "ab"] == [1, 2]


def test_more_minibatches_than_rows_is_refused_not_run_under_a_false_label(fresh_policy, small_task):
    # 2 prompts x G=4 = 8 rows: 500 mini-batches cannot be made; the arm would have run 8.
    t = _trainer(fresh_policy, small_task)
    with pytest.raises(ValueError, match=r"arms\['many'\] asks for minibatches=500, but a batch has 8 rows"):
        paired_updates(
            None, {"one": {"minibatches": 1}, "many": {"minibatches": 500}}, steps=1, progress=False, trainer=t
        )
    out = paired_updates(
        None, {"one": {"minibatches": 1}, "all": {"minibatches": 8}}, steps=1, progress=False, trainer=t
    )
    assert out["summary"]["one"]["updates"] == 1 and out["summary"]["all"]["updates"] == 8  # what each arm ran
    table = format_paired_summary(out["summary"]).splitlines()
    assert table[0].startswith("| arm | updates |") and table[3].startswith("| all | 8 |")


def test_an_arm_field_also_set_in_the_config_is_refused(fresh_policy, small_task):
    t = _trainer(fresh_policy, small_task, algo_overrides={"epochs": 3})
    with pytest.raises(ValueError, match=r"arms\['epochs=1'\] sets epochs, which the config's algo_overrides"):
        paired_updates(None, {"epochs=1": {"epochs": 1}, "epochs=2": {"epochs": 2}}, steps=1, progress=False, trainer=t)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_keeps_the_steps_measured_so_far(fresh_policy, small_task, monkeypatch, sig):
    t = _trainer(fresh_policy, small_task, algo_overrides={"minibatches": 2})
    calls = []
    collect = t.collect

    def collect_then_signal():  # the signal arrives during the second step's sampling
        calls.append(1)
        if len(calls) == 2:
            signal.raise_signal(sig)
        return collect()

    monkeypatch.setattr(t, "collect", collect_then_signal)
    out = paired_updates(None, {"a": {}, "b": {"clip_high": 0.28}}, steps=5, progress=False, trainer=t)
    assert out["stop_reason"] == "interrupted" and out["steps"] == 2 and len(out["history"]) == 2
    assert out["summary"]["b"]["vs_first"]["entropy_change"]["steps"] == 2
    assert t.step == 2


def test_a_tight_upper_clip_holds_back_positive_tokens(fresh_policy, small_task):
    # clip_high 1e-4: after the first mini-batch a positive-advantage token's ratio is past 1 + 1e-4 and its
    # gradient stops; clip_high 10: it never does. The positive tokens must gain less under the tight clip.
    t = _trainer(
        fresh_policy, small_task, prompts_per_step=4, max_new_tokens=32, algo_overrides={"minibatches": 4, "epochs": 2}
    )
    out = paired_updates(
        None,
        {"tight": {"clip_high": 1e-4}, "loose": {"clip_high": 10.0}},
        steps=4,
        progress=False,
        trainer=t,
        low_p=1.0,
    )
    s = out["summary"]
    assert s["tight"]["clip_frac_high"] > s["loose"]["clip_frac_high"] == 0.0
    d = s["loose"]["vs_first"]["pos_logp_change"]
    assert d["diff"] > 0 and d["share_positive"] == 1.0
    table = format_paired_summary(s)
    assert "loose - tight" in table and all(m in table for m in PAIRED_METRICS)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"arms": {"only": {}}}, "arms must name at least two"),
        ({"arms": {"a": {}, "b": {"dynamic_sampling": True}}}, r"arms\['b'\] may only change the update's fields"),
        ({"follow": "c"}, "follow must be one of the arms"),
        ({"low_p": 0.0}, r"low_p must be in \(0, 1\]"),
        ({"steps": 0}, "steps must be a positive integer"),
    ],
)
def test_bad_arguments_are_named(fresh_policy, small_task, kwargs, match):
    t = _trainer(fresh_policy, small_task)
    args = {"arms": {"a": {}, "b": {"clip_high": 0.28}}, "steps": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        paired_updates(None, progress=False, trainer=t, **args)


def test_ppo_is_refused_because_its_advantages_are_per_token(fresh_policy, small_task):
    t = _trainer(fresh_policy, small_task, algo="ppo")
    with pytest.raises(ValueError, match="needs an algorithm with group advantages"):
        paired_updates(None, {"a": {}, "b": {"clip_high": 0.28}}, steps=1, progress=False, trainer=t)


def test_cli_paired_writes_json_and_refuses_one_value(tmp_path, capsys):
    from grpo_lab.cli.main import main

    out = tmp_path / "paired.json"
    rc = main(
        [
            "paired",
            "--vary",
            "clip_high=0.2,0.28",
            "--steps",
            "1",
            "--prompts",
            "2",
            "--group-size",
            "4",
            "--max-new-tokens",
            "10",
            "--set",
            "minibatches=2",
            "--quiet",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    s = json.loads(out.read_text())
    assert list(s["arms"]) == ["clip_high=0.2", "clip_high=0.28"] and s["config"]["algo_overrides"] == {
        "minibatches": 2
    }
    assert "clip_high=0.28 - clip_high=0.2" in capsys.readouterr().out
    with pytest.raises(SystemExit) as err:
        main(["paired", "--vary", "clip_high=0.2"])
    assert err.value.code == 2


def test_a_committed_history_from_before_updates_were_kept_still_summarises():
    from grpo_lab.study.histories import load_history
    from grpo_lab.study.paired import paired_summary

    run = load_history("paired_cliphigher_lr1e-4_seed0")  # notebook 05 reads these
    assert all("updates" not in arm for h in run["history"] for arm in h["arms"].values())
    s = paired_summary(run["history"][:10])
    assert all(arm["updates"] is None for arm in s.values())
    assert "| clip_high=0.2 | - |" in format_paired_summary(s)
    assert paired_summary([]) == {}
