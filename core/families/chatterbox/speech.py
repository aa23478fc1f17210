"""Chatterbox speech: T3 speech tokens for a text, then S3Gen to a 24 kHz waveform.

The published `ChatterboxMultilingualTTS.generate` refuses language ids outside
`SUPPORTED_LANGUAGES` and `from_local` hard-codes `T3Config.multilingual()`; here T3 is built at
the checkpoint's size, the language tag is checked against the tokenizer, the text goes through
`chatterbox.text.text_ids` (the same function the features used), the published
`prepare_conditionals` makes the voice (voice encoder, S3 prompt tokens, S3Gen reference), and
`chatterbox.decode.decode_speech` generates the speech tokens in the training layout at every
temperature (temperature 0 = argmax).

`ChatterboxSpeaker` loads T3 and its tokenizer at once and the voice models (S3Gen, 264M
parameters; the VoiceEncoder; `conds.pt`) on the first `speak`, after the text and language
are checked, then keeps them for every later call.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import torch

from core.errors import InputError
from core.families.base import Speaker
from core.families.chatterbox.decode import Sampling, decode_speech
from core.families.chatterbox.layout import t3_cond_embeds, wrap_text
from core.families.chatterbox.text import language_tags, text_ids

S3GEN_SR = 24_000
SPEECH_CODES = 6561
SPEECH_TOKENS_PER_SECOND = 25
MAX_NEW_TOKENS = 1000


def load_t3_for_inference(family: Any, checkpoint: Any, tokenizer_path: Path | None, settings: Any) -> tuple[Any, Any]:
    """Return (the family's T3 loaded strictly at the checkpoint's size in eval mode, its tokenizer); `checkpoint`
    is a path or a LoadedCheckpoint.

    Raises InputError when no tokenizer is known or its size differs from the checkpoint's rows.
    """
    from core.checkpoint import LoadedCheckpoint, load_checkpoint
    from core.inference import resolve_tokenizer
    from core.tokenizers.tokenizer import load_tokenizer

    loaded = checkpoint if isinstance(checkpoint, LoadedCheckpoint) else load_checkpoint(checkpoint)
    if loaded.meta and loaded.meta.get("tokenizer_fingerprint"):
        tokenizer = resolve_tokenizer(loaded, settings, str(tokenizer_path) if tokenizer_path else None)
    elif tokenizer_path is not None:
        tokenizer = load_tokenizer(tokenizer_path)
    else:
        raise InputError(f"{loaded.path}: no LinguaForge metadata names its tokenizer; pass --tokenizer.")
    config = family.config_class(text_tokens_dict_size=tokenizer.size, **family.read_backbone(loaded.state_dict, str(loaded.path)))
    model = family.build_model(config, 0)
    family.load_weights(model, loaded.state_dict, str(loaded.path), tokenizer)
    return model.eval(), tokenizer


def load_s3gen(path: Path, meanflow: bool = False) -> Any:
    """Return the published `S3Gen` (eval mode; `S3Gen(meanflow=True)`, Turbo's one-step decoder, with `meanflow`)
    loaded from `path`; tensors saved in bf16/fp16 load into its fp32 weights.

    The class is built without its random initialisation (every weight is overwritten by the load;
    a missing one is refused). Raises InputError when the file is not Chatterbox's S3Gen.
    """
    from chatterbox.models.s3gen import S3Gen
    from transformers.initialization import no_init_weights

    from core.families.chatterbox.feature_models import load_tensors

    with no_init_weights():
        s3gen = S3Gen(meanflow=meanflow)
    try:
        missing, unexpected = s3gen.load_state_dict(load_tensors(path), strict=False)
    except RuntimeError as exc:
        raise InputError(f"{path}: not Chatterbox's S3Gen ({str(exc).splitlines()[0]}).") from exc
    missing = [k for k in missing if k not in S3Gen.ignore_state_dict_missing]
    if missing or unexpected:
        raise InputError(f"{path}: not Chatterbox's S3Gen (missing {missing[:3]}, unexpected {unexpected[:3]}).")
    return s3gen.eval()


def load_conditionals(path: Path) -> Any:
    """Return the published `Conditionals` saved in `conds.pt` (loaded with weights_only=True).

    Raises InputError naming the file when it is damaged or not Chatterbox's conditionals.
    """
    from chatterbox.mtl_tts import Conditionals

    try:
        return Conditionals.load(path)
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, KeyError or TypeError here
        raise InputError(f"{path}: not a readable Chatterbox conds.pt ({type(exc).__name__}); replace it with the "
                         "release's conds.pt or remove it and pass --reference WAV.") from exc


class ChatterboxSpeaker(Speaker):
    """A Chatterbox T3 checkpoint with the model folder's S3Gen, VoiceEncoder and `conds.pt`."""

    sample_rate = S3GEN_SR
    tokens_per_second = SPEECH_TOKENS_PER_SECOND

    def __init__(self, family: Any, checkpoint: Any, tokenizer: Path | None, model_dir: Path | None, settings: Any,
                 device: str = "auto") -> None:
        from core.inference import resolve_device

        if model_dir is None:
            raise InputError("synthesize --family chatterbox needs --model-dir (or settings families.chatterbox.model_dir): "
                             "the folder with s3gen.pt, ve.pt and conds.pt.")
        self.model_dir = Path(model_dir)
        self.files = family.published_files(self.model_dir)
        self.device = str(resolve_device(device))
        t3, self.tokenizer = load_t3_for_inference(family, checkpoint, tokenizer, settings)
        self.t3 = t3.to(self.device)
        self.tags = language_tags(self.tokenizer)
        self._tts: Any = None
        self._default_conds: Any = None

    def _voice_models(self) -> Any:
        """Return the published `ChatterboxMultilingualTTS` holding T3, S3Gen and the VoiceEncoder (loaded once)."""
        if self._tts is None:
            from chatterbox.mtl_tts import ChatterboxMultilingualTTS

            from core.families.chatterbox.feature_models import load_voice_encoder

            s3gen = load_s3gen(self.files["s3gen"]).to(self.device)
            voice_encoder = load_voice_encoder(self.files["voice_encoder"]).to(self.device)
            conds = load_conditionals(self.files["conds"]).to(self.device) if "conds" in self.files else None
            self._default_conds = conds
            self._tts = ChatterboxMultilingualTTS(self.t3, s3gen, voice_encoder, None, self.device, conds)
        return self._tts

    def _conditionals(self, reference: Path | None, exaggeration: float) -> Any:
        tts = self._voice_models()
        if reference is None:
            if self._default_conds is None:
                raise InputError(f"no voice: pass --reference WAV or put conds.pt into {self.model_dir}.")
            return self._default_conds
        tts.prepare_conditionals(str(reference), exaggeration=exaggeration)
        return tts.conds

    def speaker_embedding(self, wav_16k: Any) -> Any:
        """Return the model folder's VoiceEncoder (`ve.pt`) speaker embedding [256] of a 16 kHz clip (numpy)."""
        with torch.inference_mode():
            return self._voice_models().ve.embeds_from_wavs([wav_16k], sample_rate=16000)[0]

    def speech_tokens(self, path: Path) -> list[int]:
        """Return the S3 speech tokens (25 per second) of the clip at `path`, as T3 is trained to produce them.
        Raises InputError for unreadable audio."""
        from core.audio import read_audio
        from core.families.chatterbox.feature_models import S3_SR

        wav = read_audio(path, S3_SR)[0]
        with torch.inference_mode():
            tokens, lengths = self._voice_models().s3gen.tokenizer([wav.to(self.device)])
        return tokens[0, : int(lengths[0])].tolist()

    def speak(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return (24 kHz waveform, report with seconds, sample_rate, speech_tokens, dropped_tokens, language,
        upstream_supported, synthesis_s); the waveform keeps (speech tokens − 1) × 960 samples, as the
        published `generate` trims it. Generated ids that are no S3 code (≥ 6561: start/stop and the
        head's unused rows, which an undertrained T3 can emit) are dropped and counted.

        Options: temperature (0.8; 0 = argmax), cfg_weight (0.5; 0 = no guidance), repetition_penalty
        (1.2), min_p (0.05), top_p (0.95) — the last three only when sampling — exaggeration (0.5),
        cfm_steps (S3Gen's flow-matching steps, default 10 as published). The report adds
        `stopped` (False: the token cap ended generation) and `tokens` (every generated speech token).
        Raises InputError for a language the tokenizer has no tag for, no voice (no reference and
        no conds.pt), or no speech tokens produced.
        """
        from chatterbox.mtl_tts import SUPPORTED_LANGUAGES

        options = dict(options or {})
        if self.tags and language and language.lower() not in self.tags:
            raise InputError(f"--language {language}: the tokenizer {self.tokenizer.path} has no [{language.lower()}] tag; "
                             f"it has {', '.join(sorted(self.tags))}.")
        ids = text_ids(self.tokenizer, text, language)
        torch.manual_seed(seed)
        conds = self._conditionals(reference, float(options.get("exaggeration", 0.5)))
        start = time.monotonic()
        t3 = self.t3
        sampling = Sampling(**{k: float(options[k]) for k in Sampling.__dataclass_fields__ if options.get(k) is not None})
        with torch.inference_mode():
            decoded = decode_speech(t3, t3_cond_embeds(t3, conds.t3), wrap_text(ids).to(self.device),
                                    max_new_tokens or MAX_NEW_TOKENS, sampling)
            speech = torch.tensor(decoded.tokens, dtype=torch.long, device=self.device)
            speech = speech[speech < SPEECH_CODES]  # ids ≥ 6561 are no S3 codes; S3Gen cannot embed them
            if speech.numel() == 0:
                raise InputError(f"T3 produced no speech tokens for {text!r}; train longer or check the language tag.")
            steps = int(options["cfm_steps"]) if options.get("cfm_steps") else None  # None: S3Gen's own 10
            wav, _ = self._tts.s3gen.inference(speech_tokens=speech, ref_dict=conds.gen, n_cfm_timesteps=steps)
        keep = max(1, int(speech.shape[-1]) - 1) * (S3GEN_SR // SPEECH_TOKENS_PER_SECOND)
        wav = wav.squeeze(0).detach().float().cpu()[:keep]
        language = (language or "").lower() or None
        return wav, {"seconds": round(wav.shape[-1] / S3GEN_SR, 3), "sample_rate": S3GEN_SR,
                     "speech_tokens": int(speech.numel()), "dropped_tokens": len(decoded.tokens) - int(speech.numel()),
                     "stopped": decoded.stopped, "tokens": decoded.tokens,
                     "language": language,
                     "upstream_supported": language in SUPPORTED_LANGUAGES if language else True,
                     "synthesis_s": round(time.monotonic() - start, 3)}
