"""The hf profile offline: the cells of notebooks 03 to 09 tagged "setup" and "train-it" (the live training runs,
as ``tools/run_train_cells.py`` runs them) under ``GRPO_LAB_PROFILE=hf``, with ``GRPO_LAB_MODEL`` a tiny Qwen2 chat
model (``gsm8k_fixture``'s: a real byte-level BPE tokenizer and Qwen2.5's chat template) and ``GRPO_LAB_DATA_DIR`` a
local folder in GSM8K's own format. Nothing comes from the hub. The profile's own sizes are used, unchanged.

The live claims those cells check on every profile (KL above zero after GRPO, GSPO's clipping, DAPO's refills) need
groups whose answers score differently, which a random model almost never gives (about 2% of its completions were
right here, most groups all wrong). So every answer in the folder is one digit, and the random model is first
taught the answer's shape, ``#### <digit>`` then the end of its turn, by 150 steps of supervised fine-tuning (about
ten seconds): it then guesses a digit, right about one time in eight, and most groups are mixed.

After the cells, a probe cell reports every trainer the notebook made: each must have trained the Qwen2 chat model
on gsm8k at the hf profile's completion length, its prompts wrapped in the chat template.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import gsm8k_fixture
import pytest
import torch

from grpo_lab.course.profile import PROFILES
from grpo_lab.train.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import run_train_cells  # noqa: E402

tiny_qwen_chat_dir = gsm8k_fixture.tiny_qwen_chat_dir  # the fixtures
gsm8k_dir = gsm8k_fixture.gsm8k_dir
NOTEBOOKS = ["03_grpo", "04_aggregation_dr_grpo", "05_dapo", "06_gspo", "07_gfpo", "08_bakeoff", "09_debugging"]
PROBE = """
import json
from grpo_lab.train.trainer import Trainer
from grpo_lab.lab.rollout import encode_prompts
seen = {}
for v in list(globals().values()):
    for t in (v.values() if isinstance(v, dict) else [v]):
        if isinstance(t, Trainer):
            seen[id(t)] = t
report = []
for t in seen.values():
    ids, mask = encode_prompts(t.tokenizer, t.task.train["prompt"][:1], chat=t.task.chat)
    report.append({"model": type(t.model).__name__, "task": t.task.name, "max_new_tokens": t.cfg.max_new_tokens,
                   "steps": t.step, "prompt": t.tokenizer.decode(ids[0][mask[0].bool()])})
print(json.dumps({"profile": P["name"], "data_dir": P["data_dir"], "trainers": report}))
"""


def small_answer_problem(rng: random.Random) -> dict:
    """A GSM8K-format problem whose answer is one digit (0 to 9)."""
    who, what = rng.choice(gsm8k_fixture.NAMES), rng.choice(gsm8k_fixture.THINGS)
    a = rng.randint(2, 9)
    b = rng.randint(0, a)
    question = f"{who} has {a} {what} and gives away {b}. How many {what} are left?"
    answer = f"{who} has {a} - {b} = <<{a}-{b}={a - b}>>{a - b} {what} left.\n#### {a - b}"
    return {"question": question, "answer": answer}


@pytest.fixture(scope="module")
def digits_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gsm8k-digits")
    rng = random.Random("gsm8k-digits")
    for split, n in (("train", 64), ("test", 16)):
        rows = [small_answer_problem(rng) for _ in range(n)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture(scope="module")
def answering_model_dir(tiny_qwen_chat_dir, digits_dir, tmp_path_factory) -> Path:
    """The tiny chat model after 150 steps of supervised fine-tuning on '#### <answer><|im_end|>' after each chat
    prompt of ``digits_dir``'s train split (the loss on the answer's tokens only)."""
    from grpo_lab.lab.models import load_policy

    model, tok = load_policy(str(tiny_qwen_chat_dir), device="cpu")
    pairs = []
    for line in (digits_dir / "train.jsonl").read_text().splitlines():
        row = json.loads(line)
        prompt = [{"role": "user", "content": row["question"]}]
        text = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        target = "#### " + row["answer"].split("####")[1].strip() + tok.eos_token
        pairs.append(
            (tok(text, add_special_tokens=False)["input_ids"], tok(target, add_special_tokens=False)["input_ids"])
        )
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(150):
        batch = [pairs[i] for i in torch.randint(len(pairs), (16,)).tolist()]
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((16, width), tok.pad_token_id)
        labels = torch.full((16, width), -100)
        mask = torch.zeros(16, width, dtype=torch.long)
        for j, (p, a) in enumerate(batch):
            ids[j, : len(p) + len(a)] = torch.tensor(p + a)
            mask[j, : len(p) + len(a)] = 1
            labels[j, len(p) : len(p) + len(a)] = torch.tensor(a)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    folder = tmp_path_factory.mktemp("tiny-qwen2-chat-answering")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def hf_env(answering_model_dir, digits_dir):
    mp = pytest.MonkeyPatch()
    for k, v in {
        "GRPO_LAB_PROFILE": "hf",
        "GRPO_LAB_MODEL": str(answering_model_dir),
        "GRPO_LAB_DATA_DIR": str(digits_dir),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(ROOT),  # the kernel imports this checkout's grpo_lab
    }.items():
        mp.setenv(k, v)
    yield
    mp.undo()


def test_the_train_it_cells_are_tagged_in_every_notebook_with_a_live_run():
    assert [p.stem for p in run_train_cells.tagged_notebooks()] == NOTEBOOKS
    for stem in NOTEBOOKS:
        nb = run_train_cells.train_cells(ROOT / "notebooks" / f"{stem}.ipynb")
        sources = "\n".join(c.source for c in nb.cells)
        assert "P = profile()" in sources and 'load_policy(P["model"])' in sources, stem
        assert 'get_task(P["task"], data_dir=P["data_dir"])' in sources, stem
        assert 'load_policy("tiny-sum3"' not in sources and 'get_task("sum3")' not in sources, stem


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_the_train_it_cells_run_on_a_qwen2_chat_model_on_gsm8k(hf_env, digits_dir, stem):
    t0 = time.perf_counter()
    nb = run_train_cells.execute(run_train_cells.train_cells(ROOT / "notebooks" / f"{stem}.ipynb", probe=PROBE))
    print(f"{stem}: {time.perf_counter() - t0:.1f} s")
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    r = json.loads(out.strip().splitlines()[-1])
    assert r["profile"] == "hf" and r["data_dir"] == str(digits_dir)
    assert r["trainers"], "no Trainer was made"
    hf_tokens = PROFILES["hf"]["max_new_tokens"]
    assert hf_tokens != TrainConfig.__dataclass_fields__["max_new_tokens"].default  # else the next check is blind
    questions = [json.loads(line)["question"] for line in (digits_dir / "train.jsonl").read_text().splitlines()]
    for t in r["trainers"]:
        assert (t["model"], t["task"], t["max_new_tokens"]) == ("Qwen2ForCausalLM", "gsm8k", hf_tokens), t
        head, tail = (
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n",
            ("<|im_end|>\n<|im_start|>assistant\n"),
        )
        assert t["prompt"].startswith(head) and t["prompt"].endswith(tail), t["prompt"]
        assert t["prompt"][len(head) : -len(tail)] in questions
    assert max(t["steps"] for t in r["trainers"]) >= 1  # a live run trained (a sampler-only Trainer takes no step)
