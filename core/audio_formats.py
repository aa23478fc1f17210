"""The response formats of OpenAI's speech API as LinguaForge writes them: a waveform, whole or in chunks, to file bytes.

`AudioEncoder(format, sample_rate, streaming)` takes float32 chunks (`encode`) and returns the bytes
of one file as they are ready; `finish` returns the rest. Whole (`streaming=False`) it returns the
finished file at `finish`; streamed, each `encode` returns what the file has gained, and the
concatenation of every piece is the file:

- `wav`: 16-bit PCM at the model's rate; streamed, the RIFF and data sizes are 0xFFFFFFFF ("to the
  end of the file", as streamed wav is commonly written), whole the exact sizes.
- `pcm`: raw 16-bit little-endian mono samples at 24 kHz (OpenAI's pcm rate; resampled with soxr).
- `flac`: 16-bit FLAC at the model's rate (libsndfile); streamed, STREAMINFO says the length is
  unknown (total samples 0, as the FLAC format allows), which libsndfile's reader cannot read to its
  end (ffmpeg, flac and browsers do).
- `mp3`: constant-bitrate MPEG layer III at the model's rate (libsndfile with LAME); streamed, the first
  frame is the silent placeholder of the Xing header LAME fills in only when it can seek back.
- `opus`: Ogg Opus at 24 kHz (libsndfile; Opus takes 8, 12, 16, 24 or 48 kHz, so 22.05 kHz is resampled),
  an Ogg page every 20 ms so each chunk leaves at once.

`GrowingWav` is a wav file written the same way (`synthesize --stream`): `<output>.part` grows chunk by
chunk and becomes `<output>`, with its exact sizes, at the end.

`aac` cannot be written (`UNWRITABLE`): libsndfile has no AAC encoder and no package pinned here
brings one.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.fsutil import PARTIAL_SUFFIX, create_new

FORMATS = ("wav", "flac", "pcm", "mp3", "opus")
UNWRITABLE = {"aac": "libsndfile (soundfile) has no AAC encoder and no package pinned here brings one"}
MEDIA_TYPES = {"wav": "audio/wav", "flac": "audio/flac", "pcm": "audio/pcm", "mp3": "audio/mpeg", "opus": "audio/ogg"}
PCM_RATE = 24_000
OPUS_RATE = 24_000
MP3_COMPRESSION = 0.5  # libsndfile's compression level at constant bitrate: about 80 kbit/s mono
OGG_PAGE_LATENCY_MS = 20.0
_SFC_SET_OGG_PAGE_LATENCY_MS = 0x1302  # libsndfile ≥ 1.1 (sndfile.h); soundfile does not name it
_LIBSNDFILE = {"flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS")}


def output_rate(audio_format: str, sample_rate: int) -> int:
    """Return the sample rate `audio_format` is written at for a model of `sample_rate`."""
    return {"pcm": PCM_RATE, "opus": OPUS_RATE}.get(audio_format, int(sample_rate))


def wav_header(sample_rate: int, samples: int | None) -> bytes:
    """Return the 44-byte header of a mono 16-bit PCM wav of `samples` samples (None: sizes 0xFFFFFFFF)."""
    data = 0xFFFFFFFF if samples is None else 2 * samples
    riff = 0xFFFFFFFF if samples is None else 36 + data
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVE" + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, 2 * sample_rate, 2, 16)
            + b"data" + struct.pack("<I", data))


def pcm16(samples: np.ndarray) -> bytes:
    """Return float samples in [-1, 1] as 16-bit little-endian PCM bytes (clipped), as libsndfile rounds them."""
    return np.round(np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


class _Sink(io.RawIOBase):
    """The file libsndfile writes into: every byte kept; `take` returns what was appended since the last take.
    A write before the taken part (a header finished at close) changes only the kept copy."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self.position = 0
        self.taken = 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, chunk: Any) -> int:
        chunk = bytes(chunk)
        end = self.position + len(chunk)
        if end > len(self.data):
            self.data.extend(b"\0" * (end - len(self.data)))
        self.data[self.position : end] = chunk
        self.position = end
        return len(chunk)

    def read(self, size: int = -1) -> bytes:
        stop = len(self.data) if size is None or size < 0 else min(len(self.data), self.position + size)
        chunk = bytes(self.data[self.position : stop])
        self.position = stop
        return chunk

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: len(self.data)}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def take(self) -> bytes:
        chunk = bytes(self.data[self.taken :])
        self.taken = len(self.data)
        return chunk


