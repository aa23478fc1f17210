"""Chatterbox's published feature models: the S3 speech tokenizer and the VoiceEncoder.

The S3 tokenizer's weights are the `tokenizer.*` tensors of `s3gen.pt`; its shape (layers from the
keys, width from the shapes) is read from them, so a reduced test model and the published one load
through the same code. `batch_features` gives, per clip, the S3 speech tokens of the whole clip read
at 16 kHz (25 tokens/s, 6561 codes) and its voice prompt. The voice prompt — the conditioning prompt
tokens and the VoiceEncoder's 256-d embedding — has ONE maker for the feature cache, both speakers
and so the published call an export speaks through: `reference_audio` prepares the clip as the
published `prepare_conditionals` prepares a reference (read at its own rate, resampled to S3Gen's
24 kHz, Turbo's loudness normalised there, resampled to 16 kHz), `voice_prompts` tokenises its first
seconds and embeds it, each family with its `VoicePrompt` (the multilingual release: 6 s, 150 tokens;
Turbo: 15 s, 375 tokens, −27 LUFS).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.errors import InputError

S3_SR = 16_000
S3GEN_SR = 24_000
PROMPT_TOKENS = 150
PROMPT_SECONDS = 6
S3_HEAD_DIM = 64


@dataclass(frozen=True)
class VoicePrompt:
    """How a family's published `prepare_conditionals` makes the voice prompt of a reference: the first
    `seconds` at 16 kHz tokenised with `max_len=tokens`, after `norm_loudness` at 24 kHz when `loudness`."""

    seconds: int
    tokens: int
    loudness: bool = False


#: the multilingual release's (`ChatterboxMultilingualTTS.ENC_COND_LEN` = 6 s, T3's `speech_cond_prompt_len` 150)
MULTILINGUAL_PROMPT = VoicePrompt(PROMPT_SECONDS, PROMPT_TOKENS)


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Return the state dict of a published weights file, read by `core.checkpoint.load_checkpoint`."""
    from core.checkpoint import load_checkpoint

    return load_checkpoint(path).state_dict


