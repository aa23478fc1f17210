"""Chatterbox-Turbo speech: T3 speech tokens for a text, then the one-step meanflow S3Gen to 24 kHz.

The published `ChatterboxTurboTTS.from_local` builds T3 with 50,276 text rows; here T3 is built at
the checkpoint's size (`chatterbox.speech.load_t3_for_inference` through this family's config), the
text goes through `chatterbox_turbo.text.text_ids` (the function the features used), the published
`prepare_conditionals`'s steps make the voice (loudness, 375 prompt tokens, the VoiceEncoder, S3Gen's
reference; without its 5-second minimum), and `chatterbox_turbo.decode.decode_steps` generates the
tokens in the training layout, one by one. `MeanflowVocoder` vocodes them as `generate` does — codes
≥ 6561 dropped, three silence tokens appended, the meanflow S3Gen with 2 steps — in chunks while
they are generated when the speaker streams (`Speaker.speak_stream`), else all at once.

`TurboSpeaker` loads T3 and its tokenizer at once and the voice models (S3Gen, the VoiceEncoder,
`conds.pt`) on the first utterance, after the text and language are checked, then keeps them (and
the last 8 reference voices' conditionals) for every later call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from core.errors import InputError
from core.families.base import Speaker, Utterance, VoiceCache
from core.families.chatterbox.layout import t3_cond_embeds
from core.families.chatterbox.speech import (
    MAX_NEW_TOKENS, S3GEN_SR, SPEECH_TOKENS_PER_SECOND, S3Codes, S3GenVocoder, load_s3gen, load_t3_for_inference,
)
from core.families.chatterbox_turbo.decode import TurboSampling, decode_steps
from core.families.chatterbox_turbo.text import BASE_LANGUAGE, text_ids, tokenizer_tags

SILENCE_TOKENS = 3      # `generate` appends three S3GEN_SIL tokens before vocoding
MEANFLOW_STEPS = 2      # `generate`'s n_cfm_timesteps


class TurboSpeaker(Speaker):
    """A Chatterbox-Turbo/Nano T3 checkpoint with the model folder's meanflow S3Gen, VoiceEncoder and `conds.pt`."""

    sample_rate = S3GEN_SR
    tokens_per_second = SPEECH_TOKENS_PER_SECOND

    def __init__(self, family: Any, checkpoint: Any, tokenizer: Path | None, model_dir: Path | None, settings: Any,
                 device: str = "auto") -> None:
        from core.inference import resolve_device

        if model_dir is None:
            raise InputError("synthesize --family chatterbox-turbo needs --model-dir (or settings "
                             "families.chatterbox-turbo.model_dir): the folder with s3gen_meanflow.safetensors, "
                             "ve.safetensors and conds.pt.")
        self.model_dir = Path(model_dir)
        self.files = family.published_files(self.model_dir)
        self.device = str(resolve_device(device))
        t3, self.tokenizer = load_t3_for_inference(family, checkpoint, tokenizer, settings)
        self.t3 = t3.to(self.device)
        self.tags = tokenizer_tags(self.tokenizer)
        self._tts: Any = None
        self._default_conds: Any = None
        self._voices = VoiceCache()

    def voice_models(self) -> Any:
        """Return the published `ChatterboxTurboTTS` holding T3, the meanflow S3Gen and the VoiceEncoder (loaded once)."""
        if self._tts is None:
            from chatterbox.tts_turbo import ChatterboxTurboTTS, Conditionals

            from core.families.chatterbox.feature_models import load_voice_encoder

            s3gen = load_s3gen(self.files["s3gen"], meanflow=True).to(self.device)
            voice_encoder = load_voice_encoder(self.files["voice_encoder"]).to(self.device)
            if "conds" in self.files:
                try:
                    self._default_conds = Conditionals.load(self.files["conds"]).to(self.device)
                except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, KeyError or TypeError
                    raise InputError(f"{self.files['conds']}: not a readable Chatterbox-Turbo conds.pt ({type(exc).__name__}); "
                                     "replace it with the release's or pass --reference WAV.") from exc
            label = "Nano" if self.t3.dim == 768 else "Turbo"
            self._tts = ChatterboxTurboTTS(self.t3, s3gen, voice_encoder, None, self.device, self._default_conds, label)
        return self._tts

    def conditionals(self, reference: Path | None) -> Any:
        """Return the published `Conditionals` of `reference`, else `conds.pt`'s. Raises InputError without a voice.

        The steps are `ChatterboxTurboTTS.prepare_conditionals`'s with its own functions (the reference at
        −27 LUFS, S3Gen's reference from its first 10 s, 375 prompt tokens from its first 15 s at 16 kHz, the
        VoiceEncoder's embedding), except its assert that the reference is longer than 5 s: evaluation and the
        dashboard speak in the voice of training clips, which are often shorter. (The published `generate`
        of an export still needs a longer reference.)
        """
        from chatterbox.models.t3.modules.cond_enc import T3Cond
        from chatterbox.tts_turbo import S3_SR, S3GEN_SR, Conditionals, load_audio
        from torchaudio.functional import resample

        tts = self.voice_models()
        if reference is None:
            if self._default_conds is None:
                raise InputError(f"no voice: pass --reference WAV or put conds.pt into {self.model_dir}.")
            return self._default_conds
        wav, rate = load_audio(str(reference))
        if rate != S3GEN_SR:
            wav = resample(wav, orig_freq=rate, new_freq=S3GEN_SR)
        wav24 = tts.norm_loudness(wav.squeeze(0).numpy(), S3GEN_SR)
        wav16 = resample(torch.from_numpy(wav24).unsqueeze(0), orig_freq=S3GEN_SR, new_freq=S3_SR).squeeze(0).numpy()
        with torch.inference_mode():
            gen = tts.s3gen.embed_ref(wav24[: tts.DEC_COND_LEN], S3GEN_SR, device=self.device)
            prompt, _ = tts.s3gen.tokenizer.forward([wav16[: tts.ENC_COND_LEN]], max_len=self.t3.hp.speech_cond_prompt_len)
            speaker = torch.from_numpy(tts.ve.embeds_from_wavs([wav16], sample_rate=S3_SR)).mean(axis=0, keepdim=True)
        t3_cond = T3Cond(speaker_emb=speaker.to(self.device), cond_prompt_speech_tokens=torch.atleast_2d(prompt).to(self.device),
                         emotion_adv=0.5 * torch.ones(1, 1, 1)).to(device=self.device)
        return Conditionals(t3_cond, gen)

    def speaker_embedding(self, wav_16k: Any) -> Any:
        """Return the model folder's VoiceEncoder speaker embedding [256] of a 16 kHz clip (numpy)."""
        with torch.inference_mode():
            return self.voice_models().ve.embeds_from_wavs([wav_16k], sample_rate=16000)[0]

    def speech_tokens(self, path: Path) -> list[int]:
        """Return the S3 speech tokens (25 per second) of the clip at `path`. Raises InputError for unreadable audio."""
        from core.audio import read_audio
        from core.families.chatterbox.feature_models import S3_SR

        wav = read_audio(path, S3_SR)[0]
        with torch.inference_mode():
            tokens, lengths = self.voice_models().s3gen.tokenizer([wav.to(self.device)])
        return tokens[0, : int(lengths[0])].tolist()

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
        voice = self._voices.get(reference, lambda: self.conditionals(reference)) if reference is not None \
            else self.conditionals(None)
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
