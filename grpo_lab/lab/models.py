"""Policies: the lab's tiny Llama and its character tokenizer, or any causal LM by name.

The tiny model is a real ``LlamaForCausalLM`` (about 1M parameters) with a tokenizer built
with the ``tokenizers`` library and saved as a ``PreTrainedTokenizerFast``. Both load with
``from_pretrained`` from ``assets/tiny-sum3``, so the code that trains it also trains a
Hugging Face model by name on a GPU.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..io import first_line

if TYPE_CHECKING:
    from transformers import LlamaConfig, PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast

ASSETS = Path(__file__).resolve().parents[2] / "assets"
TINY_MODEL_DIR = ASSETS / "tiny-sum3"
DEFAULT_MODEL = "tiny-sum3"
LAB_MODELS = {DEFAULT_MODEL: TINY_MODEL_DIR, "tiny-sum3-long": ASSETS / "tiny-sum3-long"}
"""The lab's shipped policies by name: ``tiny-sum3`` (answers of up to 29 tokens) and ``tiny-sum3-long`` (up to 85)."""


def build_char_tokenizer(chars: str) -> PreTrainedTokenizerFast:
    """A character-level ``PreTrainedTokenizerFast``: ``<pad>``, ``<bos>``, ``<eos>`` then ``chars``.

    Encoding adds ``<bos>`` in front, like Llama's tokenizers; decoding joins characters with no
    spaces.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if len(set(chars)) != len(chars):
        raise ValueError(f"chars must not repeat characters, got {chars!r}")
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2}
    for c in chars:
        vocab[c] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", padding_side="left"
    )


def tiny_llama_config(
    vocab_size: int, hidden: int = 128, layers: int = 4, heads: int = 4, ffn: int = 512, max_positions: int = 64
) -> LlamaConfig:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )


def check_answer_room(model, max_new_tokens: int) -> None:
    """A lab model taught answers of up to ``config.lab_longest_answer`` tokens (``tiny-sum3-long``) is refused a
    shorter ``max_new_tokens``: most of its answers would be cut off and score 0, which looks like a bad model."""
    longest = getattr(model.config, "lab_longest_answer", None)
    if longest is not None and max_new_tokens < longest:
        raise ValueError(
            f"max_new_tokens (--max-new-tokens) {max_new_tokens} is shorter than the answers this model was taught "
            f"to write (up to {longest} tokens), so most would be cut off and score 0; give at least {longest} "
            "(the lab's runs of tiny-sum3-long use 128)"
        )


def pick_device(device: str | None = None, what: str = "device") -> torch.device:
    """``device`` if given ('cpu', 'cuda', 'cuda:N' or 'mps'), else CUDA when there is one, else CPU.

    A device this torch cannot use is refused with one line naming ``what`` (the command line: ``--device``),
    before any model is loaded.
    """
    if not device:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{what} must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"{what} {device!r} needs CUDA, but this torch has none (a CPU-only build or no GPU); use --device cpu"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"{what} {device!r}: there are {torch.cuda.device_count()} CUDA device(s), numbered from 0"
            )
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{what} {device!r} needs Apple's MPS, which this torch cannot use; use --device cpu")
    return dev


def resolve_model_path(name_or_path: str) -> str:
    """A name of ``LAB_MODELS`` means that shipped model; anything else goes to ``from_pretrained`` as is."""
    folder = LAB_MODELS.get(name_or_path)
    if folder is not None:
        if not (folder / "config.json").exists():
            raise ValueError(
                f"model {name_or_path!r} is not built yet: {folder} has no config.json; "
                "run `python -m grpo_lab pretrain` (docs/cli.md gives the command for each shipped model)"
            )
        return str(folder)
    return name_or_path


def _looks_like_a_path(name: str) -> bool:
    """A hub name is ``owner/name`` or ``name``; anything else (``./x``, ``/x``, ``a/b/c``, ``~``) is a folder."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name or Path(name).exists()


def check_model_folder(path: str | Path) -> None:
    """One clear line for a folder that cannot hold a model: missing, empty, a config.json that is not
    JSON, a safetensors file shorter than its own header says (a truncated copy or download)."""
    import json

    folder = Path(path).expanduser()
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise ValueError(f"model {str(path)!r} {what}; give a folder saved with save_pretrained, or 'tiny-sum3'")
    config = folder / "config.json"
    if not config.is_file():
        raise ValueError(f"model folder {folder} has no config.json: not a saved model (save one with save_pretrained)")
    try:
        json.loads(config.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"model folder {folder}: config.json is not valid JSON (truncated?): {err}") from None
    for f in sorted(folder.glob("*.safetensors")):
        problem = _safetensors_problem(f)
        if problem:
            raise ValueError(f"model folder {folder}: {f.name} {problem}; copy or save the model again")


