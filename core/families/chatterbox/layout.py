"""Chatterbox T3's sequence layout: ONE place that says where conditioning, text and speech sit.

One sample is `[cond | 255 text… 0 | 6561 speech… (6562)]`: the conditioning embeddings (speaker,
the perceiver's summary of the sample's own prompt, emotion), the wrapped text with text
positions 0…n_t−1, then the speech with speech positions 0…n_s−1 — exactly what the published
`T3.inference` builds when it is given no `initial_speech_tokens` (its start-of-speech token is
the one it appends itself). Training lays out every sample of a batch with `sample_embeds` and
right-pads the whole sequence after the sample's own last token, with an attention mask; nothing
sits between a sample's text and its speech, and each prompt is used whole (cut at
`speech_cond_prompt_len`, as inference cuts it). The decoders in `chatterbox.decode` lay out the
prefix with the same function and place generated token k at speech position k + 1 (0 is the
start token), with and without a KV cache.

Versions: 1 = the published training layout (text padded between text and speech, no mask,
prompts cut to the batch's shortest); 2 = this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

LAYOUT = {"family": "chatterbox", "version": 2}
START_TEXT, STOP_TEXT = 255, 0
START_SPEECH, STOP_SPEECH = 6561, 6562
EMOTION_ADV = 0.5
PROMPT_TOKENS = 150
IGNORE = -100


def wrap_text(ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Return the 1-D ids wrapped in T3's start (255) and stop (0) text tokens."""
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
    return torch.cat([ids.new_tensor([START_TEXT]), ids, ids.new_tensor([STOP_TEXT])])


def wrap_speech(codes: Sequence[int] | torch.Tensor, finished: bool = True) -> torch.Tensor:
    """Return the 1-D speech codes after the start-of-speech token (6561), with the stop token (6562) when `finished`."""
    codes = torch.as_tensor(codes, dtype=torch.long).reshape(-1)
    tail = [STOP_SPEECH] if finished else []
    return torch.cat([codes.new_tensor([START_SPEECH]), codes, codes.new_tensor(tail)])


def cut_prompt(prompt: torch.Tensor, length: int = PROMPT_TOKENS) -> torch.Tensor:
    """Return the prompt tokens as inference uses them: at most `length` (T3's `speech_cond_prompt_len`)."""
    return prompt.reshape(-1)[:length].long()


def condition_rows(t3: Any, speaker_emb: torch.Tensor, prompts: Sequence[torch.Tensor],
                   emotion_adv: torch.Tensor | float = EMOTION_ADV) -> list[torch.Tensor]:
    """Return each sample's conditioning [len_cond_i, D] from its speaker embedding and its whole prompt.

    Samples whose prompts have the same length go through the published `prepare_conditioning`
    together; no prompt is padded or cut to another's length. (Chatterbox-Turbo has no perceiver:
    its conditioning is as long as the prompt plus one, so lengths differ between samples.)
    """
    from chatterbox.models.t3.modules.cond_enc import T3Cond

    size = speaker_emb.size(0)
    emotion = torch.as_tensor(emotion_adv, dtype=speaker_emb.dtype, device=speaker_emb.device).reshape(-1, 1, 1)
    emotion = emotion.expand(size, 1, 1)
    out: list[torch.Tensor | None] = [None] * size
    by_length: dict[int, list[int]] = {}
    for i, prompt in enumerate(prompts):
        by_length.setdefault(int(prompt.numel()), []).append(i)
    for length, rows in by_length.items():
        index = torch.tensor(rows, device=speaker_emb.device)
        tokens = torch.stack([prompts[i].reshape(-1) for i in rows]).to(speaker_emb.device) if length else None
        cond = T3Cond(speaker_emb=speaker_emb[index], cond_prompt_speech_tokens=tokens, emotion_adv=emotion[index])
        for row, embeds in zip(rows, t3.prepare_conditioning(cond)):
            out[row] = embeds
    return out  # type: ignore[return-value]


def condition_embeds(t3: Any, speaker_emb: torch.Tensor, prompts: Sequence[torch.Tensor],
                     emotion_adv: torch.Tensor | float = EMOTION_ADV) -> torch.Tensor:
    """Return [B, len_cond, D]: `condition_rows` stacked (the multilingual T3's perceiver makes every
    conditioning the same length)."""
    return torch.stack(condition_rows(t3, speaker_emb, prompts, emotion_adv))


def t3_cond_embeds(t3: Any, cond: Any) -> torch.Tensor:
    """Return [len_cond, D] for a published `T3Cond` of one voice (from `prepare_conditionals` or `conds.pt`).

    The T3Cond is not changed (the published `prepare_conditioning` caches the prompt's embedding
    on it, which would tie it to the first model that saw it).
    """
    prompt = cond.cond_prompt_speech_tokens
    prompts = [cut_prompt(prompt[0], t3.hp.speech_cond_prompt_len)] if prompt is not None else [torch.zeros(0, dtype=torch.long)]
    emotion = cond.emotion_adv if cond.emotion_adv is not None else EMOTION_ADV
    speaker = cond.speaker_emb.reshape(1, -1).to(t3.device)
    return condition_rows(t3, speaker, prompts, torch.as_tensor(emotion).reshape(-1)[:1].to(t3.device))[0]


