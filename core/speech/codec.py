"""The embedded discrete speech codec: log-mel frames ↔ codebook indices, Griffin-Lim back to audio.

`SpeechCodec.encode` maps each log-mel frame (80 bins by default) to its nearest codebook
entry; `decode` looks the entries up, inverts the mel scale (torchaudio InverseMelScale) and
recovers a waveform with GriffinLim. The codebook is learned by mini-batch k-means
(`core.speech.kmeans`) over clips' log-mel frames (`fit_codec`; `core.data.codec_training` picks a
manifest's train split). A codec file (`.pt`, loaded with weights_only) holds the config, the
codebook and a fingerprint over both.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torchaudio

from core.errors import InputError
from core.fsutil import atomic_write

CODEC_FORMAT = "linguaforge-codec"
CODEC_VERSION = 1
LOG_FLOOR = 1e-5


@dataclass(frozen=True)
class CodecConfig:
    """Feature and vocoder settings; every field enters the fingerprint."""

    sample_rate: int = 16000
    n_fft: int = 1024
    hop_length: int = 256
    n_mels: int = 80
    f_min: float = 0.0
    f_max: float | None = None
    codebook_size: int = 1024
    griffin_lim_iters: int = 32

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CodecConfig":
        """Return the config stored in a codec file; raises InputError on unknown keys."""
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise InputError(f"codec config has unknown keys: {', '.join(sorted(unknown))}")
        return cls(**data)


class MelFrontend:
    """Log-mel analysis: waveform [samples] → log-mel [frames, n_mels].

    torchaudio's `MelSpectrogram(power=1.0)` (centred reflect-padded Hann STFT, HTK mel filters without
    norm), with the magnitude taken as sqrt(re² + im²) instead of the complex abs, which costs more CPU
    than the FFT (same values within float rounding; bench/preprocess.py).
    """

    def __init__(self, config: CodecConfig) -> None:
        self.config = config
        self.window = torch.hann_window(config.n_fft)
        self.filters = torchaudio.functional.melscale_fbanks(
            config.n_fft // 2 + 1, config.f_min, config.f_max or config.sample_rate / 2, config.n_mels, config.sample_rate
        )

    def __call__(self, wav: torch.Tensor) -> torch.Tensor:
        c = self.config
        with torch.no_grad():
            spec = torch.stft(wav.to(torch.float32).reshape(-1), c.n_fft, c.hop_length, window=self.window,
                              center=True, pad_mode="reflect", return_complex=True)
            parts = torch.view_as_real(spec)
            magnitude = (parts[..., 0].square() + parts[..., 1].square()).sqrt_()
            return torch.log((magnitude.T @ self.filters).clamp_min_(LOG_FLOOR))


class SpeechCodec:
    """A codebook over log-mel frames with Griffin-Lim resynthesis."""

    def __init__(self, config: CodecConfig, codebook: torch.Tensor, meta: dict[str, Any] | None = None) -> None:
        if tuple(codebook.shape) != (config.codebook_size, config.n_mels):
            raise InputError(
                f"codebook shape {tuple(codebook.shape)} does not match the config "
                f"({config.codebook_size}, {config.n_mels})."
            )
        self.config = config
        self.codebook = codebook.detach().to(torch.float32).cpu().contiguous()
        self._codebook_sq = (self.codebook**2).sum(dim=1)
        self.meta = dict(meta or {})
        self.frontend = MelFrontend(config)
        self._inverse: tuple[torch.nn.Module, torch.nn.Module] | None = None
        self.fingerprint = codec_fingerprint(config, self.codebook)

    sample_rate = property(lambda self: self.config.sample_rate, doc="Audio sample rate in Hz.")
    hop_length = property(lambda self: self.config.hop_length, doc="Samples per frame.")
    n_mels = property(lambda self: self.config.n_mels, doc="Mel bins per frame.")
    codebook_size = property(lambda self: self.config.codebook_size, doc="Number of codes.")

    @property
    def frame_rate(self) -> float:
        """Frames (codes) per second of audio."""
        return self.config.sample_rate / self.config.hop_length

    def mel(self, wav: torch.Tensor) -> torch.Tensor:
        """Return the log-mel features [frames, n_mels] of a 1-D waveform at `sample_rate`."""
        return self.frontend(wav)

    def quantize(self, mel: torch.Tensor) -> torch.Tensor:
        """Return the nearest-codebook index (int64) for each row of `mel` [frames, n_mels] (the first on a tie).

        numpy's argmin picks the same index as torch's in a twentieth of its CPU time.
        """
        with torch.no_grad():
            distances = torch.addmm(self._codebook_sq, mel.to(torch.float32), self.codebook.T, alpha=-2.0)
        return torch.from_numpy(distances.numpy().argmin(axis=1).astype(np.int64, copy=False))

    def encode(self, wav: torch.Tensor) -> torch.Tensor:
        """Return the codes (LongTensor [frames]) of a 1-D waveform at `sample_rate`."""
        return self.quantize(self.mel(wav))

    def codes_to_mel(self, codes: torch.Tensor) -> torch.Tensor:
        """Return the log-mel frames [frames, n_mels] the codes stand for.

        Raises InputError when a code is outside 0..codebook_size-1.
        """
        codes = torch.as_tensor(codes, dtype=torch.long).reshape(-1)
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.codebook_size):
            raise InputError(f"codes must lie in 0..{self.codebook_size - 1}; got {int(codes.min())}..{int(codes.max())}.")
        return self.codebook[codes]

    def mel_to_wav(self, mel: torch.Tensor) -> torch.Tensor:
        """Return a waveform recovered from log-mel frames [frames, n_mels] by Griffin-Lim."""
        inverse_mel, griffin_lim = self._inverse_modules()
        with torch.no_grad():
            magnitude = torch.exp(mel.to(torch.float32)).transpose(0, 1)
            linear = inverse_mel(magnitude).clamp_min(0.0)
            return griffin_lim(linear)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Return the waveform [samples] for codes [frames] (codebook lookup + Griffin-Lim)."""
        return self.mel_to_wav(self.codes_to_mel(codes))

    def _inverse_modules(self) -> tuple[torch.nn.Module, torch.nn.Module]:
        if self._inverse is None:
            c = self.config
            inverse_mel = torchaudio.transforms.InverseMelScale(
                n_stft=c.n_fft // 2 + 1, n_mels=c.n_mels, sample_rate=c.sample_rate, f_min=c.f_min, f_max=c.f_max
            )
            griffin_lim = torchaudio.transforms.GriffinLim(
                n_fft=c.n_fft, n_iter=c.griffin_lim_iters, hop_length=c.hop_length, power=1.0, rand_init=False
            )
            self._inverse = (inverse_mel, griffin_lim)
        return self._inverse

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the codec (config, codebook, fingerprint, meta) to `path` atomically; return it."""
        payload = {
            "format": CODEC_FORMAT,
            "version": CODEC_VERSION,
            "config": asdict(self.config),
            "codebook": self.codebook,
            "fingerprint": self.fingerprint,
            "meta": json.dumps(self.meta, default=str),
        }
        with atomic_write(path) as tmp:
            torch.save(payload, tmp)
        return Path(path)


def codec_fingerprint(config: CodecConfig, codebook: torch.Tensor) -> str:
    """Return the sha256 hex digest over the config (sorted JSON) and the float32 codebook bytes."""
    digest = hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode("utf-8"))
    digest.update(codebook.to(torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def load_codec(path: str | os.PathLike[str]) -> SpeechCodec:
    """Return the SpeechCodec stored at `path` (loaded with weights_only=True).

    Raises InputError when the file is missing, not a codec file, or its fingerprint does not
    match its contents.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: codec file not found. Train one with `codec train`.")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many unrelated types for a damaged file
        raise InputError(f"{path}: not a readable codec file ({exc.__class__.__name__}). Re-train or re-copy it.") from exc
    if not isinstance(payload, dict) or payload.get("format") != CODEC_FORMAT:
        raise InputError(f"{path}: not a LinguaForge codec file (no '{CODEC_FORMAT}' format tag).")
    codec = SpeechCodec(
        CodecConfig.from_dict(payload["config"]), payload["codebook"], json.loads(payload.get("meta") or "{}")
    )
    if codec.fingerprint != payload.get("fingerprint"):
        raise InputError(f"{path}: the codebook does not match its recorded fingerprint; the file is damaged.")
    return codec


