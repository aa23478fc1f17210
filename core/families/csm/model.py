"""Sesame CSM as LinguaForge builds it: the published `CsmForConditionalGeneration` of transformers, sized
from the model folder's own `config.json` with the text rows from the tokenizer.

`CsmModelConfig` is the folder's `CsmConfig` as a dict (backbone, depth decoder and Mimi codec: CSM-1B or a
reduced model, the same code) plus `text_vocab_size` = the tokenizer's size, the only number LinguaForge
changes. `build_csm` returns `LinguaForgeCsm` — the published class with a training forward
(`model(batch=…)`, the losses of `core.families.csm.layout`) — whose `embed_text_tokens` is split into frozen
base rows and trainable new rows (`models.rows.SplitEmbedding`); CSM has no text head (its `lm_head` scores
the first codebook), so the embedding is its only text tensor. Its state dict has the published class's module
names; a published `model.safetensors` (Mimi's original key layout, the tied codebook table left out) is
converted to them by transformers' own loading (`module_state_dict`), and `save_pretrained` converts back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from core.errors import InputError

CONFIG_NAME = "config.json"
#: a sample is a context segment (the speaker's prompt clip) and the target segment: each takes at most half
#: the backbone's positions; of a segment's half an eighth of the positions is its text, the rest its frames
SEGMENTS = 2
SEGMENT_EXTRA = 3  # begin-of-text, end-of-text, audio-eos around a segment's text ids and frames
#: the backbone's codebook table, tied to the depth decoder's: in the modules' state dict, not in a published file
TIED_TABLE = "backbone_model.embed_tokens.embed_audio_tokens.weight"


@dataclass
class CsmModelConfig:
    """The model folder's `CsmConfig` (`config`, a dict) at the tokenizer's `text_vocab_size`, the position
    limits of one segment's text and frames, and the run's `model.dropout` (None: the published rates)."""

    text_vocab_size: int
    config: dict[str, Any] = field(default_factory=dict)
    dropout: float | None = None

    @property
    def max_text_tokens(self) -> int:
        """Return the most text ids one segment may have (an eighth of its half of the positions)."""
        return self.positions // (SEGMENTS * 8)

    @property
    def max_speech_tokens(self) -> int:
        """Return the most frames one segment may have (the rest of its half of the positions)."""
        return self.positions // SEGMENTS - self.max_text_tokens - SEGMENT_EXTRA

    @property
    def positions(self) -> int:
        """Return the backbone's position limit (`max_position_embeddings`)."""
        return int(self.config.get("max_position_embeddings", 2048))

    @property
    def codebooks(self) -> int:
        """Return the Mimi codebooks per frame (`num_codebooks`)."""
        return int(self.config.get("num_codebooks", 32))

    def csm_config(self) -> Any:
        """Return the published `CsmConfig` at the grown size."""
        from transformers import CsmConfig

        return CsmConfig.from_dict({**self.config, "text_vocab_size": self.text_vocab_size})

    def to_dict(self) -> dict[str, Any]:
        """Return the config as JSON-ready data (recorded in checkpoint metadata)."""
        return {"family": "csm", "text_vocab_size": self.text_vocab_size, "config": self.config, "dropout": self.dropout,
                "max_text_tokens": self.max_text_tokens, "max_speech_tokens": self.max_speech_tokens}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CsmModelConfig":
        """Return the config recorded by `to_dict`."""
        return cls(int(data["text_vocab_size"]), dict(data.get("config") or {}), data.get("dropout"))


def read_folder_config(model_dir: Path) -> dict[str, Any]:
    """Return the `config.json` of a CSM model folder as a dict (transformers' keys, `model_type` csm).

    Raises InputError naming the file when it is missing, not JSON or not a CSM config.
    """
    path = Path(model_dir) / CONFIG_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"{path}: missing; a CSM folder (sesame/csm-1b layout) holds config.json beside "
                         "model.safetensors. Point model_dir at that folder; nothing is downloaded.") from exc
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable JSON config ({str(exc).splitlines()[0]}); copy config.json from "
                         "the published folder again.") from exc
    if not isinstance(data, dict) or data.get("model_type") != "csm":
        kind = data.get("model_type") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"{path}: model_type {kind!r}, not 'csm'; point model_dir at a Sesame CSM folder "
                         "(sesame/csm-1b layout).")
    return data


def published_keys_loaded(cls: Any, config: Any, state_dict: Mapping[str, torch.Tensor], source: str) -> nn.Module:
    """Return the published class `cls` (`CsmForConditionalGeneration`, `MimiModel`) of `config` with `state_dict`
    loaded strictly through transformers' own key conversion: a published file keeps Mimi's original flat key
    layout and leaves out the tied codebook table, which `from_pretrained` maps onto the modules.

    Raises InputError naming `source` and the first missing, unexpected or mis-shaped tensor.
    """
    model, info = cls.from_pretrained(None, config=config, state_dict=dict(state_dict), output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        if info.get(kind):
            first = sorted(str(k) for k in info[kind])[0]
            raise InputError(f"{source}: its tensors do not fit the CSM config.json ({kind.replace('_', ' ')}: {first}, "
                             f"{len(info[kind])} in all); use the model.safetensors of that folder or a checkpoint made "
                             "from it.")
    return model


def module_state_dict(config: Any, state_dict: Mapping[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """Return `state_dict` under the module names of `CsmForConditionalGeneration` of `config` (the published
    class's `state_dict()` keys, which LinguaForge checkpoints keep): a published file is converted as
    `from_pretrained` converts it, a state dict already in module names is returned as it is."""
    from transformers import CsmForConditionalGeneration

    if TIED_TABLE in state_dict:
        return dict(state_dict)
    return published_keys_loaded(CsmForConditionalGeneration, config, state_dict, source).state_dict()


def _trainable_class() -> type:
    from transformers import CsmForConditionalGeneration

    class LinguaForgeCsm(CsmForConditionalGeneration):
        """The published CSM with a training forward: `model(batch=…)` returns the layout's losses."""

        def forward(self, batch: dict[str, torch.Tensor] | None = None, **kwargs: Any) -> Any:  # noqa: D102
            if batch is None:
                return super().forward(**kwargs)
            from core.families.csm.layout import batch_losses

            return batch_losses(self, batch)

    return LinguaForgeCsm


_TRAINABLE: type | None = None


def build_csm(config: CsmModelConfig, frozen_rows: int = 0) -> nn.Module:
    """Return a random-initialised `LinguaForgeCsm` of `config` whose first `frozen_rows` text rows are frozen
    buffers (every dropout at `config.dropout` when set)."""
    global _TRAINABLE
    from core.families.base import set_dropout
    from models.rows import SplitEmbedding

    if _TRAINABLE is None:
        _TRAINABLE = _trainable_class()
    model = _TRAINABLE(config.csm_config())
    if config.dropout is not None:
        set_dropout(model, config.dropout)
    model.embed_text_tokens = SplitEmbedding.from_module(model.embed_text_tokens, frozen_rows)
    return model
