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
from torch.nn.utils.rnn import pad_sequence

from core.families.chatterbox.layout import (
    IGNORE, STOP_SPEECH, BatchLayout, condition_rows, cut_prompt, wrap_speech,
)

LAYOUT = {"family": "chatterbox-turbo", "version": 1}
PROMPT_TOKENS = 375


def sample_embeds(t3: Any, cond: torch.Tensor, text: torch.Tensor, speech: torch.Tensor) -> torch.Tensor:
    """Return [len_cond + n_t + n_s, D]: one sample laid out as conditioning | text | speech (GPT-2 adds positions)."""
    text_emb = t3.text_emb(text.reshape(1, -1).to(cond.device))[0]
    speech_emb = t3.speech_emb(speech.reshape(1, -1).to(cond.device))[0]
    return torch.cat([cond, text_emb, speech_emb])


def collate(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Return the batch of samples {text_ids, codes, prompt, speaker_emb}: the text ids, the speech after its
    start token with the stop token, and the whole prompts (cut at 375 as inference cuts them), each
    right-padded with its lengths, speaker embeddings, and `n_tokens` (the scored targets)."""
    texts = [torch.as_tensor(s["text_ids"], dtype=torch.long).reshape(-1) for s in samples]
    speech = [wrap_speech(s["codes"]) for s in samples]
    prompts = [cut_prompt(s["prompt"], PROMPT_TOKENS) for s in samples]
    return {
        "text_ids": pad_sequence(texts, batch_first=True, padding_value=0),
        "text_lengths": torch.tensor([len(t) for t in texts]),
        "codes": pad_sequence(speech, batch_first=True, padding_value=STOP_SPEECH),
        "code_lengths": torch.tensor([len(s) for s in speech]),
        "prompt": pad_sequence(prompts, batch_first=True, padding_value=0),
        "prompt_lengths": torch.tensor([len(p) for p in prompts]),
        "speaker_emb": torch.stack([torch.as_tensor(s["speaker_emb"]) for s in samples]).float(),
        "n_tokens": sum(len(t) for t in texts) + sum(len(s) - 1 for s in speech),
    }


def lay_out_batch(t3: Any, batch: dict[str, torch.Tensor]) -> BatchLayout:
    """Return the collated batch laid out sample by sample with `sample_embeds`, right-padded with zeros;
    `text_start` / `speech_start` differ per sample (each conditioning is as long as its prompt plus one)."""
    prompts = [p[: int(n)] for p, n in zip(batch["prompt"], batch["prompt_lengths"])]
    conds = condition_rows(t3, batch["speaker_emb"].to(t3.device), prompts)
    rows = [sample_embeds(t3, c, text[: int(nt)], speech[: int(ns)])
            for c, text, nt, speech, ns in zip(conds, batch["text_ids"], batch["text_lengths"], batch["codes"], batch["code_lengths"])]
    device = conds[0].device
    lengths = torch.tensor([r.size(0) for r in rows], device=device)
    embeds = pad_sequence(rows, batch_first=True)
    mask = (torch.arange(embeds.size(1), device=device)[None] < lengths[:, None]).long()
    text_start = torch.tensor([c.size(0) for c in conds], device=device)
    return BatchLayout(embeds, mask, text_start, text_start + batch["text_lengths"].to(device))


def text_targets(ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Return the text ids with IGNORE past each row's length (position text_start − 1 + j predicts id j)."""
    positions = torch.arange(ids.size(1), device=ids.device)[None]
    return ids.masked_fill(positions >= lengths.to(ids.device)[:, None], IGNORE)
