"""Chatterbox-Turbo features in the one feature cache: the multilingual family's feature source with
Turbo's prompt and text.

The S3 speech tokens and the VoiceEncoder are the same published models (`chatterbox.feature_models`:
the S3 tokenizer's tensors inside `s3gen_meanflow.safetensors`, `ve.safetensors`). What differs is
what `ChatterboxTurboTTS.prepare_conditionals` makes of a reference: its loudness normalised to
−27 LUFS (the published `norm_loudness`), the prompt the first 15 s tokenised with `max_len=375`,
the speaker embedding from the same normalised audio; and the text ids of `chatterbox_turbo.text`.
"""

from __future__ import annotations

import numpy as np
import torch

from core.data.manifest import ManifestRow
from core.families.chatterbox.feature_models import S3_SR
from core.families.chatterbox.features import ChatterboxFeatures
from core.families.chatterbox_turbo.layout import PROMPT_TOKENS
from core.families.chatterbox_turbo.text import TEXT_PREP_VERSION, text_ids

PROMPT_SECONDS = 15  # ChatterboxTurboTTS.ENC_COND_LEN / S3_SR
FEATURE_FORMAT = "chatterbox-turbo-features-1"


class TurboFeatures(ChatterboxFeatures):
    """The feature-cache source of Chatterbox-Turbo: `text_ids`, `codes`, `prompt` (≤ 375), `speaker_emb`."""

    label = "chatterbox-turbo features"
    family = "chatterbox-turbo"
    feature_format = FEATURE_FORMAT
    text_preparation = TEXT_PREP_VERSION
    prompt_seconds, prompt_tokens = PROMPT_SECONDS, PROMPT_TOKENS

    def clip_text_ids(self, row: ManifestRow) -> list[int]:
        """Return the row's text ids (`chatterbox_turbo.text.text_ids`)."""
        return text_ids(self.tokenizer, row.text, row.language)

    def voices(self, wavs16: list[torch.Tensor]) -> list[np.ndarray]:
        """Return each clip at −27 LUFS through the published `ChatterboxTurboTTS.norm_loudness`, as
        `prepare_conditionals` prepares a reference (a clip too short to measure keeps its level)."""
        from chatterbox.tts_turbo import ChatterboxTurboTTS

        return [np.asarray(ChatterboxTurboTTS.norm_loudness(None, w.numpy().astype(np.float32), S3_SR), dtype=np.float32)
                for w in wavs16]
