"""Tests for ``python -m grpo_lab bench``: one tiny run (2 prompts x G=2, 8 new tokens, 2 pairs of runs of
the lab and TRL, each 1 warm-up + 2 timed steps) writes the documented JSON with sane values; the
arms alternate; the statistics match hand computations; the ablations switch exactly one speed-up
off and change no number; bad arguments exit 2 with one line.

No timing is asserted (the machine may be busy); what is checked is bookkeeping: counts, sums,
shares, order, and that both libraries did the same work (same prompts, tokens counted = tokens
generated).
"""

from __future__ import annotations

import json
import math
import statistics

import pytest
import torch

from grpo_lab.bench.config import ARMS, BenchConfig, run_order
from grpo_lab.bench.report import comparisons_for, pair_ratios
from grpo_lab.cli.main import main
from grpo_lab.lab.rollout import (
    SPEEDUPS,
    encode_prompts,
    sample_group,
    speedups_off,
    token_logps,
)
from grpo_lab.lab.tasks import sum3_dataset
from grpo_lab.train.trainer import TrainConfig, Trainer

PROMPTS, G, T, STEPS, WARMUP, PAIRS = 2, 2, 8, 2, 1, 2
TINY = ["bench", "--prompts", str(PROMPTS), "--group-size", str(G), "--max-new-tokens", str(T), "--steps", str(STEPS),
        "--warmup", str(WARMUP), "--pairs", str(PAIRS), "--rollout-repeats", "1"]  # fmt: skip


