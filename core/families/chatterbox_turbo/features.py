"""Chatterbox-Turbo features in the one feature cache: the multilingual family's feature source with
Turbo's prompt and text.

The S3 speech tokens and the VoiceEncoder are the same published models (`chatterbox.feature_models`:
the S3 tokenizer's tensors inside `s3gen_meanflow.safetensors`, `ve.safetensors`), and the voice prompt has
the same maker as `TurboSpeaker`'s (`reference_audio`, `voice_prompts`). What differs is `TURBO_PROMPT`,
what `ChatterboxTurboTTS.prepare_conditionals` makes of a reference: the clip resampled to 24 kHz, its
loudness normalised to −27 LUFS there (the published `norm_loudness`), resampled to 16 kHz, the prompt the
first 15 s tokenised with `max_len=375`, the speaker embedding from the same audio; and the text ids of
`chatterbox_turbo.text`. Feature format 2: 1 normalised and tokenised the clip read at 16 kHz directly.
"""

from __future__ import annotations

from core.data.manifest import ManifestRow
from core.families.chatterbox.feature_models import VoicePrompt
from core.families.chatterbox.features import ChatterboxFeatures
from core.families.chatterbox_turbo.layout import PROMPT_TOKENS
from core.families.chatterbox_turbo.text import TEXT_PREP_VERSION, text_ids

PROMPT_SECONDS = 15  # ChatterboxTurboTTS.ENC_COND_LEN / S3_SR
#: `ChatterboxTurboTTS.prepare_conditionals`'s voice prompt: 15 s, 375 tokens, −27 LUFS
TURBO_PROMPT = VoicePrompt(PROMPT_SECONDS, PROMPT_TOKENS, loudness=True)
FEATURE_FORMAT = "chatterbox-turbo-features-2"


class TurboFeatures(ChatterboxFeatures):
    """The feature-cache source of Chatterbox-Turbo: `text_ids`, `codes`, `prompt` (≤ 375), `speaker_emb`."""

    label = "chatterbox-turbo features"
    family = "chatterbox-turbo"
    feature_format = FEATURE_FORMAT
    text_preparation = TEXT_PREP_VERSION
    prompt = TURBO_PROMPT

    def clip_text_ids(self, row: ManifestRow) -> list[int]:
        """Return the row's text ids (`chatterbox_turbo.text.text_ids`)."""
        return text_ids(self.tokenizer, row.text, row.language)