def _safetensors_problem(file: Path) -> str | None:
    """Why ``file`` is not a whole safetensors file (its header gives the size the data must have), or None."""
    import json
    import struct

    size = file.stat().st_size
    with open(file, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"is truncated ({size} bytes)"
        n = struct.unpack("<Q", head)[0]
        if 8 + n > size:
            return f"is truncated: its header says {8 + n} bytes or more, the file has {size}"
        try:
            header = json.loads(fh.read(n))
        except (ValueError, UnicodeDecodeError):
            return "has a damaged header"
    ends = [
        t["data_offsets"][1]
        for k, t in header.items()
        if k != "__metadata__" and isinstance(t, dict) and "data_offsets" in t
    ]
    need = 8 + n + max(ends, default=0)
    if need > size:
        return f"is truncated: its header says {need} bytes, the file has {size}"
    return None


def load_tokenizer(name_or_path: str = DEFAULT_MODEL) -> PreTrainedTokenizerBase:
    """The tokenizer of a model (see ``load_policy``), left-padded, with a pad token; quick to load, so the
    command line reads it to check its choices before it loads any weights."""
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path)
    if _looks_like_a_path(path):
        check_model_folder(path)
        path = str(Path(path).expanduser())
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as err:  # hub unreachable, unknown name, missing or damaged tokenizer files
        raise ValueError(f"model {name_or_path!r}: could not load its tokenizer ({first_line(err)})") from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def is_lab_tokenizer(tokenizer: PreTrainedTokenizerBase) -> bool:
    """The lab's character tokenizer (the shipped model's, and that of every policy trained from it)."""
    from .tasks import SUM3_CHARS

    return set(tokenizer.get_vocab()) == {"<pad>", "<bos>", "<eos>", *SUM3_CHARS}


def load_policy(
    name_or_path: str = DEFAULT_MODEL, device: str | None = None, dtype: torch.dtype | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``(model, tokenizer)`` with ``from_pretrained``: the shipped tiny model, a local
    folder, or a Hugging Face model name (which needs the hub or a local cache).

    On CUDA the default dtype is bf16, on the CPU float32. The tokenizer pads on the left, so a
    batch of prompts ends where generation starts. A folder or name that cannot be loaded, or a model
    that is not a causal (left-to-right) language model, raises ``ValueError`` with one line naming it.
    """
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    dev = pick_device(device)
    tokenizer = load_tokenizer(name_or_path)
    path = resolve_model_path(name_or_path)
    if _looks_like_a_path(path):
        path = str(Path(path).expanduser())
    if dtype is None:
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    # A 1M-parameter model loads in milliseconds: its progress bar would only clutter a notebook.
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(dev)
    except torch.OutOfMemoryError:
        raise  # the command line names what to lower
    except Exception as err:  # damaged weights, a config no causal LM reads
        raise ValueError(f"model {name_or_path!r}: could not load its weights ({first_line(err)})") from None
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
    if not _is_causal(model):
        raise ValueError(
            f"model {name_or_path!r} ({type(model).__name__}) is not a causal language model: its first token's "
            "prediction depends on the tokens after it (an encoder such as BERT); give a decoder-only model"
        )
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


@torch.no_grad()
def _is_causal(model: PreTrainedModel) -> bool:
    """Whether the logits at position 0 ignore the token at position 1, as a left-to-right model's must
    (an encoder's do not: sampling from one fails deep inside generation)."""
    vocab = model.get_input_embeddings().num_embeddings
    ids = torch.tensor([[0, 1 % vocab], [0, 2 % vocab]], device=model.device)
    first = model(input_ids=ids).logits[:, 0].float()
    return torch.allclose(first[0], first[1], rtol=0, atol=1e-4 * (1 + first.abs().max().item()))


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def set_threads(n: int | None = None) -> None:
    """Use every core of a small CPU (torch may default to fewer), unless the user set OMP_NUM_THREADS."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(n or os.cpu_count() or 1)
