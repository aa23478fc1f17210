"""Mimi decoded frame by frame (`core.families.csm.mimi_stream.MimiFrameDecoder`) against the published whole decode,
on the reduced random-initialised Mimi of tests/csm_helpers.py (float32, CPU): each frame gives the config's frame
size in samples, and the frames' audio joined is `mimi.decode` of all of them — over more frames than the decoder
transformer's sliding window too — with nothing carried from one utterance to the next decoder."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from core.errors import InputError
from core.families.csm.mimi_stream import MimiFrameDecoder
from tests.csm_helpers import CODEBOOK_SIZE, CODEBOOKS, reduced_mimi

torch.set_num_threads(2)
#: the largest |streamed − whole| sample allowed: float32 rounding (measured 1.47e-5 over 40 frames on this machine's
#: CPU, where the random Mimi's unclipped audio peaks at 16.9: 9e-7 of it; a frame decoded without its context, or a
#: missed overlap, is off by the audio's own size)
TOLERANCE = 5e-5


@pytest.fixture(scope="module")
def mimi() -> Any:
    return reduced_mimi()


def _codes(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, CODEBOOK_SIZE, (CODEBOOKS, frames), generator=torch.Generator().manual_seed(seed))


def _streamed(decoder: MimiFrameDecoder, codes: torch.Tensor) -> list[torch.Tensor]:
    return [decoder.decode(codes[:, i]) for i in range(codes.shape[1])]


@torch.inference_mode()
def _whole(mimi: Any, codes: torch.Tensor) -> torch.Tensor:
    return mimi.decode(codes[None]).audio_values[0, 0]


def test_frames_decoded_one_by_one_join_into_the_whole_decode_past_the_sliding_window(mimi: Any) -> None:
    """40 frames are 80 steps of the decoder transformer, past its sliding window of 50: each frame gives 1,920
    samples (24 kHz / 12.5 frames a second, from the config) and the joined audio is the whole decode's."""
    frames = 40
    assert mimi.config.frame_size == 1920 and 2 * frames > mimi.config.sliding_window
    codes = _codes(frames, 0)
    pieces = _streamed(MimiFrameDecoder(mimi), codes)
    whole = _whole(mimi, codes)
    assert [len(piece) for piece in pieces] == [1920] * frames and len(whole) == 1920 * frames
    assert whole.abs().max() > 0.05  # audio, not silence: the comparison can fail
    difference = (torch.cat(pieces) - whole).abs().max().item()
    print(f"\n{frames} frames, frame by frame vs whole: max |difference| {difference:.3g} (peak {whole.abs().max():.3f})")
    assert difference <= TOLERANCE


def test_a_fresh_decoder_carries_nothing_from_the_utterance_before(mimi: Any) -> None:
    """A second utterance on a fresh decoder is its own whole decode, after a first one decoded; the same frames fed
    on after the first utterance (the state carried on) sound different, so the state is real."""
    first, second = _codes(12, 1), _codes(12, 2)
    carried = MimiFrameDecoder(mimi)
    _streamed(carried, first)
    fresh = torch.cat(_streamed(MimiFrameDecoder(mimi), second))
    assert (fresh - _whole(mimi, second)).abs().max() <= TOLERANCE
    assert (torch.cat(_streamed(carried, second)) - fresh).abs().max() > 0.01


@pytest.mark.parametrize(("change", "named"), [({"pad_mode": "replicate"}, "pad_mode='replicate'"),
                                               ({"use_causal_conv": False}, "causal=False")])
def test_a_codec_the_frame_rules_do_not_cover_is_refused(change: dict[str, Any], named: str) -> None:
    with pytest.raises(InputError, match=f"codec_config: .*{named}"):
        MimiFrameDecoder(reduced_mimi(**change))