class AudioEncoder:
    """One file of `audio_format` (one of FORMATS) for a waveform at `sample_rate`, fed in chunks (see the module).

    Raises ValueError for a format not in FORMATS.
    """

    def __init__(self, audio_format: str, sample_rate: int, streaming: bool = True) -> None:
        if audio_format not in FORMATS:
            raise ValueError(f"audio format {audio_format!r}: use one of {', '.join(FORMATS)}")
        self.format, self.streaming = audio_format, streaming
        self.rate = output_rate(audio_format, sample_rate)
        self._resampler = None
        if self.rate != sample_rate:
            import soxr

            self._resampler = soxr.ResampleStream(sample_rate, self.rate, 1, dtype="float32")
        self._samples = 0
        self._pcm: list[bytes] = []
        self._file: Any = None
        if audio_format in _LIBSNDFILE:
            self._file = self._open(*_LIBSNDFILE[audio_format])
        self._started = False

    def _open(self, container: str, subtype: str) -> Any:
        import soundfile as sf

        self._sink = _Sink()
        extra = {"compression_level": MP3_COMPRESSION, "bitrate_mode": "CONSTANT"} if self.format == "mp3" else {}
        handle = sf.SoundFile(self._sink, "w", samplerate=self.rate, channels=1, format=container, subtype=subtype, **extra)
        if self.format == "opus":
            from soundfile import _ffi, _snd

            latency = _ffi.new("double[1]", [OGG_PAGE_LATENCY_MS])
            _snd.sf_command(handle._file, _SFC_SET_OGG_PAGE_LATENCY_MS, latency, _ffi.sizeof(latency))
        return handle

    def encode(self, chunk: torch.Tensor | np.ndarray) -> bytes:
        """Take the next samples (float, mono, at the model's rate); return the bytes now ready (b"" when whole)."""
        samples = torch.as_tensor(chunk).detach().to(torch.float32).reshape(-1).cpu().numpy()
        if self._resampler is not None:
            samples = self._resampler.resample_chunk(samples)
        return self._write(samples)

    def finish(self) -> bytes:
        """Return the rest of the file (the whole file when not streaming)."""
        tail = self._write(self._resampler.resample_chunk(np.zeros(0, dtype="float32"), last=True)) if self._resampler else b""
        if self._file is not None:
            self._file.close()
            return tail + (self._sink.take() if self.streaming else bytes(self._sink.data))
        if self.streaming:
            return tail + self._header()
        body = b"".join(self._pcm)
        return (wav_header(self.rate, self._samples) if self.format == "wav" else b"") + body

    def _write(self, samples: np.ndarray) -> bytes:
        self._samples += samples.size
        if self._file is not None:
            if samples.size:
                self._file.write(samples)
            return self._sink.take() if self.streaming else b""
        data = pcm16(samples)
        if not self.streaming:
            self._pcm.append(data)
            return b""
        return self._header() + data

    def _header(self) -> bytes:
        """Return the streamed wav's header before its first bytes (once), else b""."""
        if self._started or self.format != "wav":
            return b""
        self._started = True
        return wav_header(self.rate, None)


def encode_whole(wav: torch.Tensor, sample_rate: int, audio_format: str) -> bytes:
    """Return `wav` (at `sample_rate`) as the bytes of one finished `audio_format` file. Raises ValueError
    for a format not in FORMATS."""
    encoder = AudioEncoder(audio_format, sample_rate, streaming=False)
    return encoder.encode(wav) + encoder.finish()


def partial_path(output: Path) -> Path:
    """Return where a streamed wav grows before it becomes `output` (`<output>.part`, one of `side_names`)."""
    return output.with_name(output.name + PARTIAL_SUFFIX)


class GrowingWav:
    """A 16-bit wav written chunk by chunk to `partial_path(path)`, flushed after each chunk so a reader can play
    it while it grows (its sizes say "to the end of the file"); `close` gives it its exact sizes and moves it to
    `path` (replacing it at once), `abort` removes it."""

    def __init__(self, path: Path, sample_rate: int) -> None:
        self.path, self.sample_rate = Path(path), int(sample_rate)
        self.part = partial_path(self.path)
        self._file = create_new(self.part)  # a link already there is replaced, never written through
        self._file.write(wav_header(self.sample_rate, None))
        self._file.flush()
        self.samples = 0

    def write(self, chunk: torch.Tensor) -> None:
        """Append `chunk` (float samples at `sample_rate`) and flush it."""
        samples = torch.as_tensor(chunk).detach().to(torch.float32).reshape(-1).cpu().numpy()
        self._file.write(pcm16(samples))
        self._file.flush()
        self.samples += samples.size

    def close(self) -> Path:
        """Write the exact sizes, move the file to `path` and return it."""
        import os

        self._file.seek(0)
        self._file.write(wav_header(self.sample_rate, self.samples))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.part, self.path)
        return self.path

    def abort(self) -> None:
        """Close and remove the partial file."""
        self._file.close()
        self.part.unlink(missing_ok=True)


class GrowingWavReader:
    """Follows a GrowingWav while it grows (`<path>.part`, then `path`): `read` returns the samples added
    since the last read as a small wav of their own, or None when there are none yet."""

    HEADER = 44

    def __init__(self, path: Path) -> None:
        self.path, self.part = Path(path), partial_path(Path(path))
        self.offset = self.HEADER
        self.samples = 0

    def read(self) -> bytes | None:
        """Return the new whole samples as wav bytes (16-bit mono at the file's rate), or None."""
        for source in (self.part, self.path):
            try:
                with open(source, "rb") as handle:
                    header = handle.read(self.HEADER)
                    handle.seek(self.offset)
                    data = handle.read()
            except FileNotFoundError:
                continue
            if len(header) < self.HEADER:
                return None
            data = data[: len(data) // 2 * 2]
            if not data:
                return None
            self.offset += len(data)
            self.samples += len(data) // 2
            return wav_header(struct.unpack("<I", header[24:28])[0], len(data) // 2) + data
        return None
