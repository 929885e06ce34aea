"""The command line: the same experiments as the notebooks, outside Jupyter.

    python -m grpo_lab train --algo grpo --steps 100 --seed 0 --json runs/grpo.json
    python -m grpo_lab eval --model assets/tiny-sum3 --samples 8
    python -m grpo_lab pretrain
    python -m grpo_lab bench --json runs/bench.json
    python -m grpo_lab paired --vary clip_high=0.2,0.28 --steps 60 --set minibatches=8 --set epochs=2
    python -m grpo_lab export --algo dapo --engine verl --model Qwen/Qwen2.5-1.5B-Instruct --task gsm8k --out recipes/dapo

Bad arguments print one line and exit with status 2; nothing prints a traceback at a learner.
"""

from __future__ import annotations

import argparse
import json
import sys

from .algorithms import PRESETS


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one clear line, non-zero exit
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int_at_least(minimum: int, what: str):
    """An argparse type: an integer >= minimum, with one clear line when it is not."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {what} integer, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be a {what} integer, got {v}")
        return v

    return parse


_positive_int = _int_at_least(1, "positive")
_non_negative_int = _int_at_least(0, "non-negative")


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return v


def _override(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"must look like FIELD=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return key, parsed


def _vary(text: str) -> tuple[str, list]:
    """FIELD=V1,V2,...: each value read as JSON (so 0.28 is a number and null is None)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"must look like FIELD=V1,V2, got {text!r}")
    key, values = text.split("=", 1)
    parsed = []
    for v in values.split(","):
        try:
            parsed.append(json.loads(v))
        except json.JSONDecodeError:
            parsed.append(v)
    if len(parsed) < 2:
        raise argparse.ArgumentTypeError(f"needs at least two values after {key}=, got {values!r}")
    return key, parsed


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m grpo_lab", description="grpo_lab: RL post-training, seen step by step.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser("train", help="train a policy with one algorithm and write a JSON summary")
    t.add_argument("--algo", choices=sorted(PRESETS), default="grpo")
    t.add_argument("--steps", type=_positive_int, default=100)
    t.add_argument("--seed", type=_non_negative_int, default=0)
    t.add_argument("--json", metavar="FILE", help="write the summary (before/after, history) here")
    t.add_argument("--model", default="tiny-sum3", help="'tiny-sum3' (shipped), a folder, or a Hugging Face name")
    t.add_argument("--task", choices=["sum3", "words", "gsm8k"], default=None, help="default: sum3 for the tiny model, words otherwise")
    t.add_argument("--prompts", type=_positive_int, default=16, help="prompts per step")
    t.add_argument("--group-size", type=_positive_int, default=8, help="G: completions per prompt (GFPO: kept per prompt)")
    t.add_argument("--max-new-tokens", type=_positive_int, default=32)
    t.add_argument("--temperature", type=_positive_float, default=1.0)
    t.add_argument("--lr", type=_positive_float, default=1e-4)
    t.add_argument("--kl-stop", type=_positive_float, default=None, help="stop (and save) when KL exceeds this")
    t.add_argument("--seconds", type=_positive_float, default=None, help="stop after this much training time")
    t.add_argument("--max-samples", type=_positive_int, default=None,
                   help="stop once this many completions have been sampled (a sample budget)")
    t.add_argument("--n-eval", type=_positive_int, default=1000, help="held-out prompts for before/after accuracy")
    t.add_argument("--eval-every", type=_positive_int, default=None, help="also evaluate every N steps")
    t.add_argument("--save", metavar="DIR", help="save the trained run (policy + trainer state) here")
    t.add_argument("--resume", metavar="DIR", help="continue a run saved with --save for --steps more steps")
    t.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    t.add_argument("--set", dest="overrides", type=_override, action="append", default=[], metavar="FIELD=VALUE",
                   help="change one Algorithm field, e.g. --set minibatches=4 --set clip_high=0.28")
    t.add_argument("--quiet", action="store_true", help="no progress bar")

    e = sub.add_parser("eval", help="measure a checkpoint: greedy accuracy and pass@k")
    e.add_argument("--model", default="tiny-sum3")
    e.add_argument("--task", choices=["sum3", "words", "gsm8k"], default=None)
    e.add_argument("--n", type=_positive_int, default=1000, help="held-out prompts")
    e.add_argument("--samples", type=_positive_int, default=8, help="k of pass@k (sampled at --temperature)")
    e.add_argument("--temperature", type=_positive_float, default=1.0)
    e.add_argument("--max-new-tokens", type=_positive_int, default=32)
    e.add_argument("--seed", type=_non_negative_int, default=0)
    e.add_argument("--device", default=None)
    e.add_argument("--json", metavar="FILE")

    c = sub.add_parser("compare", help="several algorithms x seeds on one task and budget: a table with spread")
    c.add_argument("--algos", nargs="+", choices=sorted(PRESETS), default=["grpo", "dr_grpo", "gspo", "dapo", "ppo", "gfpo"])
    c.add_argument("--seeds", nargs="+", type=_non_negative_int, default=[0, 1, 2])
    c.add_argument("--seconds", type=_positive_float, default=None,
                   help="training seconds per run (default: each algorithm's target budget: "
                        "grpo, dr_grpo, gspo 90; dapo 135; ppo, gfpo 180)")
    c.add_argument("--steps", type=_positive_int, default=100000, help="step cap per run")
    c.add_argument("--max-samples", type=_positive_int, default=None,
                   help="a sample budget instead of time budgets: every run stops once it has sampled this many completions")
    c.add_argument("--pass-k", type=_positive_int, default=None,
                   help="also measure pass@1..K of each trained policy (K samples per held-out prompt)")
    c.add_argument("--eval-every", type=_positive_int, default=20)
    c.add_argument("--n-eval", type=_positive_int, default=1000)
    c.add_argument("--out", default="runs/compare", help="folder for each run's JSON and the summary")
    c.add_argument("--set", dest="overrides", type=_override, action="append", default=[], metavar="FIELD=VALUE")

    pr = sub.add_parser("paired", help="one batch, several update rules: each arm's update from the same weights, every step")
    pr.add_argument("--algo", choices=sorted(PRESETS), default="grpo")
    pr.add_argument("--vary", type=_vary, required=True, metavar="FIELD=V1,V2,...",
                    help="the update field the arms differ in and its values, the first one followed, e.g. clip_high=0.2,0.28")
    pr.add_argument("--steps", type=_positive_int, default=60)
    pr.add_argument("--seed", type=_non_negative_int, default=0)
    pr.add_argument("--prompts", type=_positive_int, default=16, help="prompts per step")
    pr.add_argument("--group-size", type=_positive_int, default=8)
    pr.add_argument("--max-new-tokens", type=_positive_int, default=32)
    pr.add_argument("--lr", type=_positive_float, default=1e-4)
    pr.add_argument("--low-p", type=_positive_float, default=0.2,
                    help="a positive-advantage token counts as low-probability below this probability")
    pr.add_argument("--set", dest="overrides", type=_override, action="append", default=[], metavar="FIELD=VALUE",
                    help="change one Algorithm field in every arm, e.g. --set minibatches=8 --set epochs=2")
    pr.add_argument("--device", default=None)
    pr.add_argument("--json", metavar="FILE")
    pr.add_argument("--quiet", action="store_true")

    pt = sub.add_parser("pretrain", help="build the tiny policy in assets/ from scratch (supervised)")
    pt.add_argument("--out", default=None, help="folder (default: assets/tiny-sum3)")
    pt.add_argument("--seed", type=_non_negative_int, default=0)
    pt.add_argument("--max-steps", type=_positive_int, default=1500)
    pt.add_argument("--target-accuracy", type=_positive_float, default=0.35)
    pt.add_argument("--eval-from", type=_positive_int, default=150)
    pt.add_argument("--eval-every", type=_positive_int, default=25)
    pt.add_argument("--n-eval", type=_positive_int, default=256, help="held-out prompts for the stopping accuracy")
    pt.add_argument("--size", choices=["cpu", "gpu"], default="cpu",
                    help="cpu: the shipped ~1M-parameter policy; gpu: the gpu profile's ~34M-parameter one "
                    "(on a GPU; its default --out is assets/gpu-sum3)")
    for name in ("hidden", "layers", "heads", "ffn", "batch-size"):
        pt.add_argument(f"--{name}", type=_positive_int, default=None, help=f"override the size's {name}")
    pt.add_argument("--lr", type=_positive_float, default=None, help="override the size's learning rate")
    pt.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    pt.add_argument("--quiet", action="store_true")

    bn = sub.add_parser("bench", help="speed side by side: the lab's GRPO step against TRL's GRPOTrainer, rollout tokens/s, memory")
    bn.add_argument("--prompts", type=_positive_int, default=16, help="prompts per step")
    bn.add_argument("--group-size", type=_positive_int, default=8, help="G: completions per prompt (at least 2)")
    bn.add_argument("--max-new-tokens", type=_positive_int, default=32)
    bn.add_argument("--steps", type=_positive_int, default=5, help="timed steps per run of each arm")
    bn.add_argument("--warmup", type=_non_negative_int, default=2, help="untimed steps first, in every run")
    bn.add_argument("--pairs", type=_positive_int, default=5,
                    help="runs of every arm, in alternating order (lab..trl, trl..lab, ...); one ratio per pair")
    bn.add_argument("--rollout-repeats", type=_positive_int, default=5, help="timed calls of each generator")
    bn.add_argument("--temperature", type=_positive_float, default=1.0)
    bn.add_argument("--lr", type=_positive_float, default=1e-4)
    bn.add_argument("--seed", type=_non_negative_int, default=0)
    bn.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    bn.add_argument("--model", default="tiny-sum3", help="'tiny-sum3' (shipped) or a folder written by pretrain")
    bn.add_argument("--only", nargs="+", default=None,
                    choices=["lab", "lab_no_prompt_sharing", "lab_no_compaction", "lab_no_length_grouping",
                             "trl", "trl_continuous_batching", "rollout"],
                    help="measure only these arms (and 'rollout', the generator comparison); default: all")
    bn.add_argument("--in-process", action="store_true", help="run the parts here, not each in its own forked process")
    bn.add_argument("--json", metavar="FILE", help="write the measurements here")

    ex = sub.add_parser("export", help="write a preset as a launchable TRL or verl recipe (script, configs, launch commands)")
    ex.add_argument("--algo", choices=sorted(PRESETS), default="grpo")
    ex.add_argument("--engine", choices=["trl", "verl"], required=True)
    ex.add_argument("--model", default="Qwen/Qwen2.5-1.5B-Instruct", help="a Hugging Face name or a folder")
    ex.add_argument("--task", choices=["gsm8k", "words", "sum3"], default="gsm8k")
    ex.add_argument("--out", required=True, metavar="DIR", help="folder for the recipe")
    sub.add_parser("doctor", help="is this machine ready? Python, torch, the model, one training step, widgets, plots, memory")
    return p


