"""The generic chunker of streamed speech (`core.speech.stream`): where chunks start and end, how big they
grow, that the joins add up to exactly the whole utterance when every window agrees with it, the cross-fade,
and that speed resamples frames at the same positions in every window. The families' real vocoders are
compared streamed against whole in tests/test_serve_stream.py."""

from __future__ import annotations

import math

import torch

from core.speech.stream import (
    ChunkedVocoder,
    ChunkPlan,
    PositionalNoise,
    TokenWindow,
    WindowAudio,
    crossfade,
    fade_in,
    plan_sizes,
    stretch_frames,
    stretched_count,
)

SAMPLES_PER_TOKEN = 40


class TimelineVocoder:
    """A vocoder whose every window is exactly the utterance's own signal over the window's samples (a tone
    whose loudness each token sets): streamed audio can then differ from whole only by the chunker's arithmetic."""

    samples_per_token = SAMPLES_PER_TOKEN

    def __init__(self) -> None:
        self.windows: list[TokenWindow] = []

    def total_samples(self, tokens: int) -> int:
        return (tokens - 1) * SAMPLES_PER_TOKEN  # shorter than tokens × 40, as Griffin-Lim's and S3Gen's are

    def __call__(self, window: TokenWindow) -> WindowAudio:
        self.windows.append(window)
        start = window.start * SAMPLES_PER_TOKEN
        at = torch.arange(start, start + len(window.tokens) * SAMPLES_PER_TOKEN)
        loudness = torch.tensor(window.tokens, dtype=torch.float32).repeat_interleave(SAMPLES_PER_TOKEN) / 10
        return WindowAudio(torch.sin(at / 7.0) * (1 + loudness), start)


def _run(tokens: list[int], plan: ChunkPlan | None, tokens_per_second: float = 25.0) -> tuple[list[torch.Tensor], TimelineVocoder]:
    vocoder = TimelineVocoder()
    chunker = ChunkedVocoder(vocoder, plan, tokens_per_second)
    chunks = [chunk for token in tokens for chunk in chunker.add(token)] + chunker.finish()
    return chunks, vocoder


def test_chunks_grow_from_a_small_first_one_and_join_into_the_whole_utterance() -> None:
    tokens = [i % 7 for i in range(200)]
    [whole], _ = _run(tokens, None)
    chunks, vocoder = _run(tokens, ChunkPlan())
    sizes = plan_sizes(ChunkPlan(), 25.0, SAMPLES_PER_TOKEN)
    assert (sizes.first, sizes.largest, sizes.context, sizes.lookahead) == (12, 50, 12, 5)
    assert [c.numel() // SAMPLES_PER_TOKEN for c in chunks[:-1]] == [12, 24, 48, 50, 50]
    assert torch.cat(chunks).numel() == whole.numel() == 199 * SAMPLES_PER_TOKEN
    assert torch.allclose(torch.cat(chunks), whole, atol=1e-5)
    # each window reaches `context` tokens back and `lookahead` ahead; the last ends the utterance
    assert [(w.start, w.start + len(w.tokens), w.final) for w in vocoder.windows] == [
        (0, 17, False), (0, 41, False), (24, 89, False), (72, 139, False), (122, 189, False), (172, 200, True)]


def test_the_first_chunk_comes_once_its_tokens_and_the_lookahead_are_there() -> None:
    vocoder = TimelineVocoder()
    chunker = ChunkedVocoder(vocoder, ChunkPlan(), 25.0)
    ready = [len(chunker.add(1)) for _ in range(20)]
    assert ready.index(1) == 16 and sum(ready) == 1  # token 17 (12 + 5 lookahead) brings the first chunk


def test_a_short_utterance_is_one_chunk_and_no_tokens_are_none() -> None:
    chunks, vocoder = _run([3, 4, 5], ChunkPlan())
    assert len(chunks) == 1 and chunks[0].numel() == 2 * SAMPLES_PER_TOKEN and vocoder.windows[0].final
    assert _run([], ChunkPlan())[0] == []


def test_the_cross_fade_weights_sum_to_one_and_blend_the_tail_into_the_head() -> None:
    weights = fade_in(64)
    assert torch.all(weights > 0) and torch.all(weights < 1) and torch.all(weights[1:] > weights[:-1])
    assert torch.allclose(weights + weights.flip(0), torch.ones(64))
    head, tail = torch.ones(100), torch.zeros(64)
    blended = crossfade(tail, head)
    assert torch.allclose(blended[:64], weights) and torch.equal(blended[64:], head[64:])
    assert torch.allclose(crossfade(torch.full((64,), 0.3), torch.full((100,), 0.3)), torch.full((100,), 0.3))


def test_speed_takes_frames_at_the_same_positions_in_every_window() -> None:
    frames = torch.arange(40, dtype=torch.float32)[:, None].repeat(1, 3)
    for speed in (0.5, 0.75, 1.5, 2.0):
        whole, first = stretch_frames(frames, 0, speed)
        assert first == 0 and whole.shape[0] == stretched_count(40, speed)
        assert torch.allclose(whole[:, 0], torch.arange(whole.shape[0]) * speed)
        part, k0 = stretch_frames(frames[13:31], 13, speed)
        assert k0 == math.ceil(13 / speed) and torch.allclose(part, whole[k0 : k0 + part.shape[0]])
    assert stretch_frames(frames, 5, 1.0) == (frames, 5)


def test_positional_noise_is_the_same_at_the_same_frame_whichever_window_asks() -> None:
    noise = PositionalNoise(4, seed=3)
    late = noise.frames(300, 310).clone()
    assert torch.equal(PositionalNoise(4, seed=3).frames(0, 600)[:, 300:310], late)
    assert not torch.equal(PositionalNoise(4, seed=4).frames(300, 310), late)
