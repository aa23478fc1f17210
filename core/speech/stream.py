"""Streamed vocoding: speech tokens turned into audio in chunks while the model is still generating them.

A model family gives one step, a `WindowVocoder`: the audio of a window of consecutive tokens
(`TokenWindow`) and where on the utterance's timeline that audio starts (`WindowAudio`).
`ChunkedVocoder` does the rest for every family: it takes the tokens one by one and, as soon as a
chunk's tokens and a little lookahead are there, vocodes a window reaching `context` tokens back
and `lookahead` tokens ahead, keeps the chunk's own span plus `fade` samples, and cross-fades those
samples with the next chunk's start (raised-cosine, the two weights summing to 1), so the joins do
not click. The first chunk is small (`ChunkPlan.first_s`), each later one `growth` times the last,
up to `max_s`. With no plan (`None`) it vocodes one window over every token once generation ends:
the whole-utterance audio. A family whose vocoder is exact token by token (a causal codec with its
streaming state, as CSM's Mimi) gives an `ExactStream` instead, used in place of the chunker.

Chunk boundaries sit at token `i` → sample `round(i × samples_per_token)`, and the last chunk ends
at the vocoder's `total_samples(n)`, so a streamed utterance is exactly as long as the whole one of
the same tokens; the samples differ where a window saw less context than the whole utterance
(docs/streaming.md gives the measured difference per family).

`stretch_frames` resamples feature frames for `speed` (the same positions in every window), and
`PositionalNoise` gives a diffusion decoder the same noise at the same frame in every window, and
`seeded` keeps a vocoder's other random draws apart from the token sampling's.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol

import torch


@dataclass(frozen=True)
class ChunkPlan:
    """How a stream is cut, in seconds of speech: the first chunk, the growth factor and the largest chunk;
    the context vocoded again before a chunk, the lookahead waited for after it, and the cross-fade."""

    first_s: float = 0.5
    growth: float = 2.0
    max_s: float = 2.0
    context_s: float = 0.5
    lookahead_s: float = 0.2
    fade_s: float = 0.04


@dataclass(frozen=True)
class TokenWindow:
    """Consecutive tokens to vocode: the index of the first in the utterance, the tokens, one extra per
    token where the family's vocoder needs one (IndexTTS2's GPT latents; else empty), whether the window
    ends the utterance, and the sample from which its audio is emitted (its first `fade` samples
    cross-faded with the window before)."""

    start: int
    tokens: list[int]
    extras: list[Any]
    final: bool
    emit_start: int = 0
    fade: int = 0


@dataclass(frozen=True)
class WindowAudio:
    """The audio of one window (float32, CPU) and the sample of the utterance's timeline where it starts."""

    samples: torch.Tensor
    start: int


class WindowVocoder(Protocol):
    """A family's "vocode these tokens" step for one utterance (it may keep state between windows)."""

    #: samples of the utterance's timeline per token (speed included)
    samples_per_token: float

    def total_samples(self, tokens: int) -> int:
        """Return the length in samples of the whole utterance of `tokens` tokens."""
        ...

    def __call__(self, window: TokenWindow) -> WindowAudio:
        """Return the audio of `window`."""
        ...


class ExactStream(Protocol):
    """A streaming vocoder with `ChunkedVocoder`'s interface whose chunks join into the whole utterance's audio."""

    chunks: int

    def add(self, token: int, extra: Any) -> list[torch.Tensor]:
        """Take the next token and its extra (None where the family has none); return the audio now ready."""
        ...

    def finish(self) -> list[torch.Tensor]:
        """Return the audio left once generation has ended."""
        ...


def fade_in(length: int) -> torch.Tensor:
    """Return the raised-cosine fade-in weights [length] (0 → 1); the fade-out is 1 minus them."""
    return 0.5 - 0.5 * torch.cos(math.pi * (torch.arange(length, dtype=torch.float32) + 0.5) / length)


