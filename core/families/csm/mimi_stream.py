"""Mimi decoded frame by frame, exactly: the folder's published decoder modules run with streaming state.

Mimi's decoder is causal end to end, so a frame's audio depends only on the frames up to it and the whole
decode can be cut into frames with no approximation. `MimiFrameDecoder` keeps, across calls, what each
published module would have seen of the frames before:

- the quantizer's dequantisation and the 1×1 projections act frame by frame (no state);
- each causal `MimiConv1d` (stride 1) holds its last `padding_total` input samples as its left context —
  zeros before the first frame, which is what the published causal constant padding puts there;
- each causal `MimiConvTranspose1d` (trim_right_ratio 1) overlap-adds: the previous call's last
  `kernel − stride` output samples (its bias removed, so it is counted once) are added to the new output's
  head, and the new output's last `kernel − stride` samples are held back;
- the decoder transformer carries its KV cache across frames (the cache and the mask follow the
  config's sliding window as in the whole decode);
- a `MimiResnetBlock` adds its (streamed) shortcut to its streamed convolutions; ELU acts sample by sample.

Only the published modules' own `conv`, quantizer and transformer are called: no weight is copied and no
layer re-implemented. A configuration these rules do not cover (non-causal convolutions, a padding mode
other than constant, a strided `MimiConv1d` in the decoder, a transposed convolution trimmed on the left)
is refused. Each frame gives `mimi.config.frame_size` samples; tests/test_csm_mimi_stream.py measures the
streamed audio against `mimi.decode` of all the frames.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from core.errors import InputError


def _refuse(what: str) -> InputError:
    return InputError(f"config.json codec_config: {what}; LinguaForge streams Mimi frame by frame only for the "
                      "published causal layout. Use the folder's published codec_config, or speak without streaming.")


class _CausalConv:
    """A causal stride-1 `MimiConv1d` that holds its last `padding_total` input samples between calls."""

    def __init__(self, layer: Any) -> None:
        if not layer.causal or layer.pad_mode != "constant" or layer.conv.stride[0] != 1:
            raise _refuse(f"a decoder convolution with causal={layer.causal}, pad_mode={layer.pad_mode!r}, "
                          f"stride={layer.conv.stride[0]}")
        self.conv, self.context = layer.conv, int(layer.padding_total)
        self.held: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        held = x.new_zeros(*x.shape[:2], self.context) if self.held is None else self.held
        x = torch.cat([held, x], dim=-1)
        self.held = x[..., x.shape[-1] - self.context:]
        return self.conv(x)


class _OverlapAdd:
    """A causal `MimiConvTranspose1d` (everything past the stride trimmed on the right) as an overlap-add."""

    def __init__(self, layer: Any) -> None:
        if not layer.causal or layer.padding_left != 0:
            raise _refuse(f"a transposed convolution with causal={layer.causal}, trim_right_ratio={layer.trim_right_ratio}")
        self.conv = layer.conv
        self.overlap = self.conv.kernel_size[0] - self.conv.stride[0]
        self.tail: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if self.tail is not None:
            y[..., : self.overlap] += self.tail
        cut = y.shape[-1] - self.overlap
        bias = 0.0 if self.conv.bias is None else self.conv.bias[:, None]
        self.tail = y[..., cut:] - bias
        return y[..., :cut]


class _ResidualBlock:
    """A `MimiResnetBlock`: its shortcut plus its block, each convolution streamed."""

    def __init__(self, block: Any) -> None:
        self.steps = [streamed(layer) for layer in block.block]
        self.shortcut = streamed(block.shortcut)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        hidden = x
        for step in self.steps:
            hidden = step(hidden)
        return self.shortcut(x) + hidden


def streamed(layer: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """Return `layer` of Mimi's SEANet decoder as a step that takes consecutive pieces of its input (ELU and
    identity as they are; convolutions and residual blocks with their state). Raises InputError for a layer
    this module cannot stream."""
    from torch import nn
    from transformers.models.mimi.modeling_mimi import MimiConv1d, MimiConvTranspose1d, MimiResnetBlock

    if isinstance(layer, MimiConv1d):
        return _CausalConv(layer)
    if isinstance(layer, MimiConvTranspose1d):
        return _OverlapAdd(layer)
    if isinstance(layer, MimiResnetBlock):
        return _ResidualBlock(layer)
    if isinstance(layer, (nn.ELU, nn.Identity)):
        return layer
    raise _refuse(f"a decoder layer {type(layer).__name__}")


class MimiFrameDecoder:
    """One utterance's frames → its audio, one frame at a time, as `mimi.decode` of all of them gives it.

    Also the exact streaming vocoder `core.families.base.SpeechStream` takes in place of a chunker: `add` decodes
    the frame given as the token's extra and returns its audio as one chunk; `finish` has nothing left."""

    def __init__(self, mimi: Any) -> None:
        from transformers import DynamicCache

        decoder = mimi.decoder
        self.mimi = mimi
        self.device = next(mimi.parameters()).device
        self.upsample = _OverlapAdd(decoder.upsample)
        self.transformer = decoder.decoder_transformer
        self.cache = DynamicCache(config=self.transformer.config)
        self.seanet = [streamed(layer) for layer in decoder.decoder_seanet.layers]
        self.chunks = 0

    @torch.inference_mode()
    def decode(self, frame: torch.Tensor) -> torch.Tensor:
        """Return the audio (float32, CPU) [the config's frame_size] of the next `frame` [codebooks] of Mimi codes."""
        hidden = self.upsample(self.mimi.quantizer.decode(frame.reshape(1, -1, 1).to(self.device)))
        hidden = self.transformer(hidden.transpose(1, 2), cache=self.cache, use_cache=True).last_hidden_state
        hidden = hidden.transpose(1, 2)
        for step in self.seanet:
            hidden = step(hidden)
        return hidden[0, 0].float().cpu()

    def add(self, token: int, extra: torch.Tensor) -> list[torch.Tensor]:
        """Return the audio of the frame `extra` (`token` is its first code) as one chunk."""
        self.chunks += 1
        return [self.decode(extra)]

    def finish(self) -> list[torch.Tensor]:
        """Return nothing: every frame's audio left with its frame."""
        return []