def _default_task(model: str, task: str | None) -> str:
    if task:
        return task
    return "sum3" if model == "tiny-sum3" else "words"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "eval":
            return _eval(args)
        if args.command == "compare":
            return _compare(args)
        if args.command == "bench":
            return _bench(args)
        if args.command == "paired":
            return _paired(args)
        if args.command == "export":
            return _export(args)
        if args.command == "doctor":
            return _doctor(args)
        return _pretrain(args)
    except ValueError as err:  # the lab's own input checks: one line, not a traceback
        print(f"python -m grpo_lab {args.command}: error: {err}", file=sys.stderr)
        return 2


def _train(args) -> int:
    from .trainer import Trainer, TrainConfig, run, save_json

    if args.resume:
        trainer = Trainer.resume(args.resume)
        trainer.train(args.steps, progress=not args.quiet, checkpoint_dir=args.save)
        if args.save:
            trainer.save(args.save)
        summary = {"algo": trainer.cfg.algo, "steps": trainer.step, "seed": trainer.cfg.seed, "history": trainer.history,
                   "stop_reason": trainer.stop_reason}
    else:
        cfg = TrainConfig(
            algo=args.algo, model=args.model, task=_default_task(args.model, args.task), steps=args.steps, seed=args.seed,
            prompts_per_step=args.prompts, group_size=args.group_size, max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, lr=args.lr, kl_stop=args.kl_stop, max_seconds=args.seconds, device=args.device,
            max_samples=args.max_samples, algo_overrides=dict(args.overrides),
        )
        summary = run(cfg, n_eval=args.n_eval, progress=not args.quiet, eval_every=args.eval_every, save_dir=args.save)
        b, a = summary["before"], summary["after"]
        print(
            f"{cfg.algo}: greedy accuracy {b['accuracy']:.3f} -> {a['accuracy']:.3f} on {a['n']} held-out prompts, "
            f"mean length {b['mean_length']:.1f} -> {a['mean_length']:.1f}, {summary['train_seconds']:.0f} s of training"
            + (f"; stopped: {summary['stop_reason']}" if summary["stop_reason"] else "")
        )
    if args.json:
        save_json(summary, args.json)
    return 0