def collect_frames(frontend: MelFrontend, clips: Sequence[Path], max_frames: int, seed: int = 0,
                   on_clip: Callable[[], None] = lambda: None) -> torch.Tensor:
    """Return up to `max_frames` log-mel frames [n, n_mels] from the clips' audio, sampled evenly; `on_clip` is
    called after each clip is read.

    Raises InputError when an audio file cannot be read.
    """
    from core.audio import read_audio

    frames = []
    for clip in clips:
        frames.append(frontend(read_audio(clip, frontend.config.sample_rate)[0]))
        on_clip()
    data = torch.cat(frames)
    if data.shape[0] > max_frames:
        keep = torch.randperm(data.shape[0], generator=torch.Generator().manual_seed(seed))[:max_frames]
        data = data[keep.sort().values]
    return data


def check_hop_length(hop_length: Any, name: str = "--hop-length") -> None:
    """Return None when `hop_length` is a whole number of samples from 1 to half the codec's frame, so
    Griffin-Lim's frames overlap and the codes can be decoded. Raises InputError naming `name` otherwise."""
    top = CodecConfig.n_fft // 2
    if isinstance(hop_length, bool) or not isinstance(hop_length, int) or not 1 <= hop_length <= top:
        raise InputError(f"{name} {hop_length!r}: choose 1 to {top} (half the {CodecConfig.n_fft}-sample frame), so "
                         "Griffin-Lim's frames overlap and the codes can be decoded.")