def crossfade(tail: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
    """Return `head` with its first len(tail) samples cross-faded from `tail` (the earlier window's audio)."""
    n = min(tail.numel(), head.numel())
    if n == 0:
        return head
    weights = fade_in(n)
    out = head.clone()
    out[:n] = tail[:n] * (1.0 - weights) + head[:n] * weights
    return out


def _span(audio: WindowAudio, start: int, stop: int) -> torch.Tensor:
    """Return the samples [start, stop) of the utterance's timeline from `audio`, zeros where it has none."""
    out = torch.zeros(max(0, stop - start))
    lo, hi = max(start, audio.start), min(stop, audio.start + audio.samples.numel())
    if hi > lo:
        out[lo - start : hi - start] = audio.samples[lo - audio.start : hi - audio.start].float().cpu()
    return out


@dataclass
class _Sizes:
    first: int
    growth: float
    largest: int
    context: int
    lookahead: int
    fade: int


def plan_sizes(plan: ChunkPlan, tokens_per_second: float, samples_per_token: float) -> _Sizes:
    """Return `plan` in tokens (chunks, context, lookahead) and samples (fade, at most half the lookahead's audio)."""
    first = max(1, round(plan.first_s * tokens_per_second))
    lookahead = max(2, math.ceil(plan.lookahead_s * tokens_per_second))
    fade = min(round(plan.fade_s * tokens_per_second * samples_per_token), int(lookahead * samples_per_token / 2),
               int(first * samples_per_token))
    return _Sizes(first, max(1.0, plan.growth), max(first, round(plan.max_s * tokens_per_second)),
                  max(0, round(plan.context_s * tokens_per_second)), lookahead, max(0, fade))


@dataclass
class ChunkedVocoder:
    """Takes one utterance's tokens as they are generated and returns its audio in chunks (see the module)."""

    vocoder: WindowVocoder
    plan: ChunkPlan | None
    tokens_per_second: float
    tokens: list[int] = field(default_factory=list)
    extras: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sizes = plan_sizes(self.plan, self.tokens_per_second, self.vocoder.samples_per_token) if self.plan else None
        self._chunk = self.sizes.first if self.sizes else 0
        self._boundary = self._chunk  # the token the next chunk ends at
        self._done = 0                # the token the last chunk ended at
        self._emitted = 0             # samples emitted so far
        self._tail: torch.Tensor | None = None
        self.chunks = 0

    def add(self, token: int, extra: Any = None) -> list[torch.Tensor]:
        """Take the next token (and its extra); return the chunks now ready (often none)."""
        self.tokens.append(int(token))
        if extra is not None:
            self.extras.append(extra)
        ready = []
        while self.sizes and len(self.tokens) >= self._boundary + self.sizes.lookahead:
            ready.append(self._emit(self._boundary, final=False))
            self._chunk = min(self.sizes.largest, round(self._chunk * self.sizes.growth))
            self._boundary += self._chunk
        return ready

    def finish(self) -> list[torch.Tensor]:
        """Return the last chunk (every token left) once generation has ended; none without tokens."""
        return [self._emit(len(self.tokens), final=True)] if self.tokens else []

    def _emit(self, end: int, final: bool) -> torch.Tensor:
        fade = self.sizes.fade if self.sizes else 0
        first = max(0, self._done - self.sizes.context) if self.sizes else 0
        last = len(self.tokens) if final else min(len(self.tokens), end + self.sizes.lookahead)
        window = TokenWindow(first, self.tokens[first:last], self.extras[first:last], final, self._emitted, fade)
        audio = self.vocoder(window)
        stop = self.vocoder.total_samples(len(self.tokens)) if final else round(end * self.vocoder.samples_per_token)
        stop = max(stop, self._emitted)
        piece = _span(audio, self._emitted, stop + (0 if final else fade))
        if self._tail is not None:
            piece = crossfade(self._tail, piece)
        out, self._tail = piece[: stop - self._emitted], None if final else piece[stop - self._emitted :]
        self._emitted, self._done = stop, end
        self.chunks += 1
        return out


def stretch_frames(frames: torch.Tensor, first: int, speed: float) -> tuple[torch.Tensor, int]:
    """Return feature `frames` [T, C] (utterance frames first … first+T−1) resampled for `speed`, and the
    utterance's output frame index of the first row: output frame k lies at input position k × speed
    (linear interpolation), the same positions in every window. Speed 1 returns `frames` unchanged."""
    if speed == 1.0 or frames.shape[0] == 0:
        return frames, first
    k0 = math.ceil(first / speed - 1e-9)
    k1 = math.floor((first + frames.shape[0] - 1) / speed + 1e-9)
    if k1 < k0:
        return frames[:0], k0
    position = torch.arange(k0, k1 + 1, dtype=torch.float64) * speed - first
    low = position.floor().long().clamp(0, frames.shape[0] - 1)
    high = (low + 1).clamp(max=frames.shape[0] - 1)
    weight = (position - low).clamp(0, 1).to(frames.dtype).unsqueeze(1).to(frames.device)
    low, high = low.to(frames.device), high.to(frames.device)
    return frames[low] * (1 - weight) + frames[high] * weight, k0


def stretched_count(frames: int, speed: float) -> int:
    """Return how many output frames `stretch_frames` makes of an utterance of `frames` frames at `speed`."""
    return 0 if frames == 0 else math.floor((frames - 1) / speed + 1e-9) + 1


class PositionalNoise:
    """Gaussian noise [channels, frames] for each frame position of one utterance, drawn in order from
    `seed` (the same values at the same frame, whichever window asks)."""

    BLOCK = 256

    def __init__(self, channels: int, seed: int) -> None:
        self.channels = channels
        self._generator = torch.Generator().manual_seed(seed)
        self._noise = torch.zeros(channels, 0)

    def frames(self, start: int, stop: int) -> torch.Tensor:
        """Return the noise of frames [start, stop) (float32, CPU)."""
        while self._noise.shape[1] < stop:
            block = torch.randn(self.channels, self.BLOCK, generator=self._generator)
            self._noise = torch.cat([self._noise, block], dim=1)
        return self._noise[:, start:stop]


@contextmanager
def seeded(seed: int, device: str | torch.device = "cpu") -> Iterator[None]:
    """Run a block with torch's global generator seeded to `seed` and restored afterwards (the CPU's and
    `device`'s CUDA one), so a vocoder's random draws neither depend on nor disturb the sampling of the
    tokens between its windows."""
    device = torch.device(device)
    devices = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
