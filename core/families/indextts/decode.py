"""LinguaForge's IndexTTS2 GPT decoder: the training layout at every temperature, with or without a KV cache.

`decode` lays out the prompt with `layout_sample(text_ids)` — conditioning, [start, text, stop],
start 8192 — exactly as training lays out a clip, and appends each generated code at the mel-table
position training gave it (code k at k + 1). With the KV cache the prompt runs once and every step
feeds one position; without it every step runs the whole sample through the training forward's own
embedding (`sequence_embeddings`): both give the same positions, the same logits (up to float
rounding) and the same codes.

`decode_steps` yields each code with its latent as it is generated (a stream vocodes them in
chunks); `decode` collects them. Temperature 0 is greedy: the argmax of the code logits, no penalty, no filtering. Above 0 the
published sampling of `IndexTTS2.infer` applies, in the order transformers applies it: repetition
penalty (default 10) on the codes generated so far, temperature, top-k (30), top-p (0.8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generator, Sequence

import torch
from torch import nn

from core.errors import InputError
from core.families.indextts.gpt import STOP_MEL
from core.families.indextts.layout import (
    collate_layouts,
    layout_sample,
    sequence_embeddings,
    speech_step_embedding,
)

TOP_K, TOP_P, REPETITION_PENALTY = 30, 0.8, 10.0


@dataclass(frozen=True)
class Sampling:
    """How `decode` picks each code: greedy at temperature 0, else the published sampling."""

    temperature: float = 0.0
    top_k: int = TOP_K
    top_p: float = TOP_P
    repetition_penalty: float = REPETITION_PENALTY

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 1 or not 0 < self.top_p <= 1 or self.repetition_penalty <= 0:
            raise InputError(
                f"IndexTTS2 sampling: temperature {self.temperature} (≥ 0), top_k {self.top_k} (≥ 1), top_p {self.top_p} "
                f"(0 < p ≤ 1) and repetition_penalty {self.repetition_penalty} (> 0) are required."
            )


@dataclass(frozen=True)
class Decoded:
    """What `decode` returns: the codes (stop excluded), whether stop was generated, and the GPT latents
    [1, len(codes), D] s2mel reads (the normed hidden states of start, code 0 … code n-2, as the
    published `UnifiedVoice.forward` returns them)."""

    codes: list[int]
    stopped: bool
    latents: torch.Tensor


def _pick(logits: torch.Tensor, codes: list[int], sampling: Sampling, generator: torch.Generator | None) -> int:
    """Return the next code from the code logits [V] (see the module docstring)."""
    if sampling.temperature == 0:
        return int(logits.argmax())
    logits = logits.float().clone()
    if codes and sampling.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(codes)), device=logits.device)
        score = logits[seen]
        logits[seen] = torch.where(score < 0, score * sampling.repetition_penalty, score / sampling.repetition_penalty)
    logits = logits / sampling.temperature
    kth = torch.topk(logits, min(sampling.top_k, logits.numel())).values[-1]
    logits = logits.masked_fill(logits < kth, float("-inf"))
    ordered, order = torch.sort(logits, descending=False)
    cumulative = ordered.softmax(-1).cumsum(-1)
    drop = cumulative <= 1 - sampling.top_p
    drop[-1] = False
    logits[order[drop]] = float("-inf")
    probs = logits.softmax(-1)
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


def _layout_batch(model: nn.Module, condition: torch.Tensor, emo_vec: torch.Tensor, text_ids: Sequence[int],
                  codes: Sequence[int]) -> dict[str, torch.Tensor]:
    batch = collate_layouts([layout_sample(text_ids, codes)], condition.cpu(), emo_vec.cpu())
    device = next(model.parameters()).device
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


@torch.no_grad()
def decode_steps(
    model: nn.Module, condition: torch.Tensor, emo_vec: torch.Tensor, text_ids: Sequence[int], max_codes: int,
    sampling: Sampling = Sampling(), kv_cache: bool = True, generator: torch.Generator | None = None,
) -> Generator[tuple[int, torch.Tensor], None, bool]:
    """Yield (code, its GPT latent [1, D]) for up to `max_codes` semantic codes of `text_ids` after the
    conditioning of one prompt, one by one as they are generated; return True when stop was generated.

    `condition` [1, 32, D] are the prompt's speaker latents, `emo_vec` [1, D] its emotion vector
    (what the feature cache stores for a prompt). `generator` draws the samples above temperature 0.
    A code's latent is the normed hidden state that predicted it (start's for code 0, code k−1's for
    code k), what s2mel reads. Raises InputError when `max_codes` < 1 or there are no text ids.
    """
    if max_codes < 1:
        raise InputError(f"IndexTTS2 decoding needs max_codes ≥ 1, got {max_codes}.")
    if len(text_ids) == 0:
        raise InputError("IndexTTS2 decoding needs at least one text id.")
    was_training = model.training
    model.eval()
    codes: list[int] = []
    cache = None
    try:
        if kv_cache:
            from transformers import DynamicCache

            cache = DynamicCache(config=model.gpt.config)
            step_input = sequence_embeddings(model, _layout_batch(model, condition, emo_vec, text_ids, codes))
        while True:
            if kv_cache:
                hidden = model.gpt(inputs_embeds=step_input, cache=cache, use_cache=True, return_dict=True).last_hidden_state
            else:
                embeddings = sequence_embeddings(model, _layout_batch(model, condition, emo_vec, text_ids, codes))
                hidden = model.gpt(inputs_embeds=embeddings, use_cache=False, return_dict=True).last_hidden_state
            state = model.final_norm(hidden[:, -1])
            code = _pick(model.mel_head(state)[0], codes, sampling, generator)
            if code == STOP_MEL:
                return True
            codes.append(code)
            yield code, state
            if len(codes) == max_codes:
                return False
            if kv_cache:
                step_input = speech_step_embedding(model, torch.tensor([code], device=state.device), len(codes))
    finally:
        model.train(was_training)


def decode(
    model: nn.Module, condition: torch.Tensor, emo_vec: torch.Tensor, text_ids: Sequence[int], max_codes: int,
    sampling: Sampling = Sampling(), kv_cache: bool = True, generator: torch.Generator | None = None,
) -> Decoded:
    """Return up to `max_codes` semantic codes for `text_ids` (`decode_steps` collected), whether stop was
    generated, and their GPT latents. Raises InputError when `max_codes` < 1 or there are no text ids."""
    steps = decode_steps(model, condition, emo_vec, text_ids, max_codes, sampling, kv_cache, generator)
    codes: list[int] = []
    states: list[torch.Tensor] = []
    while True:
        try:
            code, state = next(steps)
        except StopIteration as end:
            stopped = bool(end.value)
            break
        codes.append(code)
        states.append(state)
    latents = torch.stack(states, dim=1) if codes else torch.zeros(1, 0, model.model_dim, device=condition.device)
    return Decoded(codes, stopped, latents)
