"""IndexTTS2 speech from a LinguaForge (or exported) GPT: GPT → s2mel → BigVGAN at 22.05 kHz.

The stages follow `indextts.infer_v2.IndexTTS2.infer_generator` with the models loaded from the
local folder (`indextts.models`), the reference read by IndexTTS2's front end
(`indextts.audio`), the GPT decoded by LinguaForge's decoder on the training layout
(`indextts.decode`: greedy at temperature 0, KV-cached), and each stage's output shape checked:
codes [1, N] < 8192, GPT latents [1, N, model_dim], s2mel mel [1, 80, frames], wav [1, samples]. `IndexTTSSpeaker` loads the GPT and every model once and speaks many texts.
s2mel's `gpt_layer` takes 1280-wide latents (the published GPT's width): a GPT of another width
is refused when the speaker loads, with the reason.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import torch

from core.checkpoint import load_checkpoint
from core.errors import InputError, InternalError
from core.families.base import Speaker
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
from core.families.indextts.audio import emotion_audio, speaker_audio
from core.families.indextts.decode import Sampling, decode
from core.families.indextts.models import SemanticFeatures, emotion_vectors, model_paths, speaker_latents

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
    def speak(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return (22.05 kHz waveform, report with seconds, sample_rate, speech_tokens (the number of codes),
        tokens (the codes), stopped (the GPT generated stop), mel_frames, wall_seconds) for `text` in
        `reference`'s voice (`language` is not used: the normaliser comes from the settings).

        Options: temperature (0.8; 0 = greedy: argmax, no repetition penalty; above 0 IndexTTS2's
        sampling, top-k 30, top-p 0.8, repetition penalty 10), max_mel_tokens (1500), diffusion_steps (25).
        Raises InputError without a reference or for an empty text; InternalError when a stage's
        output has the wrong shape.
        """
        start = time.monotonic()
        options = dict(options or {})
        if reference is None:
            raise InputError("IndexTTS2 speaks in a reference voice: pass --reference WAV (a few seconds of the speaker).")
        ids = self.normalizer.text_ids(text, self.tokenizer)
        if not ids:
            raise InputError("--text is empty after IndexTTS2's normalisation.")
        sampling = Sampling(temperature=float(options.get("temperature", 0.8)))
        torch.manual_seed(seed)  # s2mel's diffusion noise
        gpt, speech, semantic, device = self.gpt, self.speech, self.semantic, self.device
        clip = speaker_audio(reference)
        spk = semantic.features(clip.wav_16k[0])
        emo = semantic.features(emotion_audio(reference)[0])
        _, quantized = semantic.codec.quantize(spk)
        ref_mel = speech.mel(clip.wav_22k.to(device))
        style = speech.style(clip.wav_16k.to(device))
        prompt = speech.s2mel.models["length_regulator"](quantized, ylens=torch.tensor([ref_mel.shape[2]], device=device), n_quantizers=3, f0=None)[0]
        max_codes = int(max_new_tokens or options.get("max_mel_tokens") or 1500)
        decoded = decode(gpt, speaker_latents(gpt, spk), emotion_vectors(gpt, emo), ids, max_codes, sampling,
                         generator=torch.Generator().manual_seed(seed))
        n = len(decoded.codes)
        if n == 0:
            raise InternalError("IndexTTS2 stage gpt codes: the GPT stopped before its first code.")
        codes = torch.tensor([decoded.codes], dtype=torch.long, device=device)
        _expect("gpt codes", codes, (1, None))
        if int(codes.max()) >= SEMANTIC_CODES:
            raise InternalError(f"IndexTTS2 stage gpt codes: {n} codes, largest {int(codes.max())}.")
        latent = decoded.latents
        _expect("gpt latents", latent, (1, n, gpt.model_dim))
        content = semantic.embed_codes(codes) + speech.s2mel.models["gpt_layer"](latent)
        cond = speech.s2mel.models["length_regulator"](content, ylens=(torch.tensor([n], device=device) * 1.72).long(), n_quantizers=3, f0=None)[0]
        both = torch.cat([prompt, cond], dim=1)
        mel = speech.s2mel.models["cfm"].inference(both, torch.tensor([both.shape[1]], device=device), ref_mel, style, None,
                                                   int(options.get("diffusion_steps") or DIFFUSION_STEPS),
                                                   inference_cfg_rate=CFG_RATE)[:, :, ref_mel.shape[-1]:]
        _expect("s2mel mel", mel, (1, speech.mel_args["num_mels"], None))
        audio = torch.clamp(speech.bigvgan(mel.float()).squeeze(1), -1.0, 1.0)
        _expect("bigvgan wav", audio, (1, mel.shape[2] * speech.mel_args["hop_size"]))
        return audio[0].float().cpu(), {
            "seconds": round(audio.shape[1] / SAMPLE_RATE, 3), "sample_rate": SAMPLE_RATE, "speech_tokens": n,
            "tokens": decoded.codes, "stopped": decoded.stopped,
            "mel_frames": int(mel.shape[2]), "wall_seconds": round(time.monotonic() - start, 2)}
