"""Chatterbox-Turbo's sequence layout: ONE place that says where conditioning, text and speech sit.

One sample is `[speaker | prompt speech… | text… | 6561 speech… (6562)]`, read from the published
`T3.prepare_input_embeds` and `T3.inference_turbo`: the conditioning is the speaker embedding's
projection and the prompt's speech embeddings (no perceiver, no emotion; the prompt cut at 375
tokens as `prepare_conditionals` cuts it), the text ids as `ChatterboxTurboTTS.generate` feeds them
(no start/stop text tokens), one start-of-speech token, then the speech. Positions are GPT-2's own
(`tfmr.wpe`): 0… over the whole sample, so generated token k sits where training put it with and
without a KV cache. Training lays out every sample with `sample_embeds` and right-pads after the
sample's own last token, with an attention mask; nothing sits between a sample's text and its speech.

Scoring: the text head predicts each text id from the position before it (the first from the
prompt's last position); the speech head predicts each speech token and the stop token.
"""

from __future__ import annotations

from typing import Any

import torch
from core.families.chatterbox.layout import IGNORE, BatchLayout, lay_out_rows, padded_batch

LAYOUT = {"family": "chatterbox-turbo", "version": 1}
PROMPT_TOKENS = 375


def sample_embeds(t3: Any, cond: torch.Tensor, text: torch.Tensor, speech: torch.Tensor) -> torch.Tensor:
    """Return [len_cond + n_t + n_s, D]: one sample laid out as conditioning | text | speech (GPT-2 adds positions)."""
    text_emb = t3.text_emb(text.reshape(1, -1).to(cond.device))[0]
    speech_emb = t3.speech_emb(speech.reshape(1, -1).to(cond.device))[0]
    return torch.cat([cond, text_emb, speech_emb])


def collate(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Return the batch of samples {text_ids, codes, prompt, speaker_emb} (`chatterbox.layout.padded_batch`): the
    text ids as they are, the speech after its start token with the stop token, and the whole prompts (cut at 375
    as inference cuts them); `n_tokens` counts every text id and the speech minus its start token."""
    texts = [torch.as_tensor(s["text_ids"], dtype=torch.long).reshape(-1) for s in samples]
    return padded_batch(samples, texts, PROMPT_TOKENS, unscored_text=0)


def lay_out_batch(t3: Any, batch: dict[str, torch.Tensor]) -> BatchLayout:
    """Return the collated batch laid out sample by sample with `sample_embeds` (`chatterbox.layout.lay_out_rows`);
    `text_start` / `speech_start` differ per sample (each conditioning is as long as its prompt plus one)."""
    return lay_out_rows(t3, batch, sample_embeds)


def text_targets(ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Return the text ids with IGNORE past each row's length (position text_start − 1 + j predicts id j)."""
    positions = torch.arange(ids.size(1), device=ids.device)[None]
    return ids.masked_fill(positions >= lengths.to(ids.device)[:, None], IGNORE)