def call(argv) -> int:
    try:
        return main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    assert call(TINY + ["--only", "lab", "trl", "rollout", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def runs_of(result, arm):
    return [r for r in result["runs"] if r["arm"] == arm]


def test_the_json_has_every_part(result):
    for key in (
        "config",
        "versions",
        "machine",
        "fairness",
        "order",
        "runs",
        "arms",
        "comparisons",
        "rollout",
        "speedup",
        "speedup_interval",
        "same_prompts",
    ):
        assert key in result, key
    assert result["versions"]["trl"]
    t = result["config"]["train"]
    assert t["prompts_per_step"] == PROMPTS and t["group_size"] == G and t["track_kl"] is False
    assert result["config"]["pairs"] == PAIRS and result["config"]["arms"] == ["lab", "trl"]
    assert result["machine"]["device_name"]


def test_the_arms_alternate_lab_trl_trl_lab(result):
    assert result["order"] == [[0, "lab"], [0, "trl"], [1, "trl"], [1, "lab"]]
    assert [[r["pair"], r["arm"]] for r in result["runs"]] == result["order"]


def test_run_order_reverses_every_other_pair():
    assert run_order(("lab", "trl"), 3) == [(0, "lab"), (0, "trl"), (1, "trl"), (1, "lab"), (2, "lab"), (2, "trl")]
    assert run_order(("a", "b", "c"), 2) == [(0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a")]
    # every arm runs first as often as last over an even number of pairs
    order = run_order(tuple(ARMS), 4)
    firsts = [order[i * len(ARMS)][1] for i in range(4)]
    assert firsts == [ARMS[0], ARMS[-1], ARMS[0], ARMS[-1]]


@pytest.mark.parametrize("arm", ["lab", "trl"])
def test_each_run_times_every_step_and_its_parts_add_up(result, arm):
    for r in runs_of(result, arm):
        steps = r["step_seconds"]
        assert len(steps) == STEPS and len(r["warmup_step_seconds"]) == WARMUP
        assert all(s > 0 for s in steps)
        assert min(steps) <= r["median_step_seconds"] <= max(steps)
        parts = r["breakdown_seconds"]
        assert set(parts) == {"generation", "reward", "forward_backward", "optimizer", "other"}
        assert parts["generation"] > 0 and parts["forward_backward"] > 0 and parts["optimizer"] > 0
        assert all(parts[k] >= 0 for k in ("generation", "reward", "forward_backward", "optimizer"))
        assert sum(parts.values()) == pytest.approx(r["mean_step_seconds"], rel=1e-6)
        assert sum(r["breakdown_fraction"].values()) == pytest.approx(1.0, rel=1e-6)
        assert r["completions"] == STEPS * PROMPTS * G
        assert r["completions"] <= r["tokens"] <= r["completions"] * T  # at least one token (EOS or not) per completion
        assert r["mean_completion_length"] == pytest.approx(r["tokens"] / r["completions"])
        assert 0.0 <= r["reward_mean"] <= 1.0
        m = r["memory"]
        assert m["peak_mb"] >= m["before_mb"] > 0 and m["peak_added_mb"] >= 0
        assert r["threads"] >= 1


def test_tokens_per_phase_and_time_per_token(result):
    # Prompt tokens: each sum3 prompt is <bos> + 9 characters ("07+85+29="), G rows each, every step.
    per_step_prompt_tokens = PROMPTS * G * 10
    for r in result["runs"]:
        assert r["prompt_tokens"] == STEPS * per_step_prompt_tokens, r["arm"]
        assert r["update_tokens"] == r["prompt_tokens"] + r["tokens"]
        n = len(r["step_seconds"])
        spt = r["seconds_per_token"]
        assert spt["step"] == pytest.approx(sum(r["step_seconds"]) / r["tokens"], rel=1e-3)
        assert spt["generation"] == pytest.approx(r["breakdown_seconds"]["generation"] * n / r["tokens"], rel=1e-6)
        assert spt["forward_backward"] == pytest.approx(
            r["breakdown_seconds"]["forward_backward"] * n / r["update_tokens"], rel=1e-6
        )


def test_arm_summary_pools_every_timed_step(result):
    for arm in ("lab", "trl"):
        a, runs = result["arms"][arm], runs_of(result, arm)
        steps = [s for r in runs for s in r["step_seconds"]]
        assert a["runs"] == PAIRS and a["step_spread"]["n"] == PAIRS * STEPS
        assert a["median_step_seconds"] == pytest.approx(statistics.median(steps))
        assert a["step_spread"]["min"] == pytest.approx(min(steps)) and a["step_spread"]["max"] == pytest.approx(
            max(steps)
        )
        assert a["tokens_per_step"] == pytest.approx(sum(r["tokens"] for r in runs) / (PAIRS * STEPS))
        assert a["seconds_per_token"]["step"] == pytest.approx(sum(steps) / sum(r["tokens"] for r in runs), rel=1e-3)


def test_the_speedup_is_the_median_of_the_per_pair_ratios(result):
    lab, trl = runs_of(result, "lab"), runs_of(result, "trl")
    ratios = [t["median_step_seconds"] / lb["median_step_seconds"] for lb, t in zip(lab, trl, strict=True)]
    (c,) = result["comparisons"]
    assert (c["lab_arm"], c["trl_arm"]) == ("lab", "trl") and c["pairs"] == PAIRS
    assert c["step_ratios"] == pytest.approx(ratios)
    assert result["speedup"] == pytest.approx(statistics.median(ratios))
    token = [t["seconds_per_token"]["step"] / lb["seconds_per_token"]["step"] for lb, t in zip(lab, trl, strict=True)]
    assert c["median_token_ratio"] == pytest.approx(statistics.median(token))
    # two pairs: the exact bootstrap's resamples are {a,a}, {a,b}, {b,a}, {b,b}; the 95% bounds are min and max
    assert result["speedup_interval"] == pytest.approx([min(ratios), max(ratios)])


def test_both_libraries_saw_the_prompts_the_lab_trainer_draws_in_the_same_order(result):
    # What a fresh Trainer with the same seed draws, step by step (its own prompt stream).
    trainer = Trainer(TrainConfig(algo="grpo", seed=0, prompts_per_step=PROMPTS, group_size=G, max_new_tokens=T))
    want = [list(trainer.next_prompts(PROMPTS)["prompt"]) for _ in range(WARMUP + STEPS)]
    for r in result["runs"]:
        assert r["prompts"] == want, r["arm"]
    assert result["same_prompts"] is True


def test_lab_tokens_counted_equal_the_tokens_its_trainer_generated(result):
    # The bench counts tokens from the rollouts; the trainer's own metrics give mean length x completions.
    for r in runs_of(result, "lab"):
        timed = r["learning"][WARMUP:]
        assert r["tokens"] == round(sum(h["length_mean"] * PROMPTS * G for h in timed))


def test_rollout_counts_tokens_and_both_generators_agree_greedily(result):
    ro = result["rollout"]
    assert ro["greedy_outputs_match"] is True
    for name in ("lab_sample_group", "hf_generate"):
        r = ro[name]
        assert r["calls"] == 1 and r["completions_per_call"] == PROMPTS * G
        assert r["completions_per_call"] <= r["tokens"] <= r["calls"] * r["completions_per_call"] * T
        assert r["tokens_per_second"] * r["seconds"] == pytest.approx(r["tokens"])
    ratio = ro["lab_sample_group"]["tokens_per_second"] / ro["hf_generate"]["tokens_per_second"]
    assert ro["speedup_tokens_per_second"] == pytest.approx(ratio)
    assert math.isfinite(ratio) and ratio > 0


def test_in_process_rollout_only(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert (
        call(
            [
                "bench",
                "--only",
                "rollout",
                "--in-process",
                "--prompts",
                "1",
                "--group-size",
                "2",
                "--max-new-tokens",
                "4",
                "--rollout-repeats",
                "1",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())
    assert "rollout" in r and "arms" not in r and "speedup" not in r and r["comparisons"] == []
    assert "tokens/s" in capsys.readouterr().out


def test_an_ablation_runs_in_process_with_its_speedup_off_and_restores_it(tmp_path):
    out = tmp_path / "a.json"
    assert (
        call(
            [
                "bench",
                "--only",
                "lab_no_compaction",
                "--in-process",
                "--prompts",
                "1",
                "--group-size",
                "2",
                "--max-new-tokens",
                "4",
                "--steps",
                "1",
                "--warmup",
                "0",
                "--pairs",
                "1",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())
    assert r["runs"][0]["speedups_off"] == ["compact"] and r["arms"]["lab_no_compaction"]["runs"] == 1
    assert SPEEDUPS == {"share_prompt": True, "compact": True, "length_grouping": True}


def test_pair_ratios_divides_trl_by_the_lab_pair_by_pair():
    def run(step, per_token):
        return {"median_step_seconds": step, "seconds_per_token": {"step": per_token}}

    c = pair_ratios([run(1.0, 0.1), run(2.0, 0.1), run(1.0, 0.2)], [run(2.0, 0.3), run(3.0, 0.2), run(4.0, 0.2)])
    assert c["step_ratios"] == [2.0, 1.5, 4.0] and c["median_step_ratio"] == 2.0
    assert c["token_ratios"] == pytest.approx([3.0, 2.0, 1.0]) and c["median_token_ratio"] == pytest.approx(2.0)
    assert c["step_interval"]["method"] == "exact"
    assert "step_interval" not in pair_ratios([run(1.0, 0.1)], [run(2.0, 0.1)])  # one pair: no interval


def test_the_ablations_are_compared_with_trl_and_continuous_batching_with_the_lab():
    assert comparisons_for(tuple(ARMS)) == [
        ("lab", "trl"),
        ("lab_no_prompt_sharing", "trl"),
        ("lab_no_compaction", "trl"),
        ("lab_no_length_grouping", "trl"),
        ("lab", "trl_continuous_batching"),
    ]
    assert comparisons_for(("lab",)) == []


# --- the ablations: each switches one speed-up off and changes no number --------------------


def _batch_sizes(model):
    sizes = []
    handle = model.register_forward_pre_hook(
        lambda m, args, kwargs: sizes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    return sizes, handle


def test_each_speedup_switch_changes_the_work_and_not_the_tokens(tiny_policy):
    model, tok = tiny_policy
    prompts = list(sum3_dataset("train", 8, seed=3)["prompt"])  # 8 x G=4 at T=1.3: lengths spread widely
    ids, mask = encode_prompts(tok, prompts)
    N, Gs, Tn = len(prompts), 4, 24

    def sample(**kw):
        sizes, h = _batch_sizes(model)
        try:
            ro = sample_group(model, tok, ids, mask, Gs, Tn, 1.3, torch.Generator().manual_seed(1), **kw)
        finally:
            h.remove()
        return ro, sizes

    base, sizes = sample()
    assert sizes[0][0] == N  # each prompt run once
    assert min(s[0] for s in sizes[1:]) < N * Gs  # finished rows left the batch
    for kw in ({"share_prompt": False}, {"compact": False}):
        ro, s = sample(**kw)
        assert torch.equal(ro.completion_ids, base.completion_ids) and torch.allclose(
            ro.sample_logp, base.sample_logp, atol=1e-5
        )
        if "share_prompt" in kw:
            assert s[0][0] == N * Gs  # every copy of the prompt run
        else:
            assert all(x[0] == N * Gs for x in s[1:])  # every row runs to the end
    with speedups_off("compact", "share_prompt"):
        _, s = sample()
        assert s[0][0] == N * Gs and all(x[0] == N * Gs for x in s[1:])
    assert SPEEDUPS == {"share_prompt": True, "compact": True, "length_grouping": True}

    def logps(**kw):
        sizes, h = _batch_sizes(model)
        try:
            with torch.no_grad():
                lp, _ = token_logps(
                    model, base.prompt_ids, base.prompt_mask, base.completion_ids, base.completion_mask, 1.3, **kw
                )
        finally:
            h.remove()
        return lp, sizes

    P = base.prompt_ids.shape[1]
    lp, s = logps()
    assert len(set(base.lengths.tolist())) >= 4, base.lengths  # the test needs varied lengths
    assert s[0] == (N, P) and len(s) > 2  # the distinct prompts once, then one pass per length group
    with speedups_off("length_grouping"):
        lp_plain, s_plain = logps()
    assert len(s_plain) == 1 and torch.allclose(lp, lp_plain, atol=1e-5)  # one padded pass
    lp_unshared, s_unshared = logps(share_prompt=False)
    assert len(s_unshared) > 1 and all(x[1] > P for x in s_unshared)  # length groups, each pass with its rows' prompts
    assert torch.allclose(lp, lp_unshared, atol=1e-5)
    with pytest.raises(ValueError, match="names must be among"):
        with speedups_off("caching"):
            pass


# --- bad input -------------------------------------------------------------------------------


def test_bench_config_wants_grpo_without_kl():
    with pytest.raises(ValueError, match="train must be GRPO on sum3 with track_kl=False"):
        BenchConfig(train=TrainConfig(algo="grpo"))  # track_kl defaults to True
    with pytest.raises(ValueError, match="parts must be"):
        BenchConfig(parts=("lab", "vllm"))


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--steps", "0"], "--steps"),
        (["--pairs", "0"], "--pairs"),
        (["--group-size", "1"], "group_size"),
        (["--temperature", "-1"], "--temperature"),
        (["--only", "nothing"], "--only"),
        (["--device", "tpu"], "--device"),
        (["--prompts", "two"], "--prompts"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, argv, needle):
    assert call(["bench"] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert needle in err and "error" in err


def test_a_part_runs_in_a_fresh_spawned_process_as_it_does_on_cuda(monkeypatch):
    # On CUDA a forked child cannot use the GPU, so each run starts a fresh interpreter ("spawn"): the
    # config must cross to it and the result come back. Checked here on the CPU with the spawn path forced.
    import multiprocessing as mp

    from grpo_lab.bench import runner as bench

    started = []
    real_get_context = mp.get_context
    monkeypatch.setattr(bench, "_uses_cuda", lambda cfg: True)
    monkeypatch.setattr(mp, "get_context", lambda method=None: started.append(method) or real_get_context(method))
    cfg = BenchConfig(
        train=TrainConfig(track_kl=False, prompts_per_step=1, group_size=2, max_new_tokens=4),
        parts=("rollout",),
        rollout_repeats=1,
    )
    r = bench._run_part("rollout", cfg)
    assert started == ["spawn"]
    assert r["greedy_outputs_match"] is True and r["lab_sample_group"]["calls"] == 1


def test_an_error_in_a_parts_process_is_raised_here_as_it_was_raised_there(tmp_path):
    from grpo_lab.bench import runner

    train = TrainConfig(track_kl=False, model=str(tmp_path / "missing"), prompts_per_step=1, group_size=2)
    cfg = BenchConfig(train=train, parts=("rollout",), rollout_repeats=1)
    with pytest.raises(ValueError, match="does not exist"):  # the child's own one-line error, not a wrapper
        runner._run_part("rollout", cfg)
