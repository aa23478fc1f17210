"""IndexTTS2 speech from a LinguaForge (or exported) GPT: GPT → s2mel → BigVGAN at 22.05 kHz.

The stages follow `indextts.infer_v2.IndexTTS2.infer_generator` with the models loaded from the
local folder (`indextts.models`), the reference read by IndexTTS2's front end
(`indextts.audio`), the GPT decoded by LinguaForge's decoder on the training layout
(`indextts.decode`: greedy at temperature 0, KV-cached, one code at a time), and each stage's output
shape checked: codes [1, N] < 8192, GPT latents [1, D] per code, s2mel mel [1, 80, frames], wav
[1, samples]. `S2MelVocoder` vocodes the codes — in chunks while they are generated when the speaker
streams (`Speaker.speak_stream`), else all at once. `IndexTTSSpeaker` loads the GPT and every model
once (and the last 8 reference voices) and speaks many texts.
s2mel's `gpt_layer` takes 1280-wide latents (the published GPT's width): a GPT of another width
is refused when the speaker loads, with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from core.checkpoint import load_checkpoint
from core.errors import InputError, InternalError
from core.families.base import Speaker, Utterance, VoiceCache
from core.families.indextts.gpt import (
    CONFIG_NAME,
    SEMANTIC_CODES,
    SEMANTIC_CODES_PER_SECOND,
    STATS_NAME,
    IndexTextNormalizer,
    load_unified_voice,
    read_indextts_config,
    require_rows_for,
)
from core.families.indextts.audio import speaker_audio
from core.families.indextts.decode import Sampling, decode_steps
from core.families.indextts.models import SemanticFeatures, model_paths, voice_conditioning

SAMPLE_RATE = 22050
DIFFUSION_STEPS = 25
CFG_RATE = 0.7


def _expect(stage: str, tensor: torch.Tensor, shape: tuple) -> None:
    if tensor.ndim != len(shape) or any(want is not None and got != want for got, want in zip(tensor.shape, shape)):
        raise InternalError(f"IndexTTS2 stage {stage}: output shape {tuple(tensor.shape)}, expected {shape}.")


class SpeechModels:
    """s2mel (MyModel with gpt_layer), CAMPPlus, BigVGAN and the mel front end of one IndexTTS2 folder."""

    def __init__(self, paths: Any, config: dict[str, Any], device: str) -> None:
        from munch import DefaultMunch

        from indextts.s2mel.modules.bigvgan.bigvgan import BigVGAN, load_hparams_from_json
        from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
        from indextts.s2mel.modules.commons import MyModel

        from core.families.indextts.models import _safe_torch_load

        self.s2mel = MyModel(DefaultMunch.fromDict(config["s2mel"]), use_gpt_latent=True)
        net = _safe_torch_load(paths.path(config.get("s2mel_checkpoint", "s2mel.pth")))["net"]
        for key, module in self.s2mel.models.items():
            if key not in net:
                raise InputError(f"{paths.model_dir}: s2mel checkpoint has no `{key}` weights.")
            module.load_state_dict({k.removeprefix("module."): v for k, v in net[key].items()}, strict=False)
        self.s2mel = self.s2mel.to(device).eval()
        self.s2mel.models["cfm"].estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
        self.campplus = CAMPPlus(feat_dim=80, embedding_size=192)
        self.campplus.load_state_dict(_safe_torch_load(paths.path("campplus")))
        self.campplus = self.campplus.to(device).eval()
        folder = paths.path("bigvgan")
        self.bigvgan = BigVGAN(load_hparams_from_json(folder / "config.json"))
        self.bigvgan.load_state_dict(_safe_torch_load(folder / "bigvgan_generator.pt")["generator"])
        self.bigvgan.remove_weight_norm()
        self.bigvgan = self.bigvgan.to(device).eval()
        spect = config["s2mel"]["preprocess_params"]["spect_params"]
        self.mel_args = {
            "n_fft": spect["n_fft"], "win_size": spect["win_length"], "hop_size": spect["hop_length"],
            "num_mels": spect["n_mels"], "sampling_rate": config["s2mel"]["preprocess_params"]["sr"],
            "fmin": spect.get("fmin", 0), "fmax": None if spect.get("fmax", "None") == "None" else 8000, "center": False,
        }
        self.latent_width = self.s2mel.models["gpt_layer"][0].in_features

    def mel(self, wav_22k: torch.Tensor) -> torch.Tensor:
        """Return the s2mel mel spectrogram [1, n_mels, frames] of a 22.05 kHz waveform [1, samples]."""
        from indextts.s2mel.modules.audio import mel_spectrogram

        return mel_spectrogram(wav_22k, **self.mel_args)

    def style(self, wav_16k: torch.Tensor) -> torch.Tensor:
        """Return the CAMPPlus speaker style [1, 192] of a 16 kHz waveform [1, samples]."""
        import torchaudio

        feat = torchaudio.compliance.kaldi.fbank(wav_16k, num_mel_bins=80, dither=0, sample_frequency=16000)
        return self.campplus((feat - feat.mean(dim=0, keepdim=True)).unsqueeze(0))


def _load_gpt(checkpoint: Any, tokenizer_path: Path | None, settings: Any, config: dict[str, Any], device: str) -> tuple[torch.nn.Module, Any]:
    from core.checkpoint import LoadedCheckpoint
    from core.inference import resolve_tokenizer
    from core.tokenizers.tokenizer import load_tokenizer

    loaded = checkpoint if isinstance(checkpoint, LoadedCheckpoint) else load_checkpoint(checkpoint)
    if loaded.meta:
        tokenizer = resolve_tokenizer(loaded, settings, str(tokenizer_path) if tokenizer_path else None)
    elif tokenizer_path:
        tokenizer = load_tokenizer(tokenizer_path)
    else:
        raise InputError(f"{loaded.path}: a plain IndexTTS2 checkpoint records no tokenizer; pass --tokenizer.")
    require_rows_for(loaded.state_dict, tokenizer.size, f"{loaded.path} (tokenizer {tokenizer.path})")
    gpt, _ = load_unified_voice(loaded.state_dict, config, tokenizer.size)
    return gpt.to(device).eval(), tokenizer


def speech_files(model_dir: Path | None, settings: Any) -> dict[str, Path]:
    """Return {role: path} of what IndexTTS2 synthesis reads: config.yaml, s2mel.pth, CAMPPlus, BigVGAN's
    config and generator, w2v-BERT 2.0, the semantic codec and the w2v-BERT stats.

    Raises InputError naming the first missing file, where IndexTTS2 expects it and the override to set.
    """
    paths = model_paths(model_dir, dict(settings.get("families.indextts") or {}))
    config = read_indextts_config(paths.model_dir / CONFIG_NAME)
    bigvgan = paths.path("bigvgan")
    files = {"config": paths.model_dir / CONFIG_NAME, "s2mel": paths.path(config.get("s2mel_checkpoint", "s2mel.pth")),
             "campplus": paths.path("campplus"), "w2v_bert": paths.path("w2v_bert"),
             "semantic_codec": paths.path("semantic_codec"), "w2v_stats": paths.path(STATS_NAME)}
    for name in ("config.json", "bigvgan_generator.pt"):
        if not (bigvgan / name).is_file():
            raise InputError(f"{bigvgan / name}: missing from the BigVGAN folder {bigvgan} "
                             "(nvidia/bigvgan_v2_22khz_80band_256x: config.json, bigvgan_generator.pt).")
        files[f"bigvgan_{Path(name).stem}"] = bigvgan / name
    return files


class IndexTTSSpeaker(Speaker):
    """An IndexTTS2 GPT checkpoint with the folder's w2v-BERT, semantic codec, s2mel, CAMPPlus and BigVGAN."""

    sample_rate = SAMPLE_RATE
    tokens_per_second = SEMANTIC_CODES_PER_SECOND

    def __init__(self, checkpoint: Any, tokenizer: Path | None, model_dir: Path | None, settings: Any, device: str = "auto") -> None:
        from core.inference import resolve_device

        self.section = dict(settings.get("families.indextts") or {})
        paths = model_paths(model_dir, self.section)
        self.config = read_indextts_config(paths.model_dir / CONFIG_NAME)
        self.device = str(resolve_device(device))
        self.gpt, self.tokenizer = _load_gpt(checkpoint, tokenizer, settings, self.config, self.device)
        self.semantic = SemanticFeatures(paths, self.config["semantic_codec"], self.device, paths.w2v_layer)
        self.speech = SpeechModels(paths, self.config, self.device)
        if self.speech.latent_width != self.gpt.model_dim:
            raise InputError(
                f"{paths.model_dir}: s2mel's gpt_layer takes {self.speech.latent_width}-wide GPT latents, the GPT is "
                f"{self.gpt.model_dim} wide; use the s2mel.pth published with this GPT."
            )
        self.normalizer = IndexTextNormalizer(self.section.get("normalizer_language"))
        self._voices = VoiceCache()

    @torch.no_grad()
    def speaker_embedding(self, wav_16k: Any) -> Any:
        """Return the CAMPPlus speaker style [192] of a 16 kHz clip (numpy), the embedding IndexTTS2 speaks with."""
        wav = torch.as_tensor(wav_16k, dtype=torch.float32).reshape(1, -1).to(self.device)
        return self.speech.style(wav)[0].float().cpu().numpy()

    @torch.no_grad()
    def speech_tokens(self, path: Path) -> list[int]:
        """Return the MaskGCT semantic codes of the clip at `path` (IndexTTS2's speaker front end), the
        codes the GPT is trained to produce. Raises InputError for unreadable audio."""
        clip = speaker_audio(path)
        return self.semantic.codes(self.semantic.features(clip.wav_16k[0]))[0].tolist()

    @torch.no_grad()
    def utterance(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None, speed: float = 1.0,
    ) -> Utterance:
        """Return `text` set up to be said in `reference`'s voice (GPT → s2mel → BigVGAN at 22.05 kHz); its
        report holds text_tokens, speech_tokens (the number of codes), tokens (the codes), stopped (the GPT generated
        stop) and mel_frames (`language` is not used: the normaliser comes from the settings).

        Options: temperature (0.8; 0 = greedy: argmax, no repetition penalty; above 0 IndexTTS2's
        sampling, top-k 30, top-p 0.8, repetition penalty 10), max_mel_tokens (1500), diffusion_steps (25).
        Raises InputError without a reference or for an empty text; InternalError (as the tokens are
        read) when a stage's output has the wrong shape.
        """
        options = dict(options or {})
        if reference is None:
            raise InputError("IndexTTS2 speaks in a reference voice: pass --reference WAV (a few seconds of the speaker).")
        ids = self.normalizer.text_ids(text, self.tokenizer)
        if not ids:
            raise InputError("--text is empty after IndexTTS2's normalisation.")
        sampling = Sampling(temperature=float(options.get("temperature", 0.8)))
        conditioning, prompt, ref_mel, style = self._voices.get(reference, lambda: self._voice(reference))
        steps = int(options.get("diffusion_steps") or DIFFUSION_STEPS)
        vocoder = S2MelVocoder(self, prompt, ref_mel, style, steps, seed, speed)
        max_codes = int(max_new_tokens or options.get("max_mel_tokens") or 1500)
        return IndexTTSUtterance(self.gpt, conditioning, ids, max_codes, sampling, seed, vocoder)


    def _voice(self, reference: Path) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return what a reference clip gives every utterance in its voice: the GPT's conditioning (speaker
        latents, emotion vector), s2mel's prompt, the reference's mel and CAMPPlus style."""
        speech, semantic, device = self.speech, self.semantic, self.device
        voice = voice_conditioning(semantic, self.gpt, [reference])[0]
        clip = speaker_audio(reference)
        _, quantized = semantic.codec.quantize(voice.features)
        ref_mel = speech.mel(clip.wav_22k.to(device))
        style = speech.style(clip.wav_16k.to(device))
        prompt = speech.s2mel.models["length_regulator"](quantized, ylens=torch.tensor([ref_mel.shape[2]], device=device),
                                                         n_quantizers=3, f0=None)[0]
        return (voice.condition[None], voice.emo_vec[None]), prompt, ref_mel, style


class IndexTTSUtterance(Utterance):
    """One text for the GPT: its semantic codes decoded one by one, each with the latent s2mel reads."""

    def __init__(self, gpt: torch.nn.Module, conditioning: tuple[torch.Tensor, torch.Tensor], ids: list[int], max_codes: int,
                 sampling: Sampling, seed: int, vocoder: S2MelVocoder) -> None:
        self.gpt, self.conditioning, self.ids, self.max_codes, self.sampling = gpt, conditioning, ids, max_codes, sampling
        self.seed, self.vocoder = seed, vocoder
        self.codes: list[int] = []
        self.stopped = False

    @torch.no_grad()
    def tokens(self) -> Iterator[tuple[int, Any]]:
        """Yield each semantic code with its GPT latent [1, D]. Raises InternalError when the GPT stops before
        its first code or generates a code outside the codebook."""
        steps = decode_steps(self.gpt, *self.conditioning, self.ids, self.max_codes, self.sampling,
                             generator=torch.Generator().manual_seed(self.seed))
        while True:
            try:
                code, latent = next(steps)
            except StopIteration as end:
                self.stopped = bool(end.value)
                break
            if code >= SEMANTIC_CODES:
                raise InternalError(f"IndexTTS2 stage gpt codes: code {len(self.codes)} is {code}, the codebook has {SEMANTIC_CODES}.")
            _expect("gpt latents", latent, (1, self.gpt.model_dim))
            self.codes.append(code)
            yield code, latent
        if not self.codes:
            raise InternalError("IndexTTS2 stage gpt codes: the GPT stopped before its first code.")

    def report(self, samples: int) -> dict[str, Any]:
        """Return text_tokens, speech_tokens, tokens, stopped and mel_frames."""
        return {"text_tokens": len(self.ids), "speech_tokens": len(self.codes), "tokens": list(self.codes), "stopped": self.stopped,
                "mel_frames": self.vocoder.frames(len(self.codes))}


class S2MelVocoder:
    """IndexTTS2's s2mel + BigVGAN as a window vocoder (`core.speech.stream`): codes and their GPT latents →
    content → length regulator (1.72 mel frames a code, ÷ speed) → CFM after the reference's mel prompt,
    from the same noise at the same mel frame in every window (`PositionalNoise`) → BigVGAN at 22.05 kHz,
    256 samples a frame."""

    FRAMES_PER_CODE = 1.72

    def __init__(self, speaker: IndexTTSSpeaker, prompt: torch.Tensor, ref_mel: torch.Tensor, style: torch.Tensor,
                 steps: int, seed: int, speed: float) -> None:
        from core.speech.stream import PositionalNoise

        self.speaker, self.prompt, self.ref_mel, self.style, self.steps, self.speed = speaker, prompt, ref_mel, style, steps, speed
        self.hop = int(speaker.speech.mel_args["hop_size"])
        self.samples_per_token = self.FRAMES_PER_CODE * self.hop / speed
        self.noise = PositionalNoise(int(speaker.speech.mel_args["num_mels"]), seed)

    def frames(self, codes: int) -> int:
        """Return the mel frames `codes` codes stretch to (IndexTTS2's int(codes × 1.72), ÷ speed)."""
        return int((torch.tensor([codes]) * (self.FRAMES_PER_CODE / self.speed)).long())

    def total_samples(self, tokens: int) -> int:
        """Return the whole utterance's samples: its mel frames × BigVGAN's hop."""
        return self.frames(tokens) * self.hop

    @torch.no_grad()
    def __call__(self, window: Any) -> Any:
        from core.speech.stream import WindowAudio

        speech, device = self.speaker.speech, self.speaker.device
        models = speech.s2mel.models
        codes = torch.tensor([window.tokens], dtype=torch.long, device=device)
        _expect("gpt codes", codes, (1, None))
        latent = torch.cat(window.extras, dim=0)[None]
        content = self.speaker.semantic.embed_codes(codes) + models["gpt_layer"](latent)
        count = self.frames(len(window.tokens))
        cond = models["length_regulator"](content, ylens=torch.tensor([count], device=device), n_quantizers=3, f0=None)[0]
        both = torch.cat([self.prompt, cond], dim=1)
        first = round(window.start * self.FRAMES_PER_CODE / self.speed)
        noise = torch.cat([torch.zeros(self.noise.channels, self.prompt.shape[1]), self.noise.frames(first, first + count)], dim=1)
        t_span = torch.linspace(0, 1, self.steps + 1, device=device)
        mel = models["cfm"].solve_euler(noise[None].to(device), torch.tensor([both.shape[1]], device=device), self.ref_mel,
                                        both, self.style, None, t_span, CFG_RATE)[:, :, self.ref_mel.shape[-1]:]
        _expect("s2mel mel", mel, (1, speech.mel_args["num_mels"], count))
        audio = torch.clamp(speech.bigvgan(mel.float()).squeeze(1), -1.0, 1.0)
        _expect("bigvgan wav", audio, (1, count * self.hop))
        return WindowAudio(audio[0].float().cpu(), first * self.hop)
