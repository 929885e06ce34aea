"""Tests for ``grpo_lab.lab.models`` (and prompt encoding): the shipped tiny model and its character
tokenizer load with ``from_pretrained`` and round-trip text; a local Hugging Face folder (a tiny
random Qwen2 with a chat template) loads by path; ``encode_prompts`` left-pads and applies the
chat template only when asked.

Expected token ids are written from the vocabulary's definition (``<pad>``, ``<bos>``, ``<eos>``,
then the characters in order), not read back from the code under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import QWEN_CHARS
from transformers import AutoTokenizer, LlamaForCausalLM, Qwen2ForCausalLM

from grpo_lab.lab.models import build_char_tokenizer, load_policy, resolve_model_path
from grpo_lab.lab.rollout import encode_prompts
from grpo_lab.lab.tasks import SUM3_CHARS, sum3_completion, sum3_prompt

ASSET_DIR = Path(__file__).resolve().parents[2] / "assets" / "tiny-sum3"


def qwen_id(ch: str) -> int:
    return 3 + QWEN_CHARS.index(ch)


# --------------------------------------------------------------------------------------------
# The saved tokenizer of the tiny model
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_tokenizer():
    return AutoTokenizer.from_pretrained(str(ASSET_DIR))


@pytest.mark.parametrize(
    "text",
    list(SUM3_CHARS)
    + [SUM3_CHARS, sum3_prompt(7, 85, 29), sum3_completion(7, 85, 29, "verbose", 8), sum3_prompt(0, 0, 0) + "0"],
)
def test_saved_tokenizer_round_trips_sum3_text_one_token_per_character_after_bos(saved_tokenizer, text):
    ids = saved_tokenizer(text)["input_ids"]
    assert len(ids) == len(text) + 1  # never empty: <bos> then one id per character
    assert ids[0] == saved_tokenizer.bos_token_id
    assert saved_tokenizer.decode(ids, skip_special_tokens=True) == text


def test_saved_tokenizer_gives_each_sum3_character_its_own_non_special_id(saved_tokenizer):
    ids = {ch: saved_tokenizer(ch, add_special_tokens=False)["input_ids"] for ch in SUM3_CHARS}
    assert all(len(v) == 1 for v in ids.values()), ids
    flat = [v[0] for v in ids.values()]
    assert len(set(flat)) == len(SUM3_CHARS)
    specials = {saved_tokenizer.pad_token_id, saved_tokenizer.bos_token_id, saved_tokenizer.eos_token_id}
    assert len(specials) == 3
    assert specials.isdisjoint(flat)


def test_saved_tokenizer_special_tokens_match_the_model_config(saved_tokenizer, tiny_policy):
    model, _ = tiny_policy
    assert saved_tokenizer.pad_token == "<pad>"
    assert saved_tokenizer.bos_token == "<bos>"
    assert saved_tokenizer.eos_token == "<eos>"
    assert saved_tokenizer.eos_token_id == model.config.eos_token_id
    assert saved_tokenizer.bos_token_id == model.config.bos_token_id
    assert saved_tokenizer.pad_token_id == model.config.pad_token_id
    assert len(saved_tokenizer) <= model.config.vocab_size


# --------------------------------------------------------------------------------------------
# load_policy
# --------------------------------------------------------------------------------------------


def test_load_policy_tiny_sum3_is_a_float32_llama_on_cpu_with_left_padding(tiny_policy):
    model, tok = tiny_policy
    assert isinstance(model, LlamaForCausalLM)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert tok.padding_side == "left"
    assert model.generation_config.pad_token_id == tok.pad_token_id


def test_resolve_model_path_maps_the_default_name_to_the_assets_and_passes_others_through():
    assert Path(resolve_model_path("tiny-sum3")).resolve() == ASSET_DIR
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


def test_the_long_answer_model_is_shipped_with_the_lab_tokenizer_and_writes_long_answers():
    from grpo_lab.lab.models import is_lab_tokenizer, load_policy
    from grpo_lab.lab.rollout import sample_group
    from grpo_lab.lab.tasks import sum3_prompt

    assert Path(resolve_model_path("tiny-sum3-long")).resolve() == ASSET_DIR.parent / "tiny-sum3-long"
    model, tok = load_policy("tiny-sum3-long")
    assert is_lab_tokenizer(tok)
    assert model.config.lab_longest_answer == 85  # 64 dots, "99+99=198,198+99=297" (20), EOS
    ids = tok([sum3_prompt(7, 85, 29)] * 4, return_tensors="pt", padding=True)
    gen = torch.Generator().manual_seed(0)
    ro = sample_group(model, tok, ids["input_ids"], ids["attention_mask"], 8, 128, 1.0, gen)
    lengths = ro.lengths.float()
    assert lengths.max() > 40 and lengths.min() < 20, lengths  # the shipped model's answers stop at 29 tokens


def test_tiny_tokenizer_left_pads_a_batch_of_prompts_of_different_lengths(tiny_policy):
    _, tok = tiny_policy
    ids, mask = encode_prompts(tok, ["1+2=", "07+85+29="])
    # Row 0: 5 real tokens (<bos> and 4 characters) after 5 pads; row 1: 10 real tokens.
    assert ids.shape == mask.shape == (2, 10)
    assert mask[0].tolist() == [0] * 5 + [1] * 5
    assert mask[1].tolist() == [1] * 10
    assert ids[0, :5].tolist() == [tok.pad_token_id] * 5
    assert ids[0, 5] == tok.bos_token_id and ids[1, 0] == tok.bos_token_id
    assert tok.decode(ids[0], skip_special_tokens=True) == "1+2="


def test_load_policy_on_a_local_qwen2_folder_loads_model_and_chat_tokenizer(tiny_qwen_dir):
    model, tok = load_policy(str(tiny_qwen_dir), device="cpu")
    assert isinstance(model, Qwen2ForCausalLM)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert tok.padding_side == "left"
    assert tok.chat_template is not None
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    ids = tok("ab?9", add_special_tokens=False)["input_ids"]
    assert ids == [qwen_id("a"), qwen_id("b"), qwen_id("?"), qwen_id("9")]
    out = model(input_ids=torch.tensor([[1] + ids]))
    assert out.logits.shape == (1, 5, 3 + len(QWEN_CHARS))


# --------------------------------------------------------------------------------------------
# encode_prompts with and without the chat template
# --------------------------------------------------------------------------------------------


def test_encode_prompts_chat_applies_the_template_without_adding_bos(tiny_qwen_dir):
    _, tok = load_policy(str(tiny_qwen_dir), device="cpu")
    ids, mask = encode_prompts(tok, ["ab", "xyz?"], chat=True)
    # The template writes the content, then '>' as the generation prompt: "ab>" and "xyz?>".
    want0 = [0, 0] + [qwen_id(c) for c in "ab>"]
    want1 = [qwen_id(c) for c in "xyz?>"]
    assert ids.tolist() == [want0, want1]
    assert mask.tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]


def test_encode_prompts_chat_puts_the_system_message_first(tiny_qwen_dir):
    _, tok = load_policy(str(tiny_qwen_dir), device="cpu")
    ids, _ = encode_prompts(tok, ["ab"], chat=True, system="sys")
    assert ids.tolist() == [[qwen_id(c) for c in "sysab>"]]


def test_encode_prompts_without_chat_adds_bos_and_no_template(tiny_qwen_dir):
    _, tok = load_policy(str(tiny_qwen_dir), device="cpu")
    ids, _ = encode_prompts(tok, ["ab"], chat=False)
    assert ids.tolist() == [[1, qwen_id("a"), qwen_id("b")]]


def test_encode_prompts_chat_with_a_tokenizer_without_template_raises(tiny_policy):
    _, tok = tiny_policy
    assert tok.chat_template is None
    with pytest.raises(ValueError, match="chat"):
        encode_prompts(tok, ["07+85+29="], chat=True)


def test_encode_prompts_rejects_an_empty_list(tiny_policy):
    _, tok = tiny_policy
    with pytest.raises(ValueError, match="prompts"):
        encode_prompts(tok, [])


def test_build_char_tokenizer_rejects_repeated_characters():
    with pytest.raises(ValueError, match="chars"):
        build_char_tokenizer("0123401")


# --------------------------------------------------------------------------------------------
# Model folders that cannot load, and devices that cannot run: one line naming them
# --------------------------------------------------------------------------------------------


def _copy_of_tiny(tmp_path, edit=None) -> Path:
    import shutil

    dst = tmp_path / "model"
    shutil.copytree(ASSET_DIR, dst)
    if edit is not None:
        edit(dst)
    return dst


def _a_file(path: Path) -> Path:
    path.write_text("x")
    return path


def _truncate(name: str, keep: float):
    def edit(folder: Path):
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: int(len(data) * keep)])

    return edit


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp: tmp / "missing", "does not exist"),
        (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "has no config.json"),
        (lambda tmp: _a_file(tmp / "f"), "is a file, not a folder"),
        (lambda tmp: _copy_of_tiny(tmp, _truncate("config.json", 0.5)), "config.json is not valid JSON"),
        (lambda tmp: _copy_of_tiny(tmp, _truncate("config.json", 0.0)), "config.json is not valid JSON"),
        (lambda tmp: _copy_of_tiny(tmp, _truncate("model.safetensors", 0.5)), "model.safetensors is truncated"),
        (lambda tmp: _copy_of_tiny(tmp, _truncate("model.safetensors", 0.0)), "model.safetensors is truncated"),
        (lambda tmp: _copy_of_tiny(tmp, _truncate("model.safetensors", 0.999)), "model.safetensors is truncated"),
        (lambda tmp: _copy_of_tiny(tmp, lambda f: (f / "model.safetensors").unlink()), "could not load its weights"),
        (lambda tmp: _copy_of_tiny(tmp, lambda f: (f / "tokenizer.json").unlink()), "could not load its tokenizer"),
    ],
    ids=[
        "missing",
        "empty",
        "a-file",
        "config-half",
        "config-empty",
        "weights-half",
        "weights-empty",
        "weights-last-byte-cut",
        "weights-missing",
        "tokenizer-missing",
    ],
)
def test_a_model_folder_that_cannot_load_gives_one_line_naming_it(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(ValueError, match=message) as info:
        load_policy(str(path), "cpu")
    assert "\n" not in str(info.value)
    assert path.name in str(info.value)


def test_the_safetensors_check_passes_a_whole_file():
    from grpo_lab.lab.models import check_model_folder

    check_model_folder(ASSET_DIR)  # no error


@pytest.mark.parametrize("device", ["bogus", "xla", "cuda:x", "", "gpu"])
def test_an_unknown_device_is_refused_naming_the_choices(device):
    from grpo_lab.lab.models import pick_device

    if device == "":
        assert pick_device(device).type in ("cpu", "cuda")  # empty means the default
        return
    with pytest.raises(ValueError, match="device must be 'cpu', 'cuda', 'cuda:N' or 'mps'"):
        pick_device(device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda_is_one_line_suggesting_the_cpu(device):
    from grpo_lab.lab.models import pick_device

    with pytest.raises(ValueError, match=r"needs CUDA, but this torch has none.*--device cpu"):
        pick_device(device)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_index_beyond_the_devices_is_refused():
    from grpo_lab.lab.models import pick_device

    with pytest.raises(ValueError, match="CUDA device"):
        pick_device(f"cuda:{torch.cuda.device_count()}")
    assert pick_device("cuda:0").type == "cuda"


def _save_tiny(folder: Path, model) -> str:
    model.save_pretrained(folder)
    build_char_tokenizer(SUM3_CHARS).save_pretrained(folder)
    return str(folder)


def test_a_decoder_loads_and_an_encoder_is_refused_with_one_line(tmp_path):
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    vocab = 3 + len(SUM3_CHARS)
    gpt2 = _save_tiny(tmp_path / "gpt2", GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2,
                                                                    n_positions=64)))  # fmt: skip
    model, _ = load_policy(gpt2, "cpu")
    assert type(model).__name__ == "GPT2LMHeadModel"
    config = BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64)  # fmt: skip
    bert = _save_tiny(tmp_path / "bert", BertForMaskedLM(config))
    with pytest.raises(ValueError, match=r"\(BertLMHeadModel\) is not a causal language model") as info:
        load_policy(bert, "cpu")
    assert "\n" not in str(info.value)


def test_is_lab_tokenizer_knows_the_shipped_tokenizer_and_no_other(tiny_policy, tiny_qwen_dir):
    from grpo_lab.lab.models import is_lab_tokenizer, load_tokenizer

    assert is_lab_tokenizer(tiny_policy[1])
    assert is_lab_tokenizer(load_tokenizer(str(ASSET_DIR)))
    assert not is_lab_tokenizer(load_tokenizer(str(tiny_qwen_dir)))
    assert not is_lab_tokenizer(build_char_tokenizer("0123456789"))