def build_s3_tokenizer(n_state: int, n_layer: int) -> Any:
    """Return the published `S3Tokenizer` class at `n_state` width and `n_layer` blocks.

    (`S3Tokenizer.__init__` drops its `config` argument, so the V2 base is initialised with the
    config and the subclass's mel filterbank and window are registered as it registers them.)
    """
    from chatterbox.models.s3tokenizer.s3tokenizer import S3Tokenizer, _fb
    from s3tokenizer.model_v2 import ModelConfig, S3TokenizerV2

    tokenizer = S3Tokenizer.__new__(S3Tokenizer)
    config = ModelConfig(n_audio_state=n_state, n_audio_head=max(1, n_state // S3_HEAD_DIM), n_audio_layer=n_layer)
    S3TokenizerV2.__init__(tokenizer, "speech_tokenizer_v2_25hz", config)
    tokenizer.n_fft = 400
    filters = _fb(n_freqs=tokenizer.n_fft // 2 + 1, n_mels=config.n_mels, sample_rate=S3_SR, f_min=0,
                  f_max=S3_SR // 2, norm="slaney", mel_scale="slaney").T
    tokenizer.register_buffer("_mel_filters", filters.float())
    tokenizer.register_buffer("window", torch.hann_window(tokenizer.n_fft))
    return tokenizer


def s3_tokenizer_from_s3gen(state: dict[str, torch.Tensor], source: Path) -> Any:
    """Return the S3 tokenizer loaded strictly from the `tokenizer.*` tensors of an S3Gen state dict.

    Raises InputError when they are absent or do not fit the class.
    """
    prefix = "tokenizer."
    sub = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    width_key = "encoder.blocks.0.attn.query.weight"
    if width_key not in sub:
        raise InputError(f"{source}: no S3 tokenizer weights ({prefix}{width_key} missing); is it Chatterbox's s3gen file?")
    n_layer = len({k.split(".")[2] for k in sub if k.startswith("encoder.blocks.")})
    tokenizer = build_s3_tokenizer(int(sub[width_key].shape[0]), n_layer)
    missing, unexpected = tokenizer.load_state_dict(sub, strict=False)
    missing = [k for k in missing if k not in tokenizer.ignore_state_dict_missing]
    if missing or unexpected:
        raise InputError(f"{source}: S3 tokenizer weights do not fit (missing {missing[:3]}, unexpected {unexpected[:3]}).")
    return tokenizer.eval()


def load_voice_encoder(path: Path) -> Any:
    """Return the published `VoiceEncoder` loaded strictly from `path`. Raises InputError when it does not fit."""
    from chatterbox.models.voice_encoder import VoiceEncoder

    encoder = VoiceEncoder()
    try:
        encoder.load_state_dict(load_tensors(path))
    except RuntimeError as exc:
        raise InputError(f"{path}: not Chatterbox's VoiceEncoder ({str(exc).splitlines()[0]}).") from exc
    return encoder.eval()


@dataclass
class FeatureModels:
    """The loaded feature models."""

    s3_tokenizer: Any
    voice_encoder: Any

    def to(self, device: torch.device) -> "FeatureModels":
        """Move both models to `device`; return self."""
        self.s3_tokenizer.to(device)
        self.voice_encoder.to(device)
        return self


def load_feature_models(files: dict[str, Path]) -> FeatureModels:
    """Return the S3 tokenizer and VoiceEncoder from the published files ({role: path})."""
    s3gen = files["s3gen"]
    return FeatureModels(
        s3_tokenizer=s3_tokenizer_from_s3gen(load_tensors(s3gen), s3gen),
        voice_encoder=load_voice_encoder(files["voice_encoder"]),
    )


def reference_audio(wav: torch.Tensor, rate: int, prompt: VoicePrompt) -> tuple[np.ndarray, np.ndarray]:
    """Return the reference `wav` (mono, read at its own `rate`) at 24 kHz and 16 kHz as the published
    `prepare_conditionals` prepares it: resampled to S3Gen's 24 kHz with torchaudio's `resample`, normalised
    to −27 LUFS there by the published `ChatterboxTurboTTS.norm_loudness` when `prompt.loudness` (a clip too
    short to measure keeps its level), then resampled to 16 kHz for the S3 tokenizer and the VoiceEncoder."""
    from torchaudio.functional import resample

    wav24 = wav.reshape(1, -1).float()
    if rate != S3GEN_SR:
        wav24 = resample(wav24, orig_freq=rate, new_freq=S3GEN_SR)
    wav24 = wav24.squeeze(0).numpy()
    if prompt.loudness:
        from chatterbox.tts_turbo import ChatterboxTurboTTS

        wav24 = ChatterboxTurboTTS.norm_loudness(None, wav24, S3GEN_SR)  # `self` is not used by it
    wav16 = resample(torch.from_numpy(wav24).unsqueeze(0), orig_freq=S3GEN_SR, new_freq=S3_SR).squeeze(0).numpy()
    return wav24, wav16


@torch.no_grad()
def voice_prompts(models: FeatureModels, refs16: list[np.ndarray], prompt: VoicePrompt) -> list[dict[str, np.ndarray]]:
    """Return, per 16 kHz reference from `reference_audio`, {prompt (int, ≤ prompt.tokens), speaker_emb (float32
    [256])}: the first `prompt.seconds` tokenised with `max_len=prompt.tokens` and the VoiceEncoder's embedding,
    as `prepare_conditionals` makes them. The references go through the models together: the S3 tokenizer pads
    their mels and masks the padding in every convolution, FSMN memory and attention (`make_non_pad_mask` on the
    lengths), so each one's tokens are those it gets alone; the VoiceEncoder embeds each one's own fixed-length
    partials (no padding)."""
    refs = [np.asarray(r, dtype=np.float32) for r in refs16]
    tokens, lengths = models.s3_tokenizer.forward([r[: prompt.seconds * S3_SR] for r in refs], max_len=prompt.tokens)
    embeds = np.asarray(models.voice_encoder.embeds_from_wavs(refs, sample_rate=S3_SR), dtype=np.float32)
    return [{"prompt": tokens[i, : int(lengths[i])].cpu().numpy(), "speaker_emb": embeds[i]} for i in range(len(refs))]


@torch.no_grad()
def batch_features(models: FeatureModels, wavs16: list[torch.Tensor], refs16: list[np.ndarray],
                   prompt: VoicePrompt = MULTILINGUAL_PROMPT) -> list[dict[str, np.ndarray]]:
    """Return, per clip, {speech (int), prompt (int), speaker_emb (float32 [256])}: the S3 speech tokens of the
    clip read at 16 kHz (`wavs16`) and `voice_prompts` of its reference audio (`refs16`, `reference_audio`).
    The clips go through the S3 tokenizer together, masked as `voice_prompts` says."""
    speech, lengths = models.s3_tokenizer.forward([w.numpy().astype(np.float32) for w in wavs16])
    voices = voice_prompts(models, refs16, prompt)
    return [{"speech": speech[i, : int(lengths[i])].cpu().numpy(), **voices[i]} for i in range(len(wavs16))]