def _eval(args) -> int:
    from .metrics import evaluate
    from .models import load_policy, set_threads
    from .tasks import get_task
    from .trainer import save_json

    set_threads()
    model, tokenizer = load_policy(args.model, args.device)
    task = get_task(_default_task(args.model, args.task), n_test=args.n)
    greedy = evaluate(model, tokenizer, task, n_prompts=args.n, greedy=True, max_new_tokens=args.max_new_tokens)
    sampled = evaluate(model, tokenizer, task, n_prompts=args.n, samples=args.samples, temperature=args.temperature,
                       max_new_tokens=args.max_new_tokens, seed=args.seed)
    k = args.samples
    out = {
        "model": args.model,
        "n": greedy["n_prompts"],
        "greedy_accuracy": greedy["accuracy"],
        "greedy_mean_length": greedy["length_mean"],
        f"sampled_accuracy_t{args.temperature:g}": sampled["accuracy"],
        f"pass@{k}": sampled.get(f"pass@{k}", sampled["accuracy"]),
        "pass_at_k": sampled.get("pass_at_k", {1: sampled["accuracy"]}),
        "examples": greedy["examples"],
    }
    print(f"{args.model}: greedy accuracy {out['greedy_accuracy']:.3f}, pass@{k} {out[f'pass@{k}']:.3f} "
          f"(T={args.temperature:g}) on {out['n']} held-out prompts")
    if args.json:
        save_json(out, args.json)
    return 0


