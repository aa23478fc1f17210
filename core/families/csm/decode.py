"""LinguaForge's CSM decoder: greedy frames in the training layout, with or without a KV cache.

The prefix is `csm.layout.lay_out_sample` of the context segment (the speaker's prompt clip, its text and
frames) and the target's text with no frames yet (`open_last`). At each step the backbone's `lm_head` picks the
frame's first codebook from the last position, then the depth decoder the others, one by one, from the
backbone's hidden state and the codes before (as `CsmForConditionalGeneration.generate` runs it); a frame whose
codebooks but the last are all `codebook_eos_token_id` ends the speech, as in `generate`. With a KV cache the
prefix runs once and each step feeds the new frame's embedding (Llama's positions continue from the cache);
without one every step lays the whole sample out again — both give the same frames (a test holds them equal).
`frame_steps` yields the frames as they are made (the speaker streams them), each code chosen greedily or by
the speaker's sampling; `decode_frames` collects the greedy ones.

The published call that decodes the same way is `PUBLISHED_INFERENCE`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from core.families.csm.layout import CsmIds, lay_out_sample, sample_embeds

#: the published call that reproduces this decoder (export notes, docs/guides/csm.md)
PUBLISHED_INFERENCE = (
    "inputs = processor.apply_chat_template([{'role': '0', 'content': [{'type': 'text', 'text': PROMPT_TEXT}, "
    "{'type': 'audio', 'path': PROMPT_AUDIO_24K}]}, {'role': '0', 'content': [{'type': 'text', 'text': TEXT}]}], "
    "tokenize=True, return_dict=True); model.generate(**inputs, do_sample=False, depth_decoder_do_sample=False, "
    "max_new_tokens=N, output_audio=True): greedy frames after the target's <|end_of_text|>, the prompt clip as the "
    "context segment, KV cache; drop output_audio for the frames themselves."
)


Pick = Callable[[torch.Tensor], torch.Tensor]  # logits [1, V] → the chosen id [1]


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Return the most likely id of each row of `logits` [B, V] ([B])."""
    return logits.argmax(-1)


def _embeds(model: Any, ids: CsmIds, context: tuple[torch.Tensor, torch.Tensor] | None, text: torch.Tensor,
            frames: torch.Tensor) -> torch.Tensor:
    laid = lay_out_sample(ids, [*([context] if context is not None else []), (text, frames)], open_last=True)
    device = model.lm_head.weight.device
    return sample_embeds(model, *(laid[k][None].to(device) for k in ("input_ids", "frames", "audio_mask")))


def depth_frame(model: Any, hidden: torch.Tensor, first: torch.Tensor, codebooks: int, pick: Pick = greedy) -> torch.Tensor:
    """Return the frame [codebooks] whose first code is `first` ([1]): the depth decoder's codes after it, each
    chosen by `pick` from its logits (greedy by default), from the backbone's last hidden state `hidden` [1, D]
    (position 0 of the depth decoder's input)."""
    codes = first.reshape(1, 1)
    for _ in range(codebooks - 1):
        placeholder = torch.zeros((1, 1), dtype=torch.long, device=codes.device)
        logits = model.depth_decoder(input_ids=torch.cat([placeholder, codes], dim=1), backbone_last_hidden_state=hidden,
                                     use_cache=False).logits
        codes = torch.cat([codes, pick(logits[:, -1]).reshape(1, 1)], dim=1)
    return codes[0]


@torch.inference_mode()
def frame_steps(model: Any, ids: CsmIds, context: tuple[torch.Tensor, torch.Tensor] | None, text: torch.Tensor,
                max_frames: int, use_cache: bool = True, pick: Pick = greedy) -> Iterator[torch.Tensor]:
    """Yield each frame [codebooks] (CPU) CSM generates for the text ids `text` after the context segment `context`
    (text ids, frames; None: no context), every code chosen by `pick`, until the eos frame or `max_frames` frames."""
    frames = torch.zeros((0, ids.codebooks), dtype=torch.long)
    out = model.backbone_model(inputs_embeds=_embeds(model, ids, context, text, frames), use_cache=use_cache)
    for _ in range(max_frames):
        hidden = out.last_hidden_state[:, -1]
        frame = depth_frame(model, hidden, pick(model.lm_head(hidden)), ids.codebooks, pick)
        if bool((frame[:-1] == ids.codebook_eos).all()):
            return
        frames = torch.cat([frames, frame.cpu()[None]])
        yield frames[-1]
        if use_cache:
            fed = model.backbone_model.embed_tokens(frame.reshape(1, 1, -1))
            out = model.backbone_model(inputs_embeds=fed, cache=out.cache, use_cache=True)
        else:
            out = model.backbone_model(inputs_embeds=_embeds(model, ids, context, text, frames), use_cache=False)


def decode_frames(model: Any, ids: CsmIds, context: tuple[torch.Tensor, torch.Tensor] | None, text: torch.Tensor,
                  max_frames: int, use_cache: bool = True) -> tuple[torch.Tensor, bool]:
    """Return (the frames [n, codebooks] CSM generates greedily for the text ids `text` after the context segment
    `context` (text ids, frames), whether it stopped by itself within `max_frames`)."""
    frames = list(frame_steps(model, ids, context, text, max_frames + 1, use_cache))
    stacked = torch.stack(frames[:max_frames]) if frames else torch.zeros((0, ids.codebooks), dtype=torch.long)
    return stacked, len(frames) <= max_frames
