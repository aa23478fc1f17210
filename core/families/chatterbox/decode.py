"""LinguaForge's T3 decoder: the training layout at every temperature, with or without a KV cache.

`decode_steps` yields the tokens one by one as they are generated (a stream vocodes them in
chunks); `decode_speech` collects them. The prefix is `chatterbox.layout.sample_embeds(cond,
wrapped text, [start-of-speech])`; generated token k is embedded at speech position k + 1, exactly where training put it. With a KV cache
the prefix runs once and each step feeds one token; without one every step re-lays the whole
sample out — both give the same tokens (a test holds them equal).

Classifier-free guidance is the published one: a second row whose text token embeddings are
zero (positions kept), logits `cond + w · (cond − uncond)`. Temperature 0 is plain argmax of the
guided logits (no repetition penalty, no top-p/min-p); above 0 the published sampler runs:
repetition penalty over the tokens so far (start token included), temperature, min-p, top-p,
then a draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generator

import torch

from core.families.chatterbox.layout import START_SPEECH, STOP_SPEECH, sample_embeds, speech_embed, wrap_speech


@dataclass(frozen=True)
class T3Sampling:
    """What both T3 families' samplers take (their published `generate` defaults; temperature 0 = argmax)."""

    temperature: float = 0.8
    repetition_penalty: float = 1.2
    top_p: float = 0.95


@dataclass(frozen=True)
class Sampling(T3Sampling):
    """How T3 picks each speech token: `T3Sampling` with classifier-free guidance and min-p (the published
    `generate` defaults)."""

    cfg_weight: float = 0.5
    min_p: float = 0.05


@dataclass(frozen=True)
class Decoded:
    """Speech tokens generated after the start-of-speech token (stop excluded) and whether T3 stopped by itself."""

    tokens: list[int]
    stopped: bool


def _picker(sampling: Sampling) -> Callable[[torch.Tensor, torch.Tensor], int]:
    """Return how the next token is chosen from guided logits [1, V] and the tokens so far: argmax at
    temperature 0, else the published sampler (its logits processors built once per decode)."""
    if sampling.temperature <= 0:
        return lambda logits, so_far: int(logits.argmax(-1))
    from transformers.generation.logits_process import (MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                                                         TopPLogitsWarper)

    penalty = RepetitionPenaltyLogitsProcessor(penalty=float(sampling.repetition_penalty))
    min_p, top_p = MinPLogitsWarper(min_p=sampling.min_p), TopPLogitsWarper(top_p=sampling.top_p)

    def sample(logits: torch.Tensor, so_far: torch.Tensor) -> int:
        logits = penalty(so_far, logits) / sampling.temperature
        logits = top_p(so_far, min_p(so_far, logits))
        return int(torch.multinomial(torch.softmax(logits, dim=-1), num_samples=1))

    return sample


def _guided(logits: torch.Tensor, cfg_weight: float) -> torch.Tensor:
    """Return [1, V]: row 0 alone, or `cond + w · (cond − uncond)` when the batch holds the unconditional row."""
    cond = logits[0:1]
    return cond if logits.size(0) == 1 else cond + cfg_weight * (cond - logits[1:2])


@torch.inference_mode()
def decode_steps(t3: Any, cond: torch.Tensor, text: torch.Tensor, max_new_tokens: int,
                 sampling: Sampling = Sampling(), use_cache: bool = True,
                 static_cache: bool | None = None) -> Generator[int, None, bool]:
    """Yield the speech tokens T3 generates for one wrapped text (`chatterbox.layout.wrap_text`) after
    conditioning `cond` [len_cond, D] (`chatterbox.layout.t3_cond_embeds`), one by one, at most
    `max_new_tokens`; return True when T3 generated its stop token (False: the cap ended it).

    With `use_cache` on CUDA (or `static_cache=True`) the cache is transformers' `StaticCache`, sized for the prefix
    and `max_new_tokens`: fixed shapes at every step (what CUDA graphs need); the tokens equal the growing cache's
    (tests/test_fast_decoder.py). Sampling draws from torch's global generator (seed it for repeatable output).
    """
    device = cond.device
    text = text.reshape(-1).to(device)
    guided = sampling.cfg_weight > 0
    so_far = torch.tensor([[START_SPEECH]], device=device)
    pick = _picker(sampling)

    def rows(speech: torch.Tensor) -> torch.Tensor:
        laid = [sample_embeds(t3, cond, text, speech)]
        if guided:
            laid.append(sample_embeds(t3, cond, text, speech, drop_text=True))
        return torch.stack(laid)

    prefix = rows(wrap_speech([], finished=False).to(device))
    cache = None
    if use_cache and (device.type == "cuda" if static_cache is None else static_cache):
        from transformers import StaticCache

        cache = StaticCache(config=t3.tfmr.config, max_cache_len=prefix.size(1) + max_new_tokens)
    out = t3.tfmr(inputs_embeds=prefix, past_key_values=cache, use_cache=use_cache, return_dict=True)
    for step in range(max_new_tokens):
        logits = _guided(t3.speech_head(out.last_hidden_state[:, -1]), sampling.cfg_weight)
        token = pick(logits, so_far)
        if token == STOP_SPEECH:
            return True
        yield token
        so_far = torch.cat([so_far, so_far.new_tensor([[token]])], dim=1)
        if step + 1 == max_new_tokens:
            break
        if use_cache:
            fed = speech_embed(t3, so_far.new_tensor([token]), start=step + 1)[None]
            out = t3.tfmr(inputs_embeds=fed.expand(2 if guided else 1, -1, -1), past_key_values=out.past_key_values,
                          use_cache=True, return_dict=True)
        else:
            out = t3.tfmr(inputs_embeds=rows(so_far[0]), use_cache=False, return_dict=True)
    return False


def decode_speech(t3: Any, cond: torch.Tensor, text: torch.Tensor, max_new_tokens: int,
                  sampling: Sampling = Sampling(), use_cache: bool = True, static_cache: bool | None = None) -> Decoded:
    """Return every speech token `decode_steps` generates for one wrapped text, and whether T3 stopped by itself."""
    return collect(decode_steps(t3, cond, text, max_new_tokens, sampling, use_cache, static_cache))


def collect(steps: Generator[int, None, bool]) -> Decoded:
    """Return the tokens a decoder's steps yield and what they return at the end (whether T3 stopped by itself)."""
    tokens: list[int] = []
    while True:
        try:
            tokens.append(next(steps))
        except StopIteration as end:
            return Decoded(tokens, bool(end.value))