def _compare(args) -> int:
    from .experiments import TIME_BUDGETS, compare
    from .trainer import save_json

    if args.max_samples is not None:  # a sample budget: no time budget unless one is asked for
        budgets = {a: args.seconds for a in args.algos} if args.seconds else None
    else:
        budgets = {a: (args.seconds or TIME_BUDGETS[a]) for a in args.algos}
    extra = [x for k, v in args.overrides for x in ("--set", f"{k}={json.dumps(v)}")]
    result = compare(args.algos, args.seeds, budgets, args.steps, args.eval_every, args.n_eval, args.out, extra,
                     progress=lambda line: print(line, flush=True), max_samples=args.max_samples, pass_k=args.pass_k)
    save_json(result, f"{args.out}/summary.json")
    print(result["table"])
    return 0


def _paired(args) -> int:
    from .experiments import format_paired_summary, paired_updates
    from .trainer import TrainConfig, save_json

    field, values = args.vary
    arms = {f"{field}={json.dumps(v)}": {field: v} for v in values}
    cfg = TrainConfig(algo=args.algo, steps=args.steps, seed=args.seed, prompts_per_step=args.prompts,
                      group_size=args.group_size, max_new_tokens=args.max_new_tokens, lr=args.lr, device=args.device,
                      algo_overrides=dict(args.overrides))
    result = paired_updates(cfg, arms, args.steps, low_p=args.low_p, progress=not args.quiet)
    print(format_paired_summary(result["summary"]))
    if args.json:
        save_json(result, args.json)
    return 0


def _pretrain(args) -> int:
    from .models import TINY_MODEL_DIR
    from .pretrain import GPU_MODEL_DIR, pretrain

    out = args.out or (GPU_MODEL_DIR if args.size == "gpu" else TINY_MODEL_DIR)
    s = pretrain(out_dir=out, seed=args.seed, max_steps=args.max_steps, target_accuracy=args.target_accuracy,
                 eval_from=args.eval_from, eval_every=args.eval_every, n_eval=args.n_eval, progress=not args.quiet,
                 size=args.size, hidden=args.hidden, layers=args.layers, heads=args.heads, ffn=args.ffn,
                 batch_size=args.batch_size, lr=args.lr, device=args.device)
    print(f"pretrained {s['parameters']:,} parameters in {s['seconds']:.0f} s ({s['steps']} steps): held-out greedy "
          f"accuracy {s['held_out_greedy_accuracy']:.3f}, sampled (T=1) {s['held_out_sampled_accuracy_t1']:.3f}")
    return 0


def _bench(args) -> int:
    from .bench import PARTS, BenchConfig, format_table, run_bench
    from .trainer import TrainConfig, save_json

    train = TrainConfig(algo="grpo", model=args.model, seed=args.seed, prompts_per_step=args.prompts,
                        group_size=args.group_size, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                        lr=args.lr, track_kl=False, device=args.device)
    cfg = BenchConfig(train=train, steps=args.steps, warmup=args.warmup, pairs=args.pairs,
                      rollout_repeats=args.rollout_repeats, parts=tuple(args.only or PARTS), isolate=not args.in_process)
    result = run_bench(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_table(result))
    if args.json:
        save_json(result, args.json)
    return 0


def _export(args) -> int:
    from .export import export_recipe

    files = export_recipe(args.algo, args.engine, args.model, args.task, args.out)
    print(f"{args.algo} for {args.engine}: wrote {len(files)} files in {args.out} (read README.md there first)")
    for f in files:
        print(f"  {f}")
    return 0


def _doctor(args) -> int:
    from .doctor import run

    return run()


if __name__ == "__main__":
    sys.exit(main())
