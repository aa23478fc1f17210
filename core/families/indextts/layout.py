"""The IndexTTS2 sequence layout: ONE function lays out a sample for training and for every decoder.

One sample, as the published `UnifiedVoice.inference_speech` lays it out for one unpadded text:

    position  0 .. 33          conditioning: 32 speaker latents (+ the emotion vector), then the
                               two duration embeddings (`speed_emb` 1, then 0)
              34 .. 34+n+1     text: start 0, the n text ids, stop 1       (text table 0 .. n+1)
              34+n+2 ..        speech: start 8192, code 0, code 1, …       (mel table 0 .. m)

Code k sits at mel-table position k + 1 and predicts code k + 1 (the last code predicts stop
8193); the start token predicts code 0; each text position predicts the next text id and the last
id predicts stop 1 (`build_aligned_inputs_and_targets`' targets). GPT-2's own position table is
null in UnifiedVoice, so these learned text/mel tables are the only positions.

A batch puts every sample's tokens in this order and pads only after the sample's own last speech
token. With causal attention no real position can see that padding, so the backbone needs no
padding mask, and nothing sits between a sample's text and its speech (the published training
forward pads each text with stop tokens to the batch's longest text, *before* the speech, which
inference never does). The conditioning is always 34 positions (32 perceiver latents), so no
prompt is ever cut to fit a batch.

`SEQUENCE_LAYOUT` ({family: indextts, version: 2}, in `core.families.indextts.family`) names this layout in
checkpoint metadata and in the export's notes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from core.families.indextts.gpt import START_MEL, START_TEXT, STOP_MEL, STOP_TEXT

CONDITIONING_POSITIONS = 34
IGNORE = -100


@dataclass(frozen=True)
class SampleLayout:
    """One sample's text and speech tokens in sequence order, with what each position predicts.

    `text` = [start, ids…, stop] (n + 2), `speech` = [start_mel, codes…] (m + 1); `text_targets`
    = [ids…, stop, IGNORE] and `speech_targets` = [codes…, stop_mel], position by position.
    """

    text: np.ndarray
    speech: np.ndarray
    text_targets: np.ndarray
    speech_targets: np.ndarray

    @property
    def length(self) -> int:
        """Return the positions after the conditioning (text + speech)."""
        return len(self.text) + len(self.speech)


def layout_sample(text_ids: Sequence[int], codes: Sequence[int] = ()) -> SampleLayout:
    """Return the layout of one sample: its text ids and the semantic codes so far (none to start decoding).

    Training lays out a clip's whole code sequence; a decoder lays out the codes it has generated.
    """
    ids = np.asarray(text_ids, dtype=np.int64).reshape(-1)
    codes = np.asarray(codes, dtype=np.int64).reshape(-1)
    return SampleLayout(
        text=np.concatenate([[START_TEXT], ids, [STOP_TEXT]]),
        speech=np.concatenate([[START_MEL], codes]),
        text_targets=np.concatenate([ids, [STOP_TEXT, IGNORE]]),
        speech_targets=np.concatenate([codes, [STOP_MEL]]),
    )


def collate_layouts(layouts: list[SampleLayout], condition: torch.Tensor, emo_vec: torch.Tensor) -> dict[str, Any]:
    """Return the padded batch of laid-out samples.

    Keys: `text` / `text_targets` [B, Lt] and `speech` / `speech_targets` [B, Lm] (right-padded;
    padding targets IGNORE), `text_lengths` / `speech_lengths` [B], `order` [B, S] (for each
    position after the conditioning, its index into [text | speech] of the same sample; S is the
    longest sample), `real` [B, S] (1 at a sample's own positions, 0 at its padding),
    `condition` [B, 32, D], `emo_vec` [B, D] and `n_tokens` (the scored targets, an int).
    """
    size = len(layouts)
    text_lengths = [len(s.text) for s in layouts]
    speech_lengths = [len(s.speech) for s in layouts]
    lt, lm = max(text_lengths), max(speech_lengths)
    span = max(t + m for t, m in zip(text_lengths, speech_lengths))
    text = np.full((size, lt), STOP_TEXT, dtype=np.int64)
    text_targets = np.full((size, lt), IGNORE, dtype=np.int64)
    speech = np.full((size, lm), STOP_MEL, dtype=np.int64)
    speech_targets = np.full((size, lm), IGNORE, dtype=np.int64)
    order = np.zeros((size, span), dtype=np.int64)
    real = np.zeros((size, span), dtype=np.float32)
    for row, (sample, t, m) in enumerate(zip(layouts, text_lengths, speech_lengths)):
        text[row, :t], text_targets[row, :t] = sample.text, sample.text_targets
        speech[row, :m], speech_targets[row, :m] = sample.speech, sample.speech_targets
        order[row, :t] = np.arange(t)
        order[row, t : t + m] = lt + np.arange(m)
        real[row, : t + m] = 1.0
    scored = int((text_targets != IGNORE).sum() + (speech_targets != IGNORE).sum())
    return {
        "text": torch.from_numpy(text), "text_targets": torch.from_numpy(text_targets),
        "speech": torch.from_numpy(speech), "speech_targets": torch.from_numpy(speech_targets),
        "text_lengths": torch.tensor(text_lengths), "speech_lengths": torch.tensor(speech_lengths),
        "order": torch.from_numpy(order), "real": torch.from_numpy(real),
        "condition": condition.float(), "emo_vec": emo_vec.float(), "n_tokens": scored,
    }


def conditioning_prefix(model: nn.Module, condition: torch.Tensor, emo_vec: torch.Tensor) -> torch.Tensor:
    """Return the 34 conditioning positions [B, 34, D]: latents + emotion vector, then `speed_emb` 1 and 0
    (as `UnifiedVoice.inference_speech` and its training forward build them)."""
    zeros = torch.zeros(condition.shape[0], dtype=torch.long, device=condition.device)
    duration = model.speed_emb(zeros)
    duration_half = model.speed_emb(torch.ones_like(zeros))
    return torch.cat([condition + emo_vec.unsqueeze(1), duration_half.unsqueeze(1), duration.unsqueeze(1)], dim=1)


def sequence_embeddings(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Return the input embeddings [B, 34 + S, D] of a `collate_layouts` batch.

    Text tokens get `text_embedding` + the text table at their position in the text, speech tokens
    `mel_embedding` + the mel table at theirs; each sample's speech follows its own text; padding
    positions are zero.
    """
    text, speech = batch["text"], batch["speech"]
    text_emb = model.text_embedding(text) + model.text_pos_embedding(text)
    speech_emb = model.mel_embedding(speech) + model.mel_pos_embedding(speech)
    joined = torch.cat([text_emb, speech_emb], dim=1)
    order = batch["order"].unsqueeze(-1).expand(-1, -1, joined.shape[-1])
    body = joined.gather(1, order) * batch["real"].unsqueeze(-1).to(joined.dtype)
    conds = conditioning_prefix(model, batch["condition"], batch["emo_vec"]).to(body.dtype)
    return torch.cat([conds, body], dim=1)


def speech_step_embedding(model: nn.Module, code: torch.Tensor, index: int) -> torch.Tensor:
    """Return the embedding [B, 1, D] of speech token `code` [B] at speech index `index` (start = 0, code k = k + 1),
    the same sum `sequence_embeddings` gives that position."""
    position = torch.tensor([index], device=code.device)
    return (model.mel_embedding(code) + model.mel_pos_embedding.emb(position)).unsqueeze(1)


def layout_hidden(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (text hidden [B, Lt, D], speech hidden [B, Lm, D]) after `final_norm`, position by position
    of `batch["text"]` / `batch["speech"]` (padding positions hold a neighbour's state; their targets are IGNORE)."""
    embeddings = sequence_embeddings(model, batch)
    hidden = model.gpt(inputs_embeds=embeddings, use_cache=False, return_dict=True).last_hidden_state
    enc = model.final_norm(hidden[:, CONDITIONING_POSITIONS:])
    lt, lm = batch["text"].shape[1], batch["speech"].shape[1]
    start = batch["text_lengths"].unsqueeze(1)
    index = (start + torch.arange(lm, device=start.device).unsqueeze(0)).clamp(max=enc.shape[1] - 1)
    speech = enc.gather(1, index.unsqueeze(-1).expand(-1, -1, enc.shape[-1]))
    return enc[:, :lt], speech
