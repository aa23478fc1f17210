"""Chatterbox speech: T3 speech tokens for a text, then S3Gen to a 24 kHz waveform.

The published `ChatterboxMultilingualTTS.generate` refuses language ids outside
`SUPPORTED_LANGUAGES` and `from_local` hard-codes `T3Config.multilingual()`; here T3 is built at
the checkpoint's size, the language tag is checked against the tokenizer, the text goes through
`chatterbox.text.text_ids` (the same function the features used), `voice_conditionals` makes the voice
as the published `prepare_conditionals` makes it (S3Gen's reference; the S3 prompt tokens and the
VoiceEncoder's embedding by the maker the feature cache uses), and
`chatterbox.decode.decode_steps` generates the speech tokens in the training layout at every
temperature (temperature 0 = argmax), one by one, and `S3GenVocoder` vocodes them — in chunks while
they are generated when the speaker streams (`Speaker.speak_stream`), else all at once.

`ChatterboxSpeaker` (a `T3Speaker`, as Turbo's is) loads T3 and its tokenizer at once and the voice models
(S3Gen, 264M parameters; the VoiceEncoder; `conds.pt`) on the first `speak`, after the text and language
are checked, then keeps them (and the last 8 reference voices' conditionals) for every later call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generator, Iterator, Mapping

import torch

from core.errors import InputError
from core.families.base import Speaker, Utterance, VoiceCache
from core.families.chatterbox.decode import Sampling, decode_steps
from core.families.chatterbox.feature_models import MULTILINGUAL_PROMPT, VoicePrompt
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


def load_conditionals(path: Path, conditionals: type, label: str) -> Any:
    """Return the published `conditionals` class's voice saved in `conds.pt` (loaded with weights_only=True).

    Raises InputError naming the file when it is damaged or not `label`'s conditionals.
    """
    try:
        return conditionals.load(path)
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, KeyError or TypeError here
        raise InputError(f"{path}: not a readable {label} conds.pt ({type(exc).__name__}); replace it with the "
                         "release's conds.pt or remove it and pass --reference WAV.") from exc


def voice_conditionals(tts: Any, reference: Path, prompt: VoicePrompt, exaggeration: float, device: str,
                       conditionals: type) -> Any:
    """Return the published `conditionals` (T3's `T3Cond` and S3Gen's reference) of the clip `reference`, made as
    the published `prepare_conditionals` of `tts` makes them: the clip at 24 kHz and 16 kHz (`reference_audio`),
    S3Gen's reference from its first 10 s at 24 kHz, the prompt tokens and speaker embedding from the one maker
    the feature cache uses (`voice_prompts` with the family's `prompt`), the emotion `exaggeration`. Turbo's
    assert that a reference is longer than 5 s is left out: evaluation and the dashboard speak in the voice of
    training clips, which are often shorter. Raises InputError for unreadable audio."""
    from chatterbox.models.t3.modules.cond_enc import T3Cond

    from core.audio import read_audio
    from core.families.chatterbox.feature_models import S3GEN_SR, FeatureModels, reference_audio, voice_prompts

    wav24, wav16 = reference_audio(*read_audio(reference), prompt)
    with torch.inference_mode():
        gen = tts.s3gen.embed_ref(wav24[: tts.DEC_COND_LEN], S3GEN_SR, device=device)
        voice = voice_prompts(FeatureModels(tts.s3gen.tokenizer, tts.ve), [wav16], prompt)[0]
    t3_cond = T3Cond(speaker_emb=torch.from_numpy(voice["speaker_emb"])[None],
                     cond_prompt_speech_tokens=torch.from_numpy(voice["prompt"]).long()[None],
                     emotion_adv=exaggeration * torch.ones(1, 1, 1)).to(device=device)
    return conditionals(t3_cond, gen)


class T3Speaker(Speaker):
    """What the speakers of both T3 families share: T3 and its tokenizer loaded at once; the published TTS class
    (`voice_models`: T3, S3Gen, the VoiceEncoder, `conds.pt`) on the first utterance, after the text and language
    are checked; the voice of a reference made by `voice_conditionals` (the last 8 kept), else `conds.pt`'s."""

    sample_rate = S3GEN_SR
    tokens_per_second = SPEECH_TOKENS_PER_SECOND
    #: the family's voice prompt, the published module holding its TTS class and `Conditionals`, whether its S3Gen
    #: is the meanflow one, the files `--model-dir` must hold and the name of its `conds.pt` in error lines
    prompt = MULTILINGUAL_PROMPT
    published_module = "chatterbox.mtl_tts"
    meanflow = False
    folder_files = "s3gen.pt, ve.pt and conds.pt"
    label = "Chatterbox"

    def __init__(self, family: Any, checkpoint: Any, tokenizer: Path | None, model_dir: Path | None, settings: Any,
                 device: str = "auto") -> None:
        from core.inference import resolve_device

        if model_dir is None:
            raise InputError(f"synthesize --family {family.name} needs --model-dir (or settings families.{family.name}.model_dir): "
                             f"the folder with {self.folder_files}.")
        self.model_dir = Path(model_dir)
        self.files = family.published_files(self.model_dir)
        self.device = str(resolve_device(device))
        t3, self.tokenizer = load_t3_for_inference(family, checkpoint, tokenizer, settings)
        self.t3 = t3.to(self.device)
        self.tags = self.language_tags(self.tokenizer)
        self._tts: Any = None
        self._default_conds: Any = None
        self._voices = VoiceCache()

    @staticmethod
    def language_tags(tokenizer: Any) -> set[str]:
        """Return the language tags of the tokenizer (`chatterbox.text.language_tags`)."""
        return language_tags(tokenizer)

    def published(self) -> Any:
        """Return the published module holding the family's TTS class and `Conditionals`."""
        import importlib

        return importlib.import_module(self.published_module)

    def build_tts(self, s3gen: Any, voice_encoder: Any) -> Any:
        """Return the published `ChatterboxMultilingualTTS` of T3, `s3gen` and `voice_encoder` (conds.pt's voice)."""
        return self.published().ChatterboxMultilingualTTS(self.t3, s3gen, voice_encoder, None, self.device, self._default_conds)

    def voice_models(self) -> Any:
        """Return the published TTS class holding T3, S3Gen and the VoiceEncoder (loaded once, with conds.pt's voice)."""
        if self._tts is None:
            from core.families.chatterbox.feature_models import load_voice_encoder

            s3gen = load_s3gen(self.files["s3gen"], meanflow=self.meanflow).to(self.device)
            voice_encoder = load_voice_encoder(self.files["voice_encoder"]).to(self.device)
            if "conds" in self.files:
                conds = load_conditionals(self.files["conds"], self.published().Conditionals, self.label)
                self._default_conds = conds.to(self.device)
            self._tts = self.build_tts(s3gen, voice_encoder)
        return self._tts

    def conditionals(self, reference: Path | None, exaggeration: float = 0.5) -> Any:
        """Return the published `Conditionals` of `reference` (`voice_conditionals`, kept for the last 8 references),
        else `conds.pt`'s. Raises InputError without a voice."""
        tts = self.voice_models()
        if reference is None:
            if self._default_conds is None:
                raise InputError(f"no voice: pass --reference WAV or put conds.pt into {self.model_dir}.")
            return self._default_conds
        return self._voices.get(reference, lambda: voice_conditionals(tts, reference, self.prompt, exaggeration, self.device,
                                                                      self.published().Conditionals), exaggeration)

    def speaker_embedding(self, wav_16k: Any) -> Any:
        """Return the model folder's VoiceEncoder speaker embedding [256] of a 16 kHz clip (numpy)."""
        with torch.inference_mode():
            return self.voice_models().ve.embeds_from_wavs([wav_16k], sample_rate=16000)[0]

    def speech_tokens(self, path: Path) -> list[int]:
        """Return the S3 speech tokens (25 per second) of the clip at `path`, as T3 is trained to produce them.
        Raises InputError for unreadable audio."""
        from core.audio import read_audio
        from core.families.chatterbox.feature_models import S3_SR

        wav = read_audio(path, S3_SR)[0]
        with torch.inference_mode():
            tokens, lengths = self.voice_models().s3gen.tokenizer([wav.to(self.device)])
        return tokens[0, : int(lengths[0])].tolist()


class ChatterboxSpeaker(T3Speaker):
    """A Chatterbox T3 checkpoint with the model folder's S3Gen, VoiceEncoder and `conds.pt`."""

    def utterance(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None, speed: float = 1.0,
    ) -> Utterance:
        """Return `text` set up to be said (T3 → S3Gen at 24 kHz); its report holds text_tokens, speech_tokens,
        dropped_tokens, stopped, tokens, language and upstream_supported, and the audio keeps
        (speech tokens − 1) × 960 samples at speed 1, as the published `generate` trims it. Generated
        ids that are no S3 code (≥ 6561: start/stop and the head's unused rows, which an undertrained T3
        can emit) are dropped and counted.

        Options: temperature (0.8; 0 = argmax), cfg_weight (0.5; 0 = no guidance), repetition_penalty
        (1.2), min_p (0.05), top_p (0.95) — the last three only when sampling — exaggeration (0.5),
        cfm_steps (S3Gen's flow-matching steps, default 10 as published). `stopped` is False when the
        token cap ended generation; `tokens` holds every generated speech token.
        Raises InputError for a language the tokenizer has no tag for, no voice (no reference and
        no conds.pt), or (as the tokens are read) no speech tokens produced.
        """
        options = dict(options or {})
        if self.tags and language and language.lower() not in self.tags:
            raise InputError(f"--language {language}: the tokenizer {self.tokenizer.path} has no [{language.lower()}] tag; "
                             f"it has {', '.join(sorted(self.tags))}.")
        ids = text_ids(self.tokenizer, text, language)
        torch.manual_seed(seed)
        conds = self.conditionals(reference, float(options.get("exaggeration", 0.5)))
        sampling = Sampling(**{k: float(options[k]) for k in Sampling.__dataclass_fields__ if options.get(k) is not None})
        steps = int(options["cfm_steps"]) if options.get("cfm_steps") else None  # None: S3Gen's own 10
        vocoder = S3GenVocoder(self.voice_models().s3gen, conds.gen, steps, seed, speed, self.device)
        return ChatterboxUtterance(self, text, ids, conds, sampling, max_new_tokens or MAX_NEW_TOKENS, vocoder, language)


class S3Codes:
    """The tokens a T3 decoder generated for one utterance: every one (`generated`), how many were S3 codes
    (`kept`) and whether T3 stopped by itself."""

    def __init__(self) -> None:
        self.generated: list[int] = []
        self.kept = 0
        self.stopped = False

    def of(self, steps: Generator[int, None, bool], text: str) -> Iterator[tuple[int, Any]]:
        """Yield each S3 code of a decoder's `steps` with no extra; ids ≥ 6561 (start/stop and the head's unused
        rows, which an undertrained T3 can emit) are no S3 codes, which S3Gen cannot embed: counted, not yielded.
        Raises InputError when T3 produced no S3 code for `text`."""
        while True:
            try:
                token = next(steps)
            except StopIteration as end:
                self.stopped = bool(end.value)
                break
            self.generated.append(token)
            if token < SPEECH_CODES:
                self.kept += 1
                yield token, None
        if self.kept == 0:
            raise InputError(f"T3 produced no speech tokens for {text!r}; train longer or check the language tag.")

    def report(self) -> dict[str, Any]:
        """Return speech_tokens, dropped_tokens, stopped and tokens (every generated id)."""
        return {"speech_tokens": self.kept, "dropped_tokens": len(self.generated) - self.kept, "stopped": self.stopped,
                "tokens": list(self.generated)}


class ChatterboxUtterance(Utterance):
    """One text for T3: its speech tokens decoded one by one in the training layout, S3 codes only."""

    def __init__(self, speaker: ChatterboxSpeaker, text: str, ids: Any, conds: Any, sampling: Sampling, max_new_tokens: int,
                 vocoder: Any, language: str | None) -> None:
        self.speaker, self.text, self.ids, self.conds, self.sampling = speaker, text, ids, conds, sampling
        self.max_new_tokens, self.vocoder, self.language = max_new_tokens, vocoder, (language or "").lower() or None
        self.codes = S3Codes()

    @torch.inference_mode()
    def tokens(self) -> Iterator[tuple[int, Any]]:
        """Yield each S3 code T3 generates (ids ≥ 6561 are counted, not yielded)."""
        t3 = self.speaker.t3
        yield from self.codes.of(decode_steps(t3, t3_cond_embeds(t3, self.conds.t3), wrap_text(self.ids).to(self.speaker.device),
                                              self.max_new_tokens, self.sampling), self.text)

    def report(self, samples: int) -> dict[str, Any]:
        """Return text_tokens, speech_tokens, dropped_tokens, stopped, tokens, language and upstream_supported."""
        from chatterbox.mtl_tts import SUPPORTED_LANGUAGES

        return {"text_tokens": int(torch.as_tensor(self.ids).numel()), **self.codes.report(), "language": self.language,
                "upstream_supported": self.language in SUPPORTED_LANGUAGES if self.language else True}


class S3GenVocoder:
    """Chatterbox's S3Gen as a window vocoder (`core.speech.stream`): tokens → the flow's mel (2 frames a
    token) → HiFT at 24 kHz, 960 samples a token. Every window is drawn from the same noise at the same
    mel frame (`PositionalNoise`; the prompt's frames from one draw), HiFT's source excitation over the
    context and cross-fade continues the previous window's (HiFT's own `cache_source`), its other draws
    are seeded per window, and the first window gets S3Gen's fade-in (`trim_fade`). A meanflow S3Gen
    (one-step decoder, 2 steps by default) vocodes through the same steps. `speed` resamples the mel frames."""

    MEL_PER_TOKEN = 2
    HOP = S3GEN_SR // SPEECH_TOKENS_PER_SECOND // 2

    def __init__(self, s3gen: Any, ref_dict: dict[str, Any], steps: int | None, seed: int, speed: float, device: str) -> None:
        from core.speech.stream import PositionalNoise

        self.s3gen, self.ref_dict, self.seed, self.speed, self.device = s3gen, ref_dict, seed, speed, device
        self.steps = steps or (2 if s3gen.meanflow else 10)
        self.samples_per_token = self.MEL_PER_TOKEN * self.HOP / speed
        self.noise = PositionalNoise(80, seed)
        prompt_frames = self.MEL_PER_TOKEN * int(ref_dict["prompt_token"].shape[-1])  # the flow's prompt mel frames
        self.prompt_noise = torch.randn(80, prompt_frames, generator=torch.Generator().manual_seed(seed + 1))
        self._source: tuple[int, torch.Tensor] | None = None

    def total_samples(self, tokens: int) -> int:
        """Return (tokens − 1) × 960 samples at speed 1 (as `generate` trims), scaled by the speed."""
        from core.speech.stream import stretched_count

        frames = stretched_count(self.MEL_PER_TOKEN * tokens, self.speed) * self.HOP
        return min(frames, round(max(1, tokens - 1) * self.MEL_PER_TOKEN * self.HOP / self.speed))

    def __call__(self, window: Any) -> Any:
        from chatterbox.models.s3gen.s3gen import S3Token2Mel

        from core.speech.stream import WindowAudio, seeded, stretch_frames

        s3gen = self.s3gen
        first, count = window.start * self.MEL_PER_TOKEN, len(window.tokens) * self.MEL_PER_TOKEN
        noise = torch.cat([self.prompt_noise, self.noise.frames(first, first + count)], dim=1)
        tokens = torch.tensor([window.tokens], dtype=torch.long, device=self.device)
        with torch.inference_mode(), seeded(self.seed + window.start, self.device):
            mel = S3Token2Mel.forward(s3gen, tokens, ref_wav=None, ref_sr=None, ref_dict=self.ref_dict,
                                      n_cfm_timesteps=self.steps, finalize=True,
                                      noised_mels=noise[None].to(device=s3gen.device, dtype=s3gen.dtype))
            frames, k0 = stretch_frames(mel[0].T, first, self.speed)
            start = k0 * self.HOP
            mel = frames.T[None].to(dtype=s3gen.dtype)
            wav, source = s3gen.hift_inference(mel, self._cache(start, window, mel.shape[2] * self.HOP))
            if window.start == 0:
                fade = s3gen.trim_fade[: wav.shape[1]]
                wav[:, : fade.numel()] *= fade
        self._source = (start, source)
        return WindowAudio(wav[0].float().cpu(), start)

    def _cache(self, start: int, window: Any, length: int) -> torch.Tensor | None:
        """Return the previous window's source over this window's samples up to the end of the cross-fade."""
        if self._source is None:
            return None
        before, source = self._source
        lo = start - before
        hi = min(window.emit_start + window.fade - before, source.shape[2], lo + length)
        return source[:, :, lo:hi] if 0 <= lo < hi else None
