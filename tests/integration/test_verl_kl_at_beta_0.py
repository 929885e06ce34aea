"""The verl recipe at beta = 0 logs ``actor/kl_loss``, the KL to the starting weights, without changing the gradient.

verl 0.9.1's own code, read from the wheel in the verl environment: its Hydra config composes the overrides,
``need_reference_policy`` (verl/trainer/ppo/utils.py) then loads the reference, and the KL block of the actor's
``ppo_loss`` (verl/workers/utils/losses.py), run with torch on hand-made log-probs together with verl's own
``kl_penalty`` and ``agg_loss`` (verl/trainer/ppo/core_algos.py), records the hand-computed k3 and leaves the loss
and its gradient as they were. verl's modules themselves need ``import verl`` (ray, verl's transformers), which the
lab's environment does not have, so the functions are taken from the wheel's source by name.
"""

from __future__ import annotations

import ast
import json
import math
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest
import torch
import verl_env
from verl_env import compose_verl
from verl_env import get as _get

from grpo_lab.scale.verl_recipe import KL_AT_BETA_0, verl_overrides

verl_python = verl_env.verl_python  # the fixture

_NEEDS_REFERENCE = r"""
import ast, importlib.util, json, os, sys
from hydra import compose, initialize_config_dir
spec = importlib.util.find_spec("verl")
root = os.path.dirname(spec.origin)
with initialize_config_dir(config_dir=os.path.join(root, "trainer", "config"), version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=json.loads(sys.argv[1]))
source = open(os.path.join(root, "trainer", "ppo", "utils.py")).read()
fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "need_reference_policy")
scope = {"DictConfig": object}
exec(ast.get_source_segment(source, fn), scope)
print(json.dumps(scope["need_reference_policy"](cfg)))
"""


def _needs_reference(python: str, overrides: list[str]) -> bool:
    proc = subprocess.run(
        [python, "-c", _NEEDS_REFERENCE, json.dumps(overrides)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _verl_root(python: str) -> Path:
    return Path(json.loads(compose_verl(python, []).stdout)["root"])


def _top_function(source: str, name: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize("algo", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_at_beta_0_the_overrides_compose_and_verl_loads_the_reference(verl_python, algo):
    overrides = verl_overrides(algo)
    assert all(o in overrides for o in KL_AT_BETA_0)
    proc = compose_verl(verl_python, overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = json.loads(proc.stdout)["config"]
    assert _get(cfg, "actor_rollout_ref.actor.use_kl_loss") is True
    assert _get(cfg, "actor_rollout_ref.actor.kl_loss_coef") == 0.0
    assert _get(cfg, "actor_rollout_ref.actor.kl_loss_type") == "low_var_kl"  # k3, as TRL and the lab log kl
    assert _get(cfg, "algorithm.use_kl_in_reward") is False
    assert _needs_reference(verl_python, overrides) is True
    # verl's function reads the key: without it, no reference
    off = [o for o in overrides if not o.startswith("actor_rollout_ref.actor.use_kl_loss=")]
    assert _needs_reference(verl_python, off + ["actor_rollout_ref.actor.use_kl_loss=false"]) is False


def test_verls_actor_loss_logs_the_kl_and_keeps_the_gradient_at_coefficient_0(verl_python):
    root = _verl_root(verl_python)
    algos = (root / "trainer" / "ppo" / "core_algos.py").read_text()
    losses = (root / "workers" / "utils" / "losses.py").read_text()
    scope = {
        "torch": torch,
        "Optional": Optional,
        "verl_F": SimpleNamespace(masked_sum=lambda values, mask: (values * mask).sum()),
        "Metric": lambda value, aggregation: value,
    }
    for name in ("kl_penalty_forward", "kl_penalty", "agg_loss"):
        exec(ast.get_source_segment(algos, _top_function(algos, name)), scope)
    kl_block = next(
        n
        for n in _top_function(losses, "ppo_loss").body
        if isinstance(n, ast.If) and ast.unparse(n.test) == "config.use_kl_loss"
    )
    kl_block = compile(ast.Module(body=[kl_block], type_ignores=[]), "verl/workers/utils/losses.py", "exec")

    # policy p = (1/4, 3/4) on the two sampled tokens' positions, reference q = (1/2, 1/2); the third is padding.
    # k3 = r - log r - 1 with r = q / p: 1 - ln 2 and ln 1.5 - 1/3; token-mean over the two real tokens
    hand_k3 = ((1 - math.log(2)) + (math.log(1.5) - 1 / 3)) / 2
    ref = torch.tensor([[math.log(1 / 2), math.log(1 / 2), -3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])

    def run(coef: float) -> tuple[float, float, torch.Tensor, dict]:
        log_prob = torch.tensor([[math.log(1 / 4), math.log(3 / 4), -1.0]], requires_grad=True)
        pg_loss = -(log_prob * mask * torch.tensor([[1.0, -0.5, 0.0]])).sum() / 2  # a stand-in policy loss
        config = SimpleNamespace(
            use_kl_loss=True, kl_loss_type="low_var_kl", loss_agg_mode="token-mean", global_batch_info={}
        )
        config.kl_loss_coef = coef
        local = {
            **scope,
            "config": config,
            "data": {"ref_log_prob": ref},
            "log_prob": log_prob,
            "response_mask": mask,
            "policy_loss": pg_loss,
            "metrics": {},
            "metric_aggregation": None,
        }
        pg = pg_loss.item()  # before: verl adds in place
        exec(kl_block, local)
        local["policy_loss"].backward()
        return pg, local["policy_loss"].item(), log_prob.grad, local["metrics"]

    pg, loss, grad, metrics = run(0.0)
    assert metrics["kl_loss"].item() == pytest.approx(hand_k3)  # the KL itself, not times the coefficient
    assert metrics["kl_coef"] == 0.0
    assert loss == pg
    assert torch.equal(grad, torch.tensor([[-0.5, 0.25, 0.0]]))  # d(pg_loss)/d(log_prob) by hand
    # the same block at a coefficient > 0 does add the KL: the check above can fail
    _, loss_kl, grad_kl, metrics_kl = run(0.5)
    assert metrics_kl["kl_loss"].item() == pytest.approx(hand_k3)
    assert loss_kl == pytest.approx(pg + 0.5 * hand_k3) and not torch.equal(grad_kl, grad)
