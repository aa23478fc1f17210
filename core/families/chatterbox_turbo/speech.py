"""Chatterbox-Turbo speech: T3 speech tokens for a text, then the one-step meanflow S3Gen to 24 kHz.

The published `ChatterboxTurboTTS.from_local` builds T3 with 50,276 text rows; here T3 is built at
the checkpoint's size (`chatterbox.speech.load_t3_for_inference` through this family's config), the
text goes through `chatterbox_turbo.text.text_ids` (the function the features used), the published
`prepare_conditionals`'s steps make the voice (loudness, 375 prompt tokens, the VoiceEncoder, S3Gen's
reference; without its 5-second minimum), and `chatterbox_turbo.decode.decode_speech` generates the tokens in the training layout.
`vocode` — a separate step, so speech can be vocoded in chunks — is what `generate` does with the
tokens: codes ≥ 6561 dropped, three silence tokens appended, `S3Gen(meanflow=True).inference` with 2 steps.

`TurboSpeaker` loads T3 and its tokenizer at once and the voice models (S3Gen, the VoiceEncoder,
`conds.pt`) on the first `speak`, after the text and language are checked.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import torch

from core.errors import InputError
from core.families.base import Speaker
from core.families.chatterbox.decode import Decoded
from core.families.chatterbox.layout import t3_cond_embeds
from core.families.chatterbox.speech import (
    MAX_NEW_TOKENS, S3GEN_SR, SPEECH_CODES, SPEECH_TOKENS_PER_SECOND, load_s3gen, load_t3_for_inference,
)
from core.families.chatterbox_turbo.decode import TurboSampling, decode_speech
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

    def generate(self, text: str, voice: Any, language: str | None = None, max_new_tokens: int | None = None,
                 sampling: TurboSampling = TurboSampling()) -> Decoded:
        """Return the speech tokens T3 generates for `text` in `voice` (a published `Conditionals`).

        Raises InputError for a language the tokenizer has no tag for.
        """
        self.check_language(language)
        ids = torch.tensor(text_ids(self.tokenizer, text, language), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            return decode_speech(self.t3, t3_cond_embeds(self.t3, voice.t3), ids, max_new_tokens or MAX_NEW_TOKENS, sampling)

    def vocode(self, tokens: list[int], voice: Any, steps: int = MEANFLOW_STEPS) -> torch.Tensor:
        """Return the 24 kHz waveform (float32, CPU) the meanflow S3Gen makes of speech tokens in `voice`, as
        `generate` does: ids ≥ 6561 dropped, three silence tokens appended. Raises InputError when no code is left."""
        from chatterbox.models.s3gen.const import S3GEN_SIL

        speech = torch.tensor([t for t in tokens if t < SPEECH_CODES], dtype=torch.long, device=self.device)
        if speech.numel() == 0:
            raise InputError("T3 produced no speech tokens; train longer or check the language tag.")
        speech = torch.cat([speech, speech.new_full((SILENCE_TOKENS,), S3GEN_SIL)])
        with torch.inference_mode():
            wav, _ = self.voice_models().s3gen.inference(speech_tokens=speech, ref_dict=voice.gen, n_cfm_timesteps=steps)
        return wav.squeeze(0).detach().float().cpu()

    def speak(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return (24 kHz waveform, report with seconds, sample_rate, speech_tokens, dropped_tokens, stopped,
        tokens, language, synthesis_s): `generate` then `vocode`.

        Options: temperature (0.8; 0 = argmax), top_k (1000), top_p (0.95), repetition_penalty (1.2) —
        `ChatterboxTurboTTS.generate`'s defaults — and cfm_steps (the meanflow S3Gen's steps, 2).
        Raises InputError for a language the tokenizer has no tag for, no voice, or no speech tokens produced.
        """
        options = dict(options or {})
        code = self.check_language(language)
        torch.manual_seed(seed)
        voice = self.conditionals(reference)
        start = time.monotonic()
        sampling = TurboSampling(**{k: (int if k == "top_k" else float)(options[k])
                                    for k in TurboSampling.__dataclass_fields__ if options.get(k) is not None})
        decoded = self.generate(text, voice, language, max_new_tokens, sampling)
        wav = self.vocode(decoded.tokens, voice, int(options.get("cfm_steps") or MEANFLOW_STEPS))
        spoken = sum(1 for t in decoded.tokens if t < SPEECH_CODES)
        return wav, {"seconds": round(wav.shape[-1] / S3GEN_SR, 3), "sample_rate": S3GEN_SR, "speech_tokens": spoken,
                     "dropped_tokens": len(decoded.tokens) - spoken, "stopped": decoded.stopped, "tokens": decoded.tokens,
                     "language": code or None, "synthesis_s": round(time.monotonic() - start, 3)}
