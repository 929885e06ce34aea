"""Rollout: sample G completions per prompt, and score tokens under a model.

``sample_group`` runs batched sampling with a KV cache and returns a ``Rollout``: completion ids,
a completion mask that stops after EOS (the EOS token itself is part of the completion: the
policy chose to stop), the sampling log-probs and entropies. ``token_logps`` recomputes
log-probs (and entropies) of given completions with one forward pass, as the trainer needs for
the current, old and reference policies. Log-probs are always taken at the sampling temperature
(logits / T), or the importance ratio would compare two different distributions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..core.checks import check_positive_int
from ..core.losses import entropy_from_logits

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass
class Rollout:
    """One batch of sampled completions; rows ``g*G .. g*G+G-1`` answer prompt ``g``."""

    prompt_ids: torch.Tensor  # [B, P] left-padded
    prompt_mask: torch.Tensor  # [B, P]
    completion_ids: torch.Tensor  # [B, T] padded with pad_token_id after EOS
    completion_mask: torch.Tensor  # [B, T] 1 up to and including EOS
    sample_logp: torch.Tensor  # [B, T] log-probs at sampling time (0 on padding)
    entropy: torch.Tensor  # [B, T] entropy of the sampling distribution (0 on padding)
    finished: torch.Tensor  # [B] bool: ended with EOS within the budget (False: truncated)
    group_size: int  # 0 when the number of rows per prompt varies (GFPO with adaptive k)
    texts: list[str] = field(default_factory=list)  # decoded completions, no special tokens

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1).long()

    def select(self, rows: torch.Tensor, group_size: int | None = None) -> "Rollout":
        """The rows ``rows`` (an index or bool tensor) as a new Rollout."""
        if rows.dtype == torch.bool:
            rows = rows.nonzero().flatten()
        return Rollout(
            self.prompt_ids[rows],
            self.prompt_mask[rows],
            self.completion_ids[rows],
            self.completion_mask[rows],
            self.sample_logp[rows],
            self.entropy[rows],
            self.finished[rows],
            self.group_size if group_size is None else group_size,
            [self.texts[i] for i in rows.tolist()],
        )

    @staticmethod
    def cat(parts: list["Rollout"], pad_token_id: int) -> "Rollout":
        """Concatenate rollouts (of one group size), right-padding completions to a common length."""
        T = max(p.completion_ids.shape[1] for p in parts)
        P = max(p.prompt_ids.shape[1] for p in parts)

        def rpad(x, width, value):
            return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

        def lpad(x, width, value):
            return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)

        return Rollout(
            torch.cat([lpad(p.prompt_ids, P, pad_token_id) for p in parts]),
            torch.cat([lpad(p.prompt_mask, P, 0) for p in parts]),
            torch.cat([rpad(p.completion_ids, T, pad_token_id) for p in parts]),
            torch.cat([rpad(p.completion_mask, T, 0) for p in parts]),
            torch.cat([rpad(p.sample_logp, T, 0.0) for p in parts]),
            torch.cat([rpad(p.entropy, T, 0.0) for p in parts]),
            torch.cat([p.finished for p in parts]),
            parts[0].group_size,
            [t for p in parts for t in p.texts],
        )


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    chat: bool = False,
    system: str | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenise prompts, left-padded: ``(ids [N, P], mask [N, P])``. ``chat`` applies the chat template."""
    if not prompts:
        raise ValueError("prompts must hold at least one prompt, got an empty list")
    if chat:
        if tokenizer.chat_template is None:
            raise ValueError(
                "chat=True needs a tokenizer with a chat template, got one without (chat_template is None)"
            )
        texts = []
        for p in prompts:
            msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": p}]
            texts.append(tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    else:
        enc = tokenizer(prompts, return_tensors="pt", padding=True)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


SPEEDUPS = {"share_prompt": True, "compact": True, "length_grouping": True}
"""The three ways the lab's rollout and log-probs save work, each on by default; a function's own
keyword (``share_prompt``, ``compact``, ``bucket``) wins over this setting when it is given:

- ``share_prompt``: a group's prompt is run once and its keys and values serve all G rows
  (``sample_group`` and ``token_logps``);
- ``compact``: finished rows leave the model's batch while the others still write (``sample_group``);
- ``length_grouping``: ``token_logps`` runs rows of similar length together (``length_buckets``);
  off, it makes one forward pass over the padded batch (which also runs each row's prompt)."""


@contextmanager
def speedups_off(*names: str) -> Iterator[None]:
    """Within the block, the named ``SPEEDUPS`` are off (the benchmark's ablations)."""
    bad = [n for n in names if n not in SPEEDUPS]
    if bad:
        raise ValueError(f"names must be among {sorted(SPEEDUPS)}, got {bad}")
    before = dict(SPEEDUPS)
    SPEEDUPS.update({n: False for n in names})
    try:
        yield
    finally:
        SPEEDUPS.update(before)


def _positions(attention_mask: torch.Tensor) -> torch.Tensor:
    # Left padding: each row's first real token is position 0.
    return (attention_mask.cumsum(dim=1) - 1).clamp_min(0)


@torch.no_grad()
def sample_group(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    group_size: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    greedy: bool = False,
    share_prompt: bool | None = None,
    compact: bool | None = None,
) -> Rollout:
    """Sample ``group_size`` completions for each prompt with a KV cache.

    ``prompt_ids``/``prompt_mask`` are ``[N, P]`` left-padded (``encode_prompts``). Rows are
    repeated so that the G samples of a prompt are consecutive. A row stops at EOS; rows that
    reach ``max_new_tokens`` without it are marked ``finished=False`` (truncated).
    ``greedy=True`` takes the most likely token instead of sampling (for evaluation).
    ``share_prompt`` and ``compact`` (default: ``SPEEDUPS``) switch the two speed-ups off; the
    tokens drawn are the same either way.
    """
    check_positive_int("group_size", group_size)
    check_positive_int("max_new_tokens", max_new_tokens)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (sampling), got {temperature}")
    if prompt_ids.shape != prompt_mask.shape or prompt_ids.dim() != 2:
        raise ValueError(
            "prompt_ids and prompt_mask must be [N, P] of one shape, "
            f"got {tuple(prompt_ids.shape)} and {tuple(prompt_mask.shape)}"
        )
    device = prompt_ids.device
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    ids = prompt_ids.repeat_interleave(group_size, dim=0)
    am = prompt_mask.repeat_interleave(group_size, dim=0)
    B = ids.shape[0]
    share_prompt = group_size == 1 or (SPEEDUPS["share_prompt"] if share_prompt is None else share_prompt)
    compact = SPEEDUPS["compact"] if compact is None else compact
    was_training = model.training
    model.eval()
    # Speed: the G samples of a prompt share its prefix, so each prompt is run once and its KV cache
    # (and first-token logits) repeated G times: the same numbers as running every copy.
    if share_prompt:
        out = model(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            position_ids=_positions(prompt_mask),
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out.cache if hasattr(out, "cache") else out.past_key_values
        logits = out.logits[:, -1, :].repeat_interleave(group_size, dim=0)
    if group_size > 1 and share_prompt and hasattr(cache, "batch_repeat_interleave"):
        cache.batch_repeat_interleave(group_size)
    elif group_size > 1:  # sharing is off, or a cache that cannot be repeated: run every copy
        out = model(input_ids=ids, attention_mask=am, position_ids=_positions(am), use_cache=True, logits_to_keep=1)
        cache = out.cache if hasattr(out, "cache") else out.past_key_values
        logits = out.logits[:, -1, :]
    pos = _positions(am)[:, -1]
    tokens, logps, ents = [], [], []
    done = torch.zeros(B, dtype=torch.bool, device=device)
    alive_mask = []
    # Speed: rows that have finished leave the model's batch (their KV-cache rows are dropped), so
    # late steps run on the rows still writing. ``rows`` are the batch rows the model still runs on.
    # Sampling keeps the full [B, V] shape (finished rows get a placeholder distribution and pad), so
    # it draws the same random numbers as if every row still ran: the same seed gives the same tokens.
    rows = None
    compactable = compact and hasattr(cache, "reorder_cache")
    for _ in range(max_new_tokens):
        if rows is not None:
            full = logits.new_zeros(B, logits.shape[-1])
            full[rows] = logits
            logits = full
        scaled = logits.float() / temperature
        _check_logits(logits, scaled, temperature)
        logprobs = torch.log_softmax(scaled, dim=-1)
        if greedy:
            nxt = logprobs.argmax(dim=-1)
        else:
            nxt = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(1)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        alive_mask.append(~done)
        tokens.append(nxt)
        logps.append(logprobs.gather(1, nxt.unsqueeze(1)).squeeze(1) * (~done))
        ents.append(entropy_from_logits(scaled) * (~done))
        done = done | (nxt == eos)
        if bool(done.all()):
            break
        am = torch.cat([am, alive_mask[-1].long().unsqueeze(1)], dim=1)  # the token just written is real
        pos = pos + 1
        running = torch.arange(B, device=device) if rows is None else rows
        if compactable and int((~done).sum()) <= len(running) * 7 // 8:  # compact once an eighth has finished
            keep = (~done[running]).nonzero().flatten()
            cache.reorder_cache(keep)
            rows = running[keep]
        sel = slice(None) if rows is None else rows
        out = model(
            input_ids=nxt[sel].unsqueeze(1),
            attention_mask=am[sel],
            position_ids=pos[sel].unsqueeze(1),
            cache=cache,
            use_cache=True,
        )
        cache = out.cache if hasattr(out, "cache") else out.past_key_values
        logits = out.logits[:, -1, :]
    if was_training:
        model.train()
    completion_ids = torch.stack(tokens, dim=1)
    mask = torch.stack(alive_mask, dim=1).long()
    texts = tokenizer.batch_decode(completion_ids.masked_fill(mask == 0, pad), skip_special_tokens=True)
    return Rollout(
        prompt_ids=prompt_ids.repeat_interleave(group_size, dim=0),
        prompt_mask=prompt_mask.repeat_interleave(group_size, dim=0),
        completion_ids=completion_ids,
        completion_mask=mask,
        sample_logp=torch.stack(logps, dim=1),
        entropy=torch.stack(ents, dim=1),
        finished=done,
        group_size=group_size,
        texts=texts,
    )


def _check_logits(logits: torch.Tensor, scaled: torch.Tensor, temperature: float) -> None:
    """Refuse to sample from logits that are not finite, naming the likely cause: a model whose
    weights went NaN or infinite (most often a learning rate far too large), or a temperature so
    close to 0 that logits / temperature overflow."""
    if bool(torch.isfinite(scaled).all()):
        return
    if not bool(torch.isfinite(logits).all()):
        raise ValueError(
            "the policy's logits hold NaN or infinity, so its weights are broken: most often a learning rate (lr) "
            "far too large; start again from a healthy checkpoint with a smaller lr"
        )
    raise ValueError(
        f"temperature {temperature:g} is too close to 0: logits / temperature overflow; use a temperature of at "
        "least 1e-3, or greedy decoding"
    )


def token_logps(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    bucket: bool | None = None,
    share_prompt: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``[B, T]`` of the completion tokens under ``model`` at ``temperature``.

    Returns ``(logp, entropy)``; ``entropy`` is None unless ``with_entropy``. Gradients flow when
    called outside ``torch.no_grad``. ``bucket`` (on the CPU) runs rows of similar length together,
    skipping the padding (``length_buckets``), and each distinct prompt once; False: one forward pass
    over the padded batch. Both give the same values up to float rounding. ``bucket`` and
    ``share_prompt`` default to ``SPEEDUPS`` (``length_grouping`` and ``share_prompt``).
    """
    bucket = SPEEDUPS["length_grouping"] if bucket is None else bucket
    share_prompt = SPEEDUPS["share_prompt"] if share_prompt is None else share_prompt
    B, T = completion_ids.shape
    # A row's width: up to its last real token (the mask may have holes, e.g. a tool mask).
    widths = (completion_mask.long() * torch.arange(1, T + 1, device=completion_mask.device)).amax(dim=1)
    buckets = length_buckets(widths, prompt_ids.shape[1], T, completion_ids.device) if bucket else None
    if buckets and (len(buckets) > 1 or buckets[0][1] < T):
        # Speed: rows sorted by length and run in buckets, each cut to its longest completion, so no
        # compute goes to padding. Each row's values are the same (up to float rounding) as in one
        # batch: positions after a row's last token never influence it (causal attention).
        # And a prompt shared by a group is run once: its keys and values (and gradients) serve all G rows.
        logp, ent = completion_ids.new_zeros(B, T, dtype=torch.float32), None
        if with_entropy:
            ent = torch.zeros_like(logp)
        prefix = _shared_prefix(model, prompt_ids, prompt_mask) if share_prompt else None
        for idx, width in buckets:
            if prefix is None:
                lp, en = token_logps(
                    model,
                    prompt_ids[idx],
                    prompt_mask[idx],
                    completion_ids[idx, :width],
                    completion_mask[idx, :width],
                    temperature,
                    with_entropy,
                    bucket=False,
                )
            else:
                lp, en = _logps_after_prefix(
                    model,
                    prefix,
                    idx,
                    prompt_mask[idx],
                    completion_ids[idx, :width],
                    completion_mask[idx, :width],
                    temperature,
                    with_entropy,
                )
            logp = logp.index_put((idx.unsqueeze(1), torch.arange(width, device=logp.device)), lp)
            if with_entropy:
                ent = ent.index_put((idx.unsqueeze(1), torch.arange(width, device=ent.device)), en)
        return logp, ent
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    am = torch.cat([prompt_mask, completion_mask], dim=1)
    # logits at position p predict token p+1: keep the T positions before each completion token.
    logits = model(input_ids=ids, attention_mask=am, position_ids=_positions(am), logits_to_keep=T + 1).logits[
        :, :-1, :
    ]
    return _logps_from_logits(logits, completion_ids, completion_mask, temperature, with_entropy)


def _logps_from_logits(logits, completion_ids, completion_mask, temperature, with_entropy):
    logits = logits.float() / temperature
    logp = torch.log_softmax(logits, dim=-1).gather(2, completion_ids.unsqueeze(2)).squeeze(2)
    logp = logp * completion_mask
    ent = entropy_from_logits(logits) * completion_mask if with_entropy else None
    return logp, ent


def _shared_prefix(model, prompt_ids, prompt_mask):
    """``(row -> unique prompt, first-token logits, [(keys, values) per layer])`` of the distinct
    prompts, run once with gradients; None when no prompt repeats or the cache has no per-layer
    keys and values."""
    rows = torch.cat([prompt_ids, prompt_mask], dim=1)
    uniq, inv = torch.unique(rows, dim=0, return_inverse=True)
    if len(uniq) == len(rows):
        return None
    P = prompt_ids.shape[1]
    ids, mask = uniq[:, :P], uniq[:, P:]
    out = model(input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=True, logits_to_keep=1)
    cache = out.cache if hasattr(out, "cache") else out.past_key_values
    layers = getattr(cache, "layers", None)
    if not layers or not all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers):
        return None
    return inv, out.logits[:, -1, :], [(layer.keys, layer.values) for layer in layers]


def _logps_after_prefix(model, prefix, idx, prompt_mask, completion_ids, completion_mask, temperature, with_entropy):
    """``token_logps`` for rows ``idx`` whose prompts were run by ``_shared_prefix``: only the
    completion tokens go through the model, attending to the prompt's cached keys and values."""
    from transformers import DynamicCache

    inv, first, kv = prefix
    rows = inv[idx]
    # index_select, not first[rows]: rows repeat (G rows share a prompt), and on the CPU the backward of
    # advanced indexing adds the repeats with parallel atomic adds in a thread-dependent order, so the
    # same seed gave gradients differing in the last bit; index_select's backward adds them in order.
    logits = first.index_select(0, rows).unsqueeze(1)  # the prompt's last position predicts the first token
    w = completion_ids.shape[1]
    if w > 1:
        cache = DynamicCache()
        for layer, (k, v) in enumerate(kv):
            cache.update(k.index_select(0, rows), v.index_select(0, rows), layer)
        am = torch.cat([prompt_mask, completion_mask[:, : w - 1]], dim=1)
        more = model(
            input_ids=completion_ids[:, : w - 1],
            attention_mask=am,
            position_ids=_positions(am)[:, -(w - 1) :],
            cache=cache,
            use_cache=True,
        ).logits
        logits = torch.cat([logits, more], dim=1)
    return _logps_from_logits(logits, completion_ids, completion_mask, temperature, with_entropy)


BUCKET_OVERHEAD_TOKENS = 128
"""What one more forward pass costs on the CPU, in tokens of compute (a rough measure: the tiny model
on the 2-core CPU, where 64-256 gave about the same speed)."""


def length_buckets(
    lengths: torch.Tensor, prompt_width: int, width: int, device: torch.device | str
) -> list[tuple[torch.Tensor, int]]:
    """Rows grouped for ``token_logps``: ``[(row indices, completion width), ...]``; ``lengths`` ``[B]``
    is each row's width (up to its last real token), ``width`` the padded width.

    On the CPU, rows sorted by length are cut into the groups that minimise the tokens computed
    (rows x (prompt + longest completion of the group)) plus ``BUCKET_OVERHEAD_TOKENS`` a group, by
    dynamic programming over the distinct lengths. On a GPU, padding costs little and one large
    batch is faster: one group of all rows at the full width.
    """
    B = lengths.shape[0]
    if torch.device(device).type != "cpu" or B < 2:
        return [(torch.arange(B, device=device), width)]
    order = torch.argsort(lengths, stable=True)
    values, counts = torch.unique_consecutive(lengths[order], return_counts=True)
    values = [max(1, v) for v in values.tolist()]
    ends = torch.cumsum(counts, 0).tolist()
    # best[j]: least cost for the rows with the j smallest distinct lengths; cut[j]: where its last group starts
    best, cut = [0.0] + [float("inf")] * len(values), [0] * (len(values) + 1)
    for j in range(1, len(values) + 1):
        for i in range(j):
            rows = ends[j - 1] - (ends[i - 1] if i else 0)
            c = best[i] + rows * (prompt_width + values[j - 1]) + BUCKET_OVERHEAD_TOKENS
            if c < best[j]:
                best[j], cut[j] = c, i
    groups, j = [], len(values)
    while j > 0:
        i = cut[j]
        start = ends[i - 1] if i else 0
        groups.append((order[start : ends[j - 1]], min(width, values[j - 1])))
        j = i
    return groups[::-1]
