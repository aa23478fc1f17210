"""Chatterbox-Turbo speech: T3 speech tokens for a text, then the one-step meanflow S3Gen to 24 kHz.

The published `ChatterboxTurboTTS.from_local` builds T3 with 50,276 text rows; here T3 is built at
the checkpoint's size (`chatterbox.speech.load_t3_for_inference` through this family's config), the
text goes through `chatterbox_turbo.text.text_ids` (the function the features used), the published
`prepare_conditionals`'s steps make the voice (`chatterbox.speech.voice_conditionals` with `TURBO_PROMPT`:
loudness, 375 prompt tokens and the VoiceEncoder by the maker the feature cache uses, S3Gen's reference;
without its 5-second minimum), and `chatterbox_turbo.decode.decode_steps` generates the
tokens in the training layout, one by one. `MeanflowVocoder` vocodes them as `generate` does — codes
≥ 6561 dropped, three silence tokens appended, the meanflow S3Gen with 2 steps — in chunks while
they are generated when the speaker streams (`Speaker.speak_stream`), else all at once.

`TurboSpeaker` (a `chatterbox.speech.T3Speaker`) loads T3 and its tokenizer at once and the voice models
(S3Gen, the VoiceEncoder, `conds.pt`) on the first utterance, after the text and language are checked, then
keeps them (and the last 8 reference voices' conditionals) for every later call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from core.errors import InputError
from core.families.base import Utterance
from core.families.chatterbox.layout import t3_cond_embeds
from core.families.chatterbox.speech import MAX_NEW_TOKENS, S3Codes, S3GenVocoder, T3Speaker
from core.families.chatterbox_turbo.decode import TurboSampling, decode_steps
from core.families.chatterbox_turbo.features import TURBO_PROMPT
from core.families.chatterbox_turbo.text import BASE_LANGUAGE, text_ids, tokenizer_tags

SILENCE_TOKENS = 3      # `generate` appends three S3GEN_SIL tokens before vocoding
MEANFLOW_STEPS = 2      # `generate`'s n_cfm_timesteps


class TurboSpeaker(T3Speaker):
    """A Chatterbox-Turbo/Nano T3 checkpoint with the model folder's meanflow S3Gen, VoiceEncoder and `conds.pt`;
    a reference's voice is `voice_conditionals` with Turbo's prompt (`TURBO_PROMPT`)."""

    prompt = TURBO_PROMPT
    published_module = "chatterbox.tts_turbo"
    meanflow = True
    folder_files = "s3gen_meanflow.safetensors, ve.safetensors and conds.pt"
    label = "Chatterbox-Turbo"
    language_tags = staticmethod(tokenizer_tags)

    def build_tts(self, s3gen: Any, voice_encoder: Any) -> Any:
        """Return the published `ChatterboxTurboTTS` of T3 (labelled Nano at GPT-2 small's width), the meanflow
        `s3gen` and `voice_encoder`, with conds.pt's voice."""
        label = "Nano" if self.t3.dim == 768 else "Turbo"
        return self.published().ChatterboxTurboTTS(self.t3, s3gen, voice_encoder, None, self.device, self._default_conds,
                                                   label)

    def check_language(self, language: str | None) -> str:
        """Return the language code (lower case, "" for none). Raises InputError when the tokenizer has language
        tags but none for it (English, the base language, excepted)."""
        code = (language or "").lower()
        if self.tags and code and code != BASE_LANGUAGE and code not in self.tags:
            raise InputError(f"--language {language}: the tokenizer {self.tokenizer.path} has no [{code}] tag; "
                             f"it has {', '.join(sorted(self.tags))}.")
        return code

    def utterance(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None, speed: float = 1.0,
    ) -> Utterance:
        """Return `text` set up to be said (T3 → the meanflow S3Gen at 24 kHz); its report holds text_tokens,
        speech_tokens, dropped_tokens, stopped, tokens and language, and the audio keeps every code and the
        three silence tokens `generate` appends ((speech tokens + 3) × 960 samples at speed 1). Generated ids
        that are no S3 code (≥ 6561) are dropped and counted.

        Options: temperature (0.8; 0 = argmax), top_k (1000), top_p (0.95), repetition_penalty (1.2) —
        `ChatterboxTurboTTS.generate`'s defaults — and cfm_steps (the meanflow S3Gen's steps, 2).
        Raises InputError for a language the tokenizer has no tag for, no voice, or (as the tokens are
        read) no speech tokens produced.
        """
        options = dict(options or {})
        code = self.check_language(language)
        ids = torch.tensor(text_ids(self.tokenizer, text, language), dtype=torch.long, device=self.device)
        torch.manual_seed(seed)
        voice = self.conditionals(reference)
        sampling = TurboSampling(**{k: (int if k == "top_k" else float)(options[k])
                                    for k in TurboSampling.__dataclass_fields__ if options.get(k) is not None})
        steps = int(options.get("cfm_steps") or MEANFLOW_STEPS)
        vocoder = MeanflowVocoder(self.voice_models().s3gen, voice.gen, steps, seed, speed, self.device)
        return TurboUtterance(self, text, ids, voice, sampling, max_new_tokens or MAX_NEW_TOKENS, vocoder, code)


class TurboUtterance(Utterance):
    """One text for Turbo's T3: its speech tokens decoded one by one in the training layout, S3 codes only,
    then the three silence tokens `generate` appends."""

    def __init__(self, speaker: TurboSpeaker, text: str, ids: torch.Tensor, voice: Any, sampling: TurboSampling,
                 max_new_tokens: int, vocoder: Any, language: str) -> None:
        self.speaker, self.text, self.ids, self.voice, self.sampling = speaker, text, ids, voice, sampling
        self.max_new_tokens, self.vocoder, self.language = max_new_tokens, vocoder, language or None
        self.codes = S3Codes()

    @torch.inference_mode()
    def tokens(self) -> Iterator[tuple[int, Any]]:
        """Yield each S3 code T3 generates (ids ≥ 6561 are counted, not yielded), then three silence tokens."""
        from chatterbox.models.s3gen.const import S3GEN_SIL

        t3 = self.speaker.t3
        yield from self.codes.of(decode_steps(t3, t3_cond_embeds(t3, self.voice.t3), self.ids, self.max_new_tokens,
                                              self.sampling), self.text)
        for _ in range(SILENCE_TOKENS):
            yield S3GEN_SIL, None

    def report(self, samples: int) -> dict[str, Any]:
        """Return text_tokens, speech_tokens, dropped_tokens, stopped, tokens and language."""
        return {"text_tokens": int(self.ids.numel()), **self.codes.report(), "language": self.language}


class MeanflowVocoder(S3GenVocoder):
    """The meanflow S3Gen as a window vocoder (`chatterbox.speech.S3GenVocoder`'s steps, 2 by default) whose
    utterance keeps every token's 960 samples at speed 1: `generate` vocodes its codes and three silence
    tokens and trims nothing."""

    def total_samples(self, tokens: int) -> int:
        """Return the length of the whole utterance of `tokens` tokens (silence included), scaled by the speed."""
        from core.speech.stream import stretched_count

        return stretched_count(self.MEL_PER_TOKEN * tokens, self.speed) * self.HOP