def fit_codec(
    clips: Sequence[Path],
    codebook_size: int = 1024,
    sample_rate: int = 16000,
    hop_length: int = 256,
    n_mels: int = 80,
    iterations: int = 100,
    batch_size: int = 4096,
    max_frames: int = 500_000,
    seed: int = 0,
    device: str | None = None,
) -> SpeechCodec:
    """Return a codec whose codebook is fit by mini-batch k-means on the log-mel frames of `clips`.

    k-means runs on CUDA when present. The codec's `meta` records the training statistics.
    Raises InputError for a codebook smaller than 2, a hop longer than half a frame, unreadable audio or too few frames.
    """
    from core.progress import Progress
    from core.speech.kmeans import fit_kmeans

    if codebook_size < 2:
        raise InputError(f"--codebook-size {codebook_size}: must be at least 2.")
    check_hop_length(hop_length)
    config = CodecConfig(sample_rate=sample_rate, hop_length=hop_length, n_mels=n_mels, codebook_size=codebook_size)
    progress = Progress("codec", total=len(clips) + iterations)  # each clip read, then each k-means iteration
    frames = collect_frames(MelFrontend(config), clips, max_frames, seed, on_clip=progress.update)
    result = fit_kmeans(frames, codebook_size, iterations=iterations, batch_size=batch_size, seed=seed, device=device,
                        on_iteration=progress.update)
    progress.finish()
    meta = {
        "train_clips": len(clips),
        "train_frames": int(frames.shape[0]),
        "inertia": round(result.inertia, 5),
        "dead_codes": result.dead,
        "iterations": result.iterations,
        "device": result.device,
        "seed": seed,
    }
    return SpeechCodec(config, result.centroids, meta)