def speech_embed(t3: Any, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
    """Return [n, D]: speech tokens embedded at speech positions start…start+n−1."""
    positions = torch.arange(start, start + tokens.numel(), device=tokens.device)
    return t3.speech_emb(tokens.reshape(1, -1))[0] + t3.speech_pos_emb.emb(positions)


def sample_embeds(t3: Any, cond: torch.Tensor, text: torch.Tensor, speech: torch.Tensor, drop_text: bool = False) -> torch.Tensor:
    """Return [len_cond + n_t + n_s, D]: one sample laid out as cond | wrapped text | speech.

    `drop_text` zeroes the text token embeddings (keeping their positions): the unconditional row
    of classifier-free guidance, as the published `prepare_input_embeds` makes it.
    """
    text_emb = t3.text_emb(text.reshape(1, -1))[0]
    if drop_text:
        text_emb = torch.zeros_like(text_emb)
    positions = torch.arange(text.numel(), device=text.device)
    text_emb = text_emb + t3.text_pos_emb.emb(positions)
    return torch.cat([cond, text_emb, speech_embed(t3, speech)])


@dataclass(frozen=True)
class BatchLayout:
    """A laid-out batch: embeddings [B, L, D], attention mask [B, L], and per sample where its text and speech start."""

    embeds: torch.Tensor
    mask: torch.Tensor
    text_start: torch.Tensor
    speech_start: torch.Tensor


def padded_batch(samples: list[dict[str, torch.Tensor]], texts: list[torch.Tensor], prompt_tokens: int,
                 unscored_text: int) -> dict[str, torch.Tensor]:
    """Return the batch of both T3 layouts: the samples' text ids as the layout lays them out (`texts`), their speech
    after the start token with the stop token, and their whole prompts (cut at `prompt_tokens` as inference cuts
    them), each right-padded with its lengths, the speaker embeddings, and `n_tokens` (the scored targets: each
    text but its first `unscored_text` ids, each speech but its start token)."""
    speech = [wrap_speech(s["codes"]) for s in samples]
    prompts = [cut_prompt(s["prompt"], prompt_tokens) for s in samples]
    return {
        "text_ids": pad_sequence(texts, batch_first=True, padding_value=STOP_TEXT),
        "text_lengths": torch.tensor([len(t) for t in texts]),
        "codes": pad_sequence(speech, batch_first=True, padding_value=STOP_SPEECH),
        "code_lengths": torch.tensor([len(s) for s in speech]),
        "prompt": pad_sequence(prompts, batch_first=True, padding_value=0),
        "prompt_lengths": torch.tensor([len(p) for p in prompts]),
        "speaker_emb": torch.stack([torch.as_tensor(s["speaker_emb"]) for s in samples]).float(),
        "n_tokens": sum(len(t) - unscored_text for t in texts) + sum(len(s) - 1 for s in speech),
    }


def collate(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Return the batch of samples {text_ids, codes, prompt, speaker_emb} (`padded_batch`): wrapped text and
    speech and the whole prompts (cut as inference cuts them); `n_tokens` counts text and speech minus one each."""
    return padded_batch(samples, [wrap_text(s["text_ids"]) for s in samples], PROMPT_TOKENS, unscored_text=1)


def lay_out_rows(t3: Any, batch: dict[str, torch.Tensor], embed: Callable[..., torch.Tensor]) -> BatchLayout:
    """Return the collated batch of either T3 layout laid out sample by sample with its `embed` (`sample_embeds`:
    t3, conditioning, text, speech), right-padded with zeros, each sample's conditioning from its own whole prompt
    (`condition_rows`); `text_start` is each conditioning's length (one length for all under the perceiver)."""
    prompts = [p[: int(n)] for p, n in zip(batch["prompt"], batch["prompt_lengths"])]
    conds = condition_rows(t3, batch["speaker_emb"].to(t3.device), prompts)
    rows = [embed(t3, c, text[: int(nt)], speech[: int(ns)])
            for c, text, nt, speech, ns in zip(conds, batch["text_ids"], batch["text_lengths"], batch["codes"], batch["code_lengths"])]
    device = conds[0].device
    lengths = torch.tensor([r.size(0) for r in rows], device=device)
    embeds = pad_sequence(rows, batch_first=True)
    mask = (torch.arange(embeds.size(1), device=device)[None] < lengths[:, None]).long()
    text_start = torch.tensor([c.size(0) for c in conds], device=device)
    return BatchLayout(embeds, mask, text_start, text_start + batch["text_lengths"].to(device))


def lay_out_batch(t3: Any, batch: dict[str, torch.Tensor]) -> BatchLayout:
    """Return the collated batch laid out sample by sample with `sample_embeds` (`lay_out_rows`)."""
    return lay_out_rows(t3, batch, sample_embeds)


def next_token_targets(ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Return ids[:, 1:] with IGNORE past each row's length (position j predicts token j+1)."""
    targets = ids[:, 1:]
    positions = torch.arange(targets.size(1), device=ids.device)[None]
    return targets.masked_fill(positions >= (lengths.to(ids.device)[:, None] - 1), IGNORE)


def gather_positions(hidden: torch.Tensor, start: torch.Tensor, count: int) -> torch.Tensor:
    """Return hidden[i, start[i] + j] for j < count as [B, count, D] (positions past the end are clamped)."""
    index = (start[:, None] + torch.arange(count, device=hidden.device)[None]).clamp(max=hidden.size(1) - 1)
    return hidden.gather(1, index[..., None].expand(-1, -1, hidden.size(-1)))
