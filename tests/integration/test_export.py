"""grpo_lab.scale.export: every preset written as a TRL or verl recipe, checked against the engines themselves.

- TRL: the exported script runs two optimiser steps on the shipped tiny model (CPU, no vLLM, ``--smoke``),
  every ``GRPOConfig`` field is one TRL accepts, and what TRL resolved at run time (its ``GRPOConfig`` and the
  trainer's own attributes, written by the script) equals the values written out by hand below.
- verl 0.9.1: the exported overrides compose with verl's own Hydra config, from the wheel, in a separate
  virtual environment (verl pins transformers < 5.11; the lab needs >= 5.24). Struct mode makes an unknown or
  misspelled key fail. What a CPU cannot check: ``verl.utils.config.validate_config`` and verl's config
  dataclasses need ``import verl`` (torch, ray, verl's transformers), and a run needs GPUs and vLLM.

Expected values are the papers' and the engines' documented defaults, written by hand (ALGORITHMS.md;
trl/trainer/grpo_config.py; verl's trainer/config), not read back from grpo_lab.scale.export.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import verl_env
from verl_env import compose_verl
from verl_env import get as _get

from grpo_lab.algorithms import PRESETS, get_algorithm
from grpo_lab.cli.main import main
from grpo_lab.scale.engines import refusal
from grpo_lab.scale.export import MARKER, effective_algorithm, export_recipe
from grpo_lab.scale.trl_recipe import ACCELERATE_CONFIGS, rollout_arithmetic, trl_settings
from grpo_lab.scale.verl_recipe import verl_overrides

ROOT = Path(__file__).resolve().parents[2]
verl_python = verl_env.verl_python  # the fixture
TINY = str(ROOT / "assets" / "tiny-sum3")

# Hand table: the TRL recipe at scale (TRL's GRPOConfig defaults for lr/bf16/checkpointing; 8 per GPU x 8 GPUs x 4
# micro-steps = 256 completions = 32 prompts x G 8; gradient accumulation = 4 / minibatches, so one rollout is
# `minibatches` optimiser steps).
COMMON_AT_SCALE = {
    "learning_rate": 1e-6,
    "num_generations": 8,
    "per_device_train_batch_size": 8,
    "steps_per_generation": 4,
    "max_completion_length": 1024,
    "bf16": True,
    "gradient_checkpointing": True,
    "use_vllm": True,
    "vllm_mode": "colocate",
    "vllm_enable_sleep_mode": True,
    "beta": 0.0,
    "temperature": 1.0,
    "num_train_epochs": 1,  # one pass over the data (TRL's default is 3)
    "seed": 0,
    "save_strategy": "steps",
    "save_total_limit": 3,
    "eval_strategy": "steps",
    "num_generations_eval": 4,
    "report_to": "tensorboard",
    "log_completions": True,
}
TRL_EXPECTED = {
    "grpo": {
        "loss_type": "grpo",
        "importance_sampling_level": "token",
        "epsilon": 0.2,
        "epsilon_high": 0.2,
        "scale_rewards": "group",
        "gradient_accumulation_steps": 4,
    },
    "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none", "epsilon_high": 0.2, "gradient_accumulation_steps": 4},
    "gspo": {
        "loss_type": "grpo",
        "importance_sampling_level": "sequence",
        "epsilon": 3e-4,
        "epsilon_high": 4e-4,
        "gradient_accumulation_steps": 1,  # 4 micro-steps, 4 updates per rollout: GSPO's 4 mini-batches
    },
    "dapo_without_dynamic_sampling": {
        "loss_type": "dapo",
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "gradient_accumulation_steps": 1,  # 4 updates per rollout, so clip-higher acts (DAPO: 16)
        "mask_truncated_completions": False,
    },
}


def _algo(name):
    return get_algorithm("dapo", dynamic_sampling=False) if name == "dapo_without_dynamic_sampling" else name


# --- what is refused, and why ------------------------------------------------------------------------


def test_each_preset_exports_or_is_refused_with_what_to_use_instead(tmp_path):
    exported = {(a, e) for a in PRESETS for e in ("trl", "verl") if refusal(a, e) is None}
    assert "--engine verl" in refusal("ppo", "trl") and "PPOTrainer" in refusal("ppo", "trl")
    assert "verl" in refusal("dapo", "trl") and "dynamic sampling" in refusal("dapo", "trl")
    for engine in ("trl", "verl"):
        assert "python -m grpo_lab train --algo gfpo --task gsm8k" in refusal("gfpo", engine)
    for algo, engine in sorted(exported):
        files = export_recipe(algo, engine, "Qwen/Qwen2.5-1.5B-Instruct", "gsm8k", tmp_path / f"{algo}_{engine}")
        assert all(f.exists() and f.stat().st_size > 0 for f in files)
        readme = (tmp_path / f"{algo}_{engine}" / "README.md").read_text()
        assert "| learning rate | 0.0001 | 1e-06 |" in readme  # the table of lab vs at-scale values, with sources


def test_the_export_command_writes_a_recipe_or_says_why_not_in_one_line(tmp_path, capsys):
    assert main(["export", "--algo", "gspo", "--engine", "trl", "--task", "gsm8k", "--out", str(tmp_path / "g")]) == 0
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == [
        MARKER,
        "README.md",
        "accelerate",
        "launch.sh",
        "train_grpo.py",
    ]
    capsys.readouterr()
    assert main(["export", "--algo", "gfpo", "--engine", "verl", "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gfpo" in err and "GFPO is in neither engine" in err
    assert not (tmp_path / "f").exists()
    with pytest.raises(SystemExit):
        main(["export", "--algo", "grpo", "--engine", "deepspeed", "--out", str(tmp_path / "x")])
    with pytest.raises(ValueError, match="task"):
        export_recipe("grpo", "trl", "m", "math500", tmp_path / "y")


# --- TRL ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TRL_EXPECTED))
def test_trl_settings_are_fields_trl_accepts_with_the_hand_values(name, tmp_path):
    import dataclasses

    from trl import GRPOConfig

    kw = trl_settings(_algo(name))
    for field, want in {**COMMON_AT_SCALE, **TRL_EXPECTED[name]}.items():
        assert kw[field] == want, (name, field, kw[field], want)
    assert set(kw) <= {f.name for f in dataclasses.fields(GRPOConfig)}, set(kw) - {
        f.name for f in dataclasses.fields(GRPOConfig)
    }
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, **kw)  # TRL's own checks; one process here
    assert args.generation_batch_size == 8 * 1 * 4  # TRL's arithmetic: per device x processes x steps_per_generation


def test_rollout_arithmetic_by_hand():
    # 8 GPUs: 8 x 8 x 4 = 256 completions = 32 prompts x 8; GSPO's 2 mini-batches are 2 optimiser steps.
    assert rollout_arithmetic(8, 8, 4, 4) == {"completions_per_rollout": 256, "optimiser_steps_per_rollout": 1}
    assert rollout_arithmetic(8, 8, 4, 2) == {"completions_per_rollout": 256, "optimiser_steps_per_rollout": 2}
    assert rollout_arithmetic(4, 1, 4, 2, num_iterations=2)["optimiser_steps_per_rollout"] == 4
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        rollout_arithmetic(8, 8, 4, 3)


def test_the_accelerate_configs_load_in_accelerate(tmp_path):
    from accelerate.commands.config.config_args import ClusterConfig

    export_recipe("grpo", "trl", "m", "gsm8k", tmp_path)
    loaded = {n: ClusterConfig.from_yaml_file(str(tmp_path / "accelerate" / f"{n}.yaml")) for n in ACCELERATE_CONFIGS}
    assert (loaded["single_gpu"].distributed_type.value, loaded["single_gpu"].num_processes) == ("NO", 1)
    assert (loaded["multi_gpu"].distributed_type.value, loaded["multi_gpu"].num_processes) == ("MULTI_GPU", 8)
    assert loaded["zero3"].distributed_type.value == "DEEPSPEED" and loaded["zero3"].deepspeed_config["zero_stage"] == 3


def _fake_on_path(folder: Path, name: str) -> None:
    """A stand-in for ``name`` that prints its arguments one per line (for launch.sh and run.sh)."""
    folder.mkdir(exist_ok=True)
    (folder / name).write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$0" "$@"\n')
    (folder / name).chmod(0o755)


def _run(script: Path, args: list[str], fakes: Path) -> list[str]:
    env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}"}
    cmd = ["bash", str(script), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_launch_sh_takes_mode_and_gpus_and_quotes_the_model(tmp_path):
    """A model name with a space and a $(...) reaches the launcher as one argument and is never executed."""
    model = f"My Models/x$(touch {tmp_path}/INJECTED)"
    export_recipe("grpo", "trl", model, "gsm8k", tmp_path / "r")
    fakes = tmp_path / "bin"
    _fake_on_path(fakes, "accelerate")
    argv = _run(tmp_path / "r" / "launch.sh", ["multi_gpu", "4", "--max-steps", "5"], fakes)
    assert argv[1:] == [
        "launch",
        "--config_file",
        "accelerate/multi_gpu.yaml",
        "--num_processes",
        "4",
        "train_grpo.py",
        "--model",
        model,
        "--max-steps",
        "5",
    ]
    single = _run(tmp_path / "r" / "launch.sh", [], fakes)
    assert single[1:4] == ["launch", "--config_file", "accelerate/single_gpu.yaml"]
    # an option right after MODE is an option, not GPUS: the default number of processes is kept
    options = _run(tmp_path / "r" / "launch.sh", ["multi_gpu", "--smoke"], fakes)
    assert options[4:6] == ["--num_processes", "8"] and options[-1] == "--smoke"
    assert not (tmp_path / "INJECTED").exists()


def test_run_sh_takes_gpus_and_quotes_every_override(tmp_path):
    model = f"x$(touch {tmp_path}/INJECTED) y"
    export_recipe("dapo", "verl", model, "gsm8k", tmp_path / "r")
    fakes = tmp_path / "bin"
    _fake_on_path(fakes, "python")
    argv = _run(tmp_path / "r" / "run.sh", ["4", "trainer.save_freq=7"], fakes)
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert f"actor_rollout_ref.model.path={model}" in argv
    assert argv[-2:] == ["trainer.n_gpus_per_node=4", "trainer.save_freq=7"]  # the last value wins in Hydra
    # the recipe's own files reach verl as absolute paths: Ray workers resolve relative ones in their own folder
    folder = (tmp_path / "r").resolve()
    assert f"reward.custom_reward_function.path={folder}/reward.py" in argv
    assert f"data.train_files={folder}/data/gsm8k/train.parquet" in argv
    assert not (tmp_path / "INJECTED").exists()


def test_the_exported_trl_script_runs_two_steps_and_trl_resolves_the_preset(tmp_path):
    """DAPO without dynamic sampling: token mean, clip-higher and the soft overlong penalty (two reward functions)."""
    recipe = tmp_path / "recipe"
    export_recipe(_algo("dapo_without_dynamic_sampling"), "trl", TINY, "sum3", recipe)
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, "train_grpo.py", "--smoke", "--model", TINY, "--output-dir", str(out)],
        cwd=recipe,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    resolved = json.loads((out / "resolved_config.json").read_text())
    assert resolved["global_step"] == 2
    assert len([h for h in resolved["log_history"] if "loss" in h]) == 2
    args = resolved["args"]
    # --smoke changes sizes only; the algorithm and the batch structure are the recipe's
    smoke = {
        "num_generations": 4,
        "per_device_train_batch_size": 4,
        "max_completion_length": 32,
        "max_steps": 2,
        "bf16": False,
        "gradient_checkpointing": False,
        "use_vllm": False,
        "save_strategy": "no",
        "eval_strategy": "no",
        "report_to": [],
    }
    at_scale = {
        k: v for k, v in {**COMMON_AT_SCALE, **TRL_EXPECTED["dapo_without_dynamic_sampling"]}.items() if k not in smoke
    }
    for field, want in {**at_scale, **smoke}.items():
        assert args[field] == want, (field, args[field], want)
    trainer = resolved["trainer"]  # the GRPOTrainer's own attributes, as it runs
    assert (trainer["loss_type"], trainer["epsilon_low"], trainer["epsilon_high"], trainer["beta"]) == (
        "dapo",
        0.2,
        0.28,
        0.0,
    )
    assert (trainer["importance_sampling_level"], trainer["scale_rewards"], trainer["num_iterations"]) == (
        "token",
        "group",
        1,
    )
    assert resolved["reward_funcs"] == ["sum3_reward_trl", "soft_overlong_punishment_reward"]


# --- verl -----------------------------------------------------------------------------------------

VERL_EXPECTED = {  # hand values: the presets at scale, in verl's keys
    "grpo": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": True,
        "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
        "actor_rollout_ref.actor.clip_ratio_high": 0.2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 32,
        "actor_rollout_ref.rollout.n": 8,
        "actor_rollout_ref.actor.optim.lr": 1e-6,
        "data.max_response_length": 1024,
        "data.train_batch_size": 32,
        "actor_rollout_ref.rollout.name": "vllm",
        "algorithm.filter_groups.enable": False,
        "actor_rollout_ref.actor.clip_ratio_c": 1e9,  # the presets have no dual clip; verl's default 3.0 is on
        "trainer.total_epochs": 1,
        "trainer.save_freq": 100,  # verl's default -1 never saves
        "trainer.max_actor_ckpt_to_keep": 3,
        "trainer.resume_mode": "auto",
        "trainer.test_freq": 50,  # verl's default -1 never validates
        "actor_rollout_ref.rollout.val_kwargs.do_sample": True,
        "actor_rollout_ref.rollout.val_kwargs.temperature": 1.0,
        "actor_rollout_ref.rollout.val_kwargs.n": 4,
        "trainer.logger": ["console", "tensorboard"],
        "data.seed": 0,
        "actor_rollout_ref.rollout.seed": 0,
        # beta = 0: the reference is loaded and actor/kl_loss logged, with no KL term in the gradient
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_coef": 0.0,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 16,
    },
    "dr_grpo": {
        "algorithm.norm_adv_by_std_in_grpo": False,
        "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm",
        "actor_rollout_ref.actor.loss_scale_factor": "${data.max_response_length}",
    },
    "gspo": {
        "actor_rollout_ref.actor.policy_loss.loss_mode": "gspo",
        "actor_rollout_ref.actor.clip_ratio_low": 3e-4,
        "actor_rollout_ref.actor.clip_ratio_high": 4e-4,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,  # a size in prompts: 32 / 4 mini-batches
    },
    "dapo": {
        "actor_rollout_ref.actor.clip_ratio_high": 0.28,
        "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,  # 4 updates per rollout: clip-higher acts
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.metric": "acc",
        "trainer.use_v1": True,
        "reward.reward_manager.name": "dapo",
        "reward.reward_kwargs.max_resp_len": "${data.max_response_length}",
        "reward.reward_kwargs.overlong_buffer_cfg.enable": True,
        "reward.reward_kwargs.overlong_buffer_cfg.len": 256,
        "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor": 1.0,
    },
    "ppo": {
        "algorithm.adv_estimator": "gae",
        "algorithm.lam": 0.95,
        "algorithm.gamma": 1.0,
        "algorithm.use_kl_in_reward": True,
        "algorithm.kl_penalty": "kl",
        "algorithm.kl_ctrl.kl_coef": 0.05,
        "actor_rollout_ref.actor.use_kl_loss": False,  # the KL is in the reward
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 16,
        "critic.optim.lr": 1e-5,
        "critic.cliprange_value": 0.2,
        # the preset's 4 critic-only rollouts: verl updates the actor from step critic_warmup, counting from 1
        "trainer.critic_warmup": 5,
        "actor_rollout_ref.actor.ppo_epochs": 2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
    },
}


@pytest.mark.parametrize("algo", sorted(VERL_EXPECTED))
def test_the_verl_overrides_compose_with_verls_own_config(verl_python, algo, tmp_path):
    overrides = verl_overrides(algo, model="Qwen/Qwen2.5-1.5B-Instruct", task="gsm8k")
    proc = compose_verl(verl_python, overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["verl_imported"] is False  # composed from the wheel's YAML only
    for key, want in VERL_EXPECTED[algo].items():
        assert _get(out["config"], key) == want, (algo, key, _get(out["config"], key), want)
    export_recipe(algo, "verl", "Qwen/Qwen2.5-1.5B-Instruct", "gsm8k", tmp_path)
    run = (tmp_path / "run.sh").read_text()
    relative = ("data.train_files=", "data.val_files=", "reward.custom_reward_function.path=")  # made absolute
    words = [
        f'"{o.split("=")[0]}=$PWD/"{o.split("=", 1)[1]}' if o.startswith(relative) else shlex.quote(o)
        for o in overrides
    ]
    assert "python -m verl.trainer.main_ppo" in run and all(f"    {w} \\\n" in run for w in words)


_RESOLVE = r"""
import importlib.util, json, os, sys
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
spec = importlib.util.find_spec("verl")
config_dir = os.path.join(os.path.dirname(spec.origin), "trainer", "config")
with initialize_config_dir(config_dir=config_dir, version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=json.loads(sys.argv[1]))
OmegaConf.resolve(cfg)  # as verl's main_ppo does before the trainer reads the config
print(json.dumps([cfg.actor_rollout_ref.actor.loss_scale_factor, cfg.reward.reward_kwargs.max_resp_len]))
"""


def test_the_length_keys_follow_a_response_length_given_on_the_command_line(verl_python):
    """run.sh appends the user's key=value after the recipe's: the Dr. GRPO constant and DAPO's max_resp_len must
    follow a new data.max_response_length instead of keeping 1024."""
    dr, dapo = verl_overrides("dr_grpo"), verl_overrides("dapo")
    keys = ("actor_rollout_ref.actor.loss_scale_factor=", "+reward.reward_kwargs.max_resp_len=")
    overrides = [o for o in dapo if not o.startswith(keys[0])] + [o for o in dr if o.startswith(keys[0])]
    proc = subprocess.run(
        [verl_python, "-c", _RESOLVE, json.dumps(overrides + ["data.max_response_length=2048"])],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == [2048, 2048]


def test_a_misspelled_or_unknown_verl_key_fails(verl_python):
    for bad in (
        "actor_rollout_ref.actor.clip_ratio_hihg=0.28",
        "algorithm.filter_group.enable=true",
        "reward_model.overlong_buffer.enable=true",
    ):
        proc = compose_verl(verl_python, verl_overrides("dapo") + [bad])
        assert proc.returncode != 0 and "Could not override" in proc.stderr, bad


def test_verl_applies_dynamic_sampling_in_its_v1_trainer_only(verl_python):
    """Which code of verl 0.9.1 reads algorithm.filter_groups: the V1 trainer (the default), not the legacy one."""
    out = json.loads(compose_verl(verl_python, []).stdout)
    root = Path(out["root"])
    assert out["config"]["trainer"]["use_v1"] is True
    assert "if config.trainer.use_v1:" in (root / "trainer" / "main_ppo.py").read_text()
    assert "filter_groups" in (root / "trainer" / "ppo" / "v1" / "trainer_base.py").read_text()
    assert "filter_groups" in (root / "trainer" / "ppo" / "v1" / "replay_buffer.py").read_text()
    for legacy in ("main_ppo_v0.py", "ppo/ray_trainer.py"):
        assert "filter_groups" not in (root / "trainer" / legacy).read_text(), legacy
    # overlong_buffer is no key of the generated trainer config
    assert "overlong_buffer" not in (root / "trainer" / "config" / "_generated_ppo_trainer.yaml").read_text()


def test_the_verl_reward_file_and_data_preparation_run(tmp_path):
    export_recipe("grpo", "verl", "m", "words", tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "prepare_data.py", "--out", "data/words", "--n", "6"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    import pandas as pd

    rows = pd.read_parquet(tmp_path / "data" / "words" / "train.parquet")
    assert len(rows) == 6 and set(rows.columns) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    row = rows.iloc[0]
    assert row["prompt"][-1]["role"] == "user" and row["reward_model"]["style"] == "rule"
    sys.path.insert(0, str(tmp_path))
    try:
        import reward
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("reward", None)
    answer = row["reward_model"]["ground_truth"]
    assert reward.compute_score("words", f"First 3, so #### {answer}", answer) == 1.0
    assert reward.compute_score("words", f"#### {int(answer) + 1}", answer) == 0.0
    assert reward.compute_score("words", f"the total is {answer}", answer) == 1.0  # no marker: the last number


# --- what export prints, and how it writes ---------------------------------------------------------


def test_the_effective_algorithm_says_when_a_clip_can_act():
    lines, warnings = effective_algorithm("dapo", "verl")
    text = "\n".join(lines)
    assert "updates per rollout: 4" in text and "1 + 0.28: can act" in text
    assert "dual clip: off (clip_ratio_c=1e+09" in text and "data.seed=0" in text and "total_epochs=1" in text
    assert warnings == [
        "max_gen_batches 4 cannot act: verl's V1 trainer ignores algorithm.filter_groups.max_num_gen_batches "
        "(refills have no cap)"
    ]
    lines, warnings = effective_algorithm("grpo", "trl")
    assert "updates per rollout: 1" in lines[0] and "cannot act (every ratio is 1)" in lines[1]
    assert len(warnings) == 1 and warnings[0].startswith("clip_low 0.2 and clip_high 0.2 cannot act")
    assert "dual clip: none (verl's gspo loss has no dual clip)" in effective_algorithm("gspo", "verl")[0]
    readme = "\n".join(effective_algorithm("gspo", "trl")[0])
    assert "updates per rollout: 4" in readme and "num_train_epochs=1" in readme


def test_the_recipe_takes_the_mini_batches_asked_for_not_the_presets():
    lines, _ = effective_algorithm(get_algorithm("dapo", minibatches=2), "verl")
    assert lines[0] == "updates per rollout: 2 (2 mini-batches x 1 epochs)"


@pytest.mark.parametrize("engine", ["trl", "verl"])
def test_target_kl_is_refused_not_dropped(engine):
    why = refusal(get_algorithm("ppo" if engine == "verl" else "grpo", minibatches=2, target_kl=0.02), engine)
    assert why and "target_kl" in why and "neither engine" in why


def test_export_refuses_a_folder_holding_other_files_and_replaces_its_own_recipe(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("my notes")
    with pytest.raises(ValueError, match=r"^out must be a new or empty folder or a recipe written by export"):
        export_recipe("grpo", "trl", "m", "gsm8k", mine)
    assert (mine / "README.md").read_text() == "my notes"
    recipe = tmp_path / "recipe"
    export_recipe("grpo", "trl", "m", "gsm8k", recipe)
    export_recipe("gspo", "verl", "m", "gsm8k", recipe)  # its own earlier recipe: replaced whole
    assert sorted(p.name for p in recipe.iterdir()) == [MARKER, "README.md", "prepare_data.py", "reward.py", "run.sh"]
    (recipe / "runs").mkdir()
    (recipe / "runs" / "checkpoint-100").write_text("a run's checkpoint")
    with pytest.raises(ValueError, match=r"1 other file\(s\) \(e.g. runs/checkpoint-100\)"):
        export_recipe("grpo", "verl", "m", "gsm8k", recipe)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "recipe"]  # no temporary folder left


def test_an_unwritable_out_is_refused_with_what_was_wanted(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    out = tmp_path / "a_file" / "sub"
    with pytest.raises(ValueError, match=r"^out must be a folder you can write to, got .*; wanted a writable path$"):
        export_recipe("grpo", "trl", "m", "gsm8k", out)
    assert main(["export", "--engine", "trl", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "wanted" in err


def test_an_export_interrupted_while_writing_leaves_no_half_written_recipe(tmp_path, monkeypatch):
    calls = []
    real = Path.write_text

    def interrupted(self, *args, **kwargs):
        calls.append(self.name)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_recipe("grpo", "trl", "m", "gsm8k", tmp_path / "recipe")
    assert list(tmp_path.iterdir()) == []


class _NotHandled(Exception):
    """The test's own SIGTERM/SIGHUP handler fired: the command did not handle the signal itself."""


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_an_export_stopped_by_a_signal_is_one_line_and_keeps_the_earlier_recipe(tmp_path, capsys, monkeypatch,
                                                                                signum, code):  # fmt: skip
    out = tmp_path / "recipe"
    export_recipe("gspo", "verl", "m", "gsm8k", out)  # an earlier recipe, which the new one would replace
    before = {p.name: p.read_text() for p in out.iterdir()}
    calls, real = [], Path.write_text

    def signalled(self, *args, **kwargs):
        calls.append(self.name)
        if len(calls) == 3:
            os.kill(os.getpid(), signum)  # as `kill`, a closed terminal or Ctrl-C would, mid-write
        return real(self, *args, **kwargs)

    def not_handled(sig, frame):
        raise _NotHandled(sig)

    monkeypatch.setattr(Path, "write_text", signalled)
    kept = {s: signal.signal(s, not_handled) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        assert main(["export", "--engine", "trl", "--out", str(out)]) == code
    finally:
        for s, h in kept.items():
            signal.signal(s, h)
    err = capsys.readouterr().err.strip().splitlines()
    name = "at once" if signum == signal.SIGINT else f"by {signal.Signals(signum).name}"
    assert err == [
        f"python -m grpo_lab export: interrupted: stopped {name}; nothing was written (the --out folder is as it was)"
    ]
    assert {p.name: p.read_text() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["recipe"]  # no temporary folder left beside it


def test_a_readme_names_the_set_flags_and_what_the_engine_lacks(tmp_path):
    out = tmp_path / "d"
    args = ["export", "--algo", "dapo", "--set", "dynamic_sampling=false", "--engine", "trl", "--out", str(out)]
    assert main(args + ["--task", "gsm8k"]) == 0
    text = (out / "README.md").read_text()
    assert "`python -m grpo_lab export --algo dapo --set dynamic_sampling=false --engine trl --task gsm8k`" in text
    assert "- dynamic sampling: off (TRL has none)\n" in text
    export_recipe("grpo", "trl", "m", "gsm8k", tmp_path / "g")
    text = (tmp_path / "g" / "README.md").read_text()
    assert "--algo grpo --engine trl" in text and "dynamic sampling" not in text
