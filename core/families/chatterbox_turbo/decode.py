"""LinguaForge's Turbo T3 decoder: the training layout at every temperature, with or without a KV cache.

`decode_steps` yields the tokens one by one as they are generated (a stream vocodes them in
chunks); `decode_speech` collects them. The prefix is `chatterbox_turbo.layout.sample_embeds(cond,
text, [start-of-speech])`; GPT-2 places generated token k at the position after the tokens before it,
exactly where training put it. With a KV cache the prefix runs once and each step feeds one token;
without one every step re-lays the whole sample out — both give the same tokens (a test holds them
equal).

Sampling is the published `T3.inference_turbo`'s: temperature, top-k, top-p, then the repetition
penalty over the tokens generated so far (the start token before the first), then a draw; no
classifier-free guidance. Temperature 0 is plain argmax (what `inference_turbo` does with
`top_k=1`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generator

import torch

from core.families.chatterbox.decode import Decoded, T3Sampling, collect
from core.families.chatterbox.layout import START_SPEECH, STOP_SPEECH, wrap_speech
from core.families.chatterbox_turbo.layout import sample_embeds


@dataclass(frozen=True)
class TurboSampling(T3Sampling):
    """How Turbo's T3 picks each speech token: `T3Sampling` with top-k (`ChatterboxTurboTTS.generate`'s defaults;
    temperature 0 = argmax)."""

    top_k: int = 1000


def _picker(sampling: TurboSampling) -> Callable[[torch.Tensor, torch.Tensor], int]:
    """Return how the next token is chosen from logits [1, V] and the ids so far: argmax at temperature 0,
    else the published processors in `inference_turbo`'s order and a draw."""
    if sampling.temperature <= 0:
        return lambda logits, so_far: int(logits.argmax(-1))
    from transformers.generation.logits_process import (LogitsProcessorList, RepetitionPenaltyLogitsProcessor,
                                                         TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

    processors = LogitsProcessorList()
    if sampling.temperature != 1.0:
        processors.append(TemperatureLogitsWarper(float(sampling.temperature)))
    if sampling.top_k > 0:
        processors.append(TopKLogitsWarper(int(sampling.top_k)))
    if sampling.top_p < 1.0:
        processors.append(TopPLogitsWarper(float(sampling.top_p)))
    if sampling.repetition_penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(float(sampling.repetition_penalty)))
    return lambda logits, so_far: int(torch.multinomial(torch.softmax(processors(so_far, logits), dim=-1), 1))


@torch.inference_mode()
def decode_steps(t3: Any, cond: torch.Tensor, text: torch.Tensor, max_new_tokens: int,
                 sampling: TurboSampling = TurboSampling(), use_cache: bool = True) -> Generator[int, None, bool]:
    """Yield the speech tokens T3 generates after conditioning `cond` [len_cond, D]
    (`chatterbox.layout.t3_cond_embeds`) and the text ids `text` (as `chatterbox_turbo.text.text_ids` makes
    them), one by one, at most `max_new_tokens`; return True when T3 generated its stop token (False: the cap
    ended it). Sampling draws from torch's global generator (seed it for repeatable output).
    """
    device = cond.device
    text = text.reshape(-1).to(device)
    pick = _picker(sampling)
    out = t3.tfmr(inputs_embeds=sample_embeds(t3, cond, text, wrap_speech([], finished=False))[None],
                  use_cache=use_cache, return_dict=True)
    tokens: list[int] = []
    for step in range(max_new_tokens):
        so_far = torch.tensor([tokens or [START_SPEECH]], device=device)
        token = pick(t3.speech_head(out.last_hidden_state[:, -1]), so_far)
        if token == STOP_SPEECH:
            return True
        tokens.append(token)
        yield token
        if step + 1 == max_new_tokens:
            break
        if use_cache:
            fed = t3.speech_emb(torch.tensor([[token]], device=device))
            out = t3.tfmr(inputs_embeds=fed, cache=out.past_key_values, use_cache=True, return_dict=True)
        else:
            out = t3.tfmr(inputs_embeds=sample_embeds(t3, cond, text, wrap_speech(tokens, finished=False))[None],
                          use_cache=False, return_dict=True)
    return False


def decode_speech(t3: Any, cond: torch.Tensor, text: torch.Tensor, max_new_tokens: int,
                  sampling: TurboSampling = TurboSampling(), use_cache: bool = True) -> Decoded:
    """Return every speech token `decode_steps` generates, and whether T3 stopped by itself."""
    return collect(decode_steps(t3, cond, text, max_new_tokens, sampling, use_cache))
