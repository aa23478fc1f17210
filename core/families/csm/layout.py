"""CSM's sequence layout: ONE place that says where the segments' text and audio sit, for training and decoding.

A sample is the segments `CsmProcessor` builds from a conversation (its chat template): per segment
`<|begin_of_text|> [0]text <|end_of_text|>`, then — when the segment has audio — one `<|AUDIO|>` position per
Mimi frame and `<|audio_eos|>`. Training lays out two segments: the speaker's prompt clip as the context
segment (never scored) and the target clip; decoding lays out the context segment and the target's text
alone, and the model generates the frames after its `<|end_of_text|>`. The embeddings are those of
`CsmForConditionalGeneration._merge_input_ids_with_input_values`: text positions from `embed_text_tokens`,
each audio position the sum of its frame's codebook embeddings (`backbone_model.embed_tokens`), the audio-eos
position that of a frame of `codebook_eos_token_id`. The backbone's positions run 0… over the sample (Llama's
rotary positions), right padding after the sample's own last position, masked.

Scoring (the published forward with 3-D `labels`, as the processor's `output_labels` expands them): the
backbone's `lm_head` predicts each target frame's first codebook and the audio-eos frame's from the position
before it (`backbone_loss`); the depth decoder predicts codebooks 1… of each of those frames from the
backbone's hidden state and the codebooks before it (`depth_loss`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

from core.errors import InputError
from core.tokenizers.tokenizer import Tokenizer

LAYOUT = {"family": "csm", "version": 1}
IGNORE = -100
SPEAKER = 0  # the speaker id of every segment: one voice, given by the context segment
TOKENS = {"bos": "<|begin_of_text|>", "eos": "<|end_of_text|>", "audio": "<|AUDIO|>", "audio_eos": "<|audio_eos|>"}


@dataclass(frozen=True)
class CsmIds:
    """The ids the layout places: the text specials (the tokenizer's) and the codebook eos code (the config's)."""

    bos: int
    eos: int
    audio: int
    audio_eos: int
    codebook_eos: int
    codebooks: int


def layout_ids(tokenizer: Tokenizer, config: dict[str, Any]) -> CsmIds:
    """Return the CsmIds of `tokenizer` for the CSM `config` (the folder's config.json as a dict).

    Raises InputError when the tokenizer lacks one of CSM's special tokens or places it at another id than
    the config's `bos_token_id` / `audio_token_id` / `audio_eos_token_id`.
    """
    found: dict[str, int] = {}
    for role, content in TOKENS.items():
        ids = tokenizer.encode(content)
        if len(ids) != 1:
            raise InputError(f"{tokenizer.path}: no special token {content} (the CSM {role} token); use the CSM "
                             "folder's tokenizer or one extended from it with `tokenizer merge`.")
        found[role] = ids[0]
    for role, key in (("bos", "bos_token_id"), ("audio", "audio_token_id"), ("audio_eos", "audio_eos_token_id")):
        if config.get(key) is not None and int(config[key]) != found[role]:
            raise InputError(f"{tokenizer.path}: {TOKENS[role]} is id {found[role]} but the CSM config.json says "
                             f"{key} {config[key]}; use the tokenizer of that folder or one extended from it.")
    return CsmIds(found["bos"], found["eos"], found["audio"], found["audio_eos"],
                  int(config.get("codebook_eos_token_id") or 0), int(config.get("num_codebooks", 32)))


def segment_text_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """Return the ids of one segment's text as the chat template writes it, `[0]` then the text, tokenised
    as one string (Llama-3's split joins `]` to the first word): the feature cache and every decoder call this."""
    return tokenizer.encode(f"[{SPEAKER}]{text}")


def lay_out_sample(ids: CsmIds, segments: Sequence[tuple[torch.Tensor, torch.Tensor | None]],
                   scored: Sequence[int] = (-1,), open_last: bool = False) -> dict[str, torch.Tensor]:
    """Return one sample of `segments` (text ids [n], frames [F, codebooks] or None for a text-only last segment):
    `input_ids` [T], `frames` [T, codebooks] (each audio position's frame, the eos frame at audio-eos, zeros
    elsewhere), `audio_mask` [T] (positions embedded from frames) and `labels` [T, codebooks] (the frames and
    the eos frame of the segments `scored`, IGNORE elsewhere; -1 = the last segment: the context is never scored).
    `open_last`: the last segment's frames are those generated so far (no audio-eos after them), as a decoder
    lays them out."""
    scored = {index % len(segments) for index in scored}
    parts: dict[str, list[torch.Tensor]] = {"input_ids": [], "frames": [], "audio_mask": [], "labels": []}
    eos_frame = torch.full((1, ids.codebooks), ids.codebook_eos, dtype=torch.long)
    for index, (text, frames) in enumerate(segments):
        text = torch.as_tensor(text, dtype=torch.long).reshape(-1)
        head = torch.cat([torch.tensor([ids.bos]), text, torch.tensor([ids.eos])])
        blank = torch.zeros((head.numel(), ids.codebooks), dtype=torch.long)
        parts["input_ids"].append(head)
        parts["frames"].append(blank)
        parts["audio_mask"].append(torch.zeros(head.numel(), dtype=torch.bool))
        parts["labels"].append(torch.full_like(blank, IGNORE))
        if frames is None:
            continue
        frames = torch.as_tensor(frames, dtype=torch.long).reshape(-1, ids.codebooks)
        closed = not (open_last and index == len(segments) - 1)
        audio = torch.cat([frames, eos_frame]) if closed else frames
        parts["input_ids"].append(torch.tensor([ids.audio] * len(frames) + [ids.audio_eos] * closed, dtype=torch.long))
        parts["frames"].append(audio)
        parts["audio_mask"].append(torch.ones(len(audio), dtype=torch.bool))
        parts["labels"].append(audio if index in scored else torch.full_like(audio, IGNORE))
    return {name: torch.cat(values) for name, values in parts.items()}


def collate(samples: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
    """Return the batch of laid-out samples right-padded (frames and ids with 0, labels with IGNORE) with the
    attention mask and `n_tokens` (the frames the backbone scores)."""
    lengths = torch.tensor([len(s["input_ids"]) for s in samples])
    batch: dict[str, Any] = {
        name: pad_sequence([s[name] for s in samples], batch_first=True, padding_value=IGNORE if name == "labels" else 0)
        for name in ("input_ids", "frames", "audio_mask", "labels")
    }
    batch["attention_mask"] = (torch.arange(int(lengths.max()))[None] < lengths[:, None]).long()
    batch["n_tokens"] = int((batch["labels"][:, :, 0] != IGNORE).sum())
    return batch


def sample_embeds(model: Any, input_ids: torch.Tensor, frames: torch.Tensor, audio_mask: torch.Tensor) -> torch.Tensor:
    """Return [B, T, D]: text positions from `embed_text_tokens`, audio positions the sum of their frame's codebook
    embeddings (`backbone_model.embed_tokens`), as the published `_merge_input_ids_with_input_values` makes them."""
    text = model.embed_text_tokens(input_ids)
    audio = model.backbone_model.embed_tokens(frames)
    return torch.where(audio_mask.unsqueeze(-1), audio.to(text.dtype), text)


def batch_losses(model: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Return `backbone_loss` and `depth_loss` from the published forward on a collated batch (means over the
    frames / codes they score), `mel_top1` (the first codebook's accuracy) and the tokens each scores
    (`backbone_tokens`, `depth_tokens`)."""
    from transformers import CsmForConditionalGeneration

    device = model.lm_head.weight.device
    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    embeds = sample_embeds(model, batch["input_ids"], batch["frames"], batch["audio_mask"])
    labels = batch["labels"]
    out = CsmForConditionalGeneration.forward(model, inputs_embeds=embeds, attention_mask=batch["attention_mask"],
                                              labels=labels, use_cache=False)
    targets = labels[:, 1:, 0]
    scored = targets != IGNORE
    top1 = (out.logits[:, :-1].argmax(-1) == targets)[scored].float().mean()
    depth_frames = (~(labels[:, :, 1:] == IGNORE).all(-1)).sum()
    return {"backbone_loss": out.backbone_loss, "depth_loss": out.depth_decoder_loss, "mel_top1": top1,
            "backbone_tokens": scored.sum(), "depth_tokens": depth_frames * (labels.size(-1) - 1)}


def csm_forward(module: Any, batch: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Return the family's `Scored` entries of a batch through `module` (the model or its DDP wrapper)."""
    out = module(batch=batch)
    return {"backbone_loss": (out["backbone_loss"], out["backbone_tokens"]),
            "depth_loss": (out["depth_loss"], out["depth_tokens"]), "mel_top1": (out["mel_top1"], out["backbone_tokens"])}
