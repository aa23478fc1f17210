"""IndexTTS2's GPT (`indextts.gpt.model_v2.UnifiedVoice`) as LinguaForge sees it: the family's leaf module.

What lives here: the published folder's file names, reading the IndexTTS2 `config.yaml` (its
vocabulary size is checked and corrected by the one foreign-config gate, `target_config`), the backbone shape read
from a checkpoint's tensors, building `UnifiedVoice` at a tokenizer's size (V + 1 text rows,
the extra row last), strict loading of `gpt.pth`, growing the text rows for a larger
tokenizer, and the ONE text → ids function that features and synthesis share.

The published classes are imported lazily: `indextts` pulls in transformers and librosa. The family class
(`core.families.indextts.IndexTTSFamily`) and the family's other modules build on this one; it imports none of them.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from core.checkpoint import load_checkpoint
from core.errors import InputError
from core.families import get_family, rows_for
from core.families.rows import text_rows

#: IndexTTS2's text-row layout (keys, the one extra row at the end): the row arithmetic is `core.families.rows`'
ROWS = get_family("indextts")
START_TEXT, STOP_TEXT = 0, 1
SEMANTIC_CODES = 8192
SEMANTIC_CODES_PER_SECOND = 50  # w2v-BERT's 50 Hz frames, one semantic code each
START_MEL, STOP_MEL = 8192, 8193
#: the sequence layout training and every decoder share (core.families.indextts.layout); in checkpoints and exports
SEQUENCE_LAYOUT = {"family": "indextts", "version": 2}
SEMANTIC_LAYER = 17
CONDITIONING_LATENTS = 32
NORMALIZER_VERSION = "indextts2-2.1.1-charmap-cjk-upper-1"
CONFIG_NAME = "config.yaml"
GPT_NAME = "gpt.pth"
BPE_NAME = "bpe.model"
STATS_NAME = "wav2vec2bert_stats.pt"
PUBLISHED_FILES = (CONFIG_NAME, GPT_NAME, BPE_NAME, "s2mel.pth", STATS_NAME, "feat1.pt", "feat2.pt")
GPT_REQUIRED = ("model_dim", "heads", "layers", "max_text_tokens", "max_mel_tokens", "condition_module", "emo_condition_module")


# ---------------------------------------------------------------- config.yaml as a foreign config


def read_indextts_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return IndexTTS2's `config.yaml` as a dict.

    Read through the foreign-config gate (`core.families.target_config`), so it parses and declares
    one positive `gpt.number_text_tokens`. Raises InputError when the file is missing, does not
    parse, declares no or another vocabulary key, or lacks a `gpt:` entry `UnifiedVoice` is built
    from (naming the first missing one).
    """
    from core.families.target_config import read_target_config

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no IndexTTS2 config.yaml here; IndexTTS2 expects it at <model_dir>/{CONFIG_NAME}.")
    target = read_target_config(path)
    if target.family != "indextts" or target.key != "gpt.number_text_tokens":
        raise InputError(f"{path}: declares `{target.key}`, not `gpt.number_text_tokens`; this is not an IndexTTS2 config.yaml.")
    gpt = target.data["gpt"]
    for key in GPT_REQUIRED:
        if key not in gpt:
            raise InputError(f"{path}: `gpt.{key}` is missing; IndexTTS2's UnifiedVoice needs it.")
    return target.data


# ---------------------------------------------------------------- shape from tensors


def _count_indexed(keys: list[str], prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    found = {int(m.group(1)) for k in keys if (m := pattern.match(k))}
    return max(found) + 1 if found else 0


def _conformer_shape(state_dict: Mapping[str, torch.Tensor], prefix: str, declared: Mapping[str, Any]) -> dict[str, Any]:
    keys = list(state_dict)
    blocks = _count_indexed(keys, f"{prefix}.encoders.")
    ff = state_dict.get(f"{prefix}.encoders.0.feed_forward.w_1.weight")
    out = state_dict.get(f"{prefix}.after_norm.weight")
    if not blocks or ff is None or out is None:
        raise InputError(f"checkpoint has no {prefix}.encoders.* conformer blocks; this is not an IndexTTS2 gpt.pth.")
    shape = dict(declared)
    shape.update(num_blocks=blocks, linear_units=int(ff.shape[0]), output_size=int(out.shape[0]))
    return shape


def gpt_kwargs_from_state_dict(
    state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any], tokenizer_size: int
) -> dict[str, Any]:
    """Return `UnifiedVoice` keyword arguments: the backbone shape read from the tensors, V from the tokenizer.

    Layers and conformer blocks come from the keys; widths, position-table lengths and conformer
    widths from the shapes; only what tensors cannot tell (attention heads, input layer type,
    perceiver multiplier, special ids) comes from `config` (`gpt:` of IndexTTS2's config.yaml).
    Raises InputError when a text key is missing.
    """
    gpt = dict(config["gpt"])
    for key in ROWS.text_keys + ("text_pos_embedding.emb.weight", "mel_pos_embedding.emb.weight", "mel_embedding.weight"):
        if key not in state_dict:
            raise InputError(f"checkpoint has no {key}; this is not an IndexTTS2 gpt.pth.")
    layers = _count_indexed(list(state_dict), "gpt.h.")
    model_dim = int(state_dict["text_embedding.weight"].shape[1])
    heads = int(gpt["heads"])
    if model_dim % heads:
        raise InputError(f"config gpt.heads {heads} does not divide the checkpoint's width {model_dim}.")
    kwargs = {k: v for k, v in gpt.items() if k not in ("condition_module", "emo_condition_module")}
    kwargs.update(
        layers=layers,
        model_dim=model_dim,
        heads=heads,
        max_text_tokens=int(state_dict["text_pos_embedding.emb.weight"].shape[0]) - 2,
        max_mel_tokens=int(state_dict["mel_pos_embedding.emb.weight"].shape[0]) - 2 - int(gpt.get("max_conditioning_inputs", 1)),
        number_mel_codes=int(state_dict["mel_embedding.weight"].shape[0]),
        number_text_tokens=int(tokenizer_size),
        condition_module=_conformer_shape(state_dict, "conditioning_encoder", gpt["condition_module"]),
        emo_condition_module=_conformer_shape(state_dict, "emo_conditioning_encoder", gpt["emo_condition_module"]),
    )
    return kwargs


def build_unified_voice(kwargs: Mapping[str, Any]) -> torch.nn.Module:
    """Return a fresh `UnifiedVoice(**kwargs)` from the published code (random weights, train mode)."""
    from indextts.gpt.model_v2 import UnifiedVoice

    return UnifiedVoice(**dict(kwargs))


def load_gpt_state_dict(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Return the tensors of an IndexTTS2 `gpt.pth` (unwrapped, alias keys dropped, weights-only load).

    Raises InputError when the file is missing (naming where IndexTTS2 expects it) or unreadable.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no GPT checkpoint here; IndexTTS2 expects <model_dir>/{GPT_NAME} (config `gpt_checkpoint`).")
    return load_checkpoint(path).state_dict


def require_rows_for(state_dict: Mapping[str, torch.Tensor], tokenizer_size: int, source: str) -> None:
    """Check that an IndexTTS2 state dict has the text rows of a `tokenizer_size`-id tokenizer (size + 1).

    Raises InputError naming `source`, both counts and the fix (`embeddings extend`).
    """
    rows, needed = text_rows(ROWS, state_dict), rows_for(ROWS, tokenizer_size)
    if rows != needed:
        raise InputError(f"{source}: {rows} text rows do not fit a tokenizer of {tokenizer_size} ids (needs {needed}: "
                         "tokenizer size + 1). Run `embeddings extend` for this tokenizer.")


def load_unified_voice(
    state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any], tokenizer_size: int
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Return `(model, kwargs)`: `UnifiedVoice` sized for the tokenizer with `state_dict` loaded strictly.

    Raises InputError when the checkpoint's text rows are not `tokenizer_size + 1` (run
    `embeddings extend` first) or a key is missing or unexpected.
    """
    require_rows_for(state_dict, tokenizer_size, "the IndexTTS2 checkpoint")
    kwargs = gpt_kwargs_from_state_dict(state_dict, config, tokenizer_size)
    model = build_unified_voice(kwargs)
    result = model.load_state_dict(dict(state_dict), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise InputError(
            f"checkpoint does not fit UnifiedVoice: missing {result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]}."
        )
    return model, kwargs


# ---------------------------------------------------------------- text


class IndexTextNormalizer:
    """IndexTTS2's text front end for training and synthesis (one object, one behaviour).

    `language` None applies what IndexTTS2 applies to every language after NeMo: its punctuation
    table (`TextNormalizer.char_rep_map`) and `tokenize_by_CJK_char` (CJK spacing and
    UPPER-CASING). A NeMo language (`en`, `zh`, `es`) additionally runs IndexTTS2's
    `TextNormalizer` for it (needs nemo_text_processing and compiles grammars on first use).
    """

    def __init__(self, language: str | None = None) -> None:
        from indextts.utils.front import TextNormalizer

        self.language = language
        self._normalizer = TextNormalizer(preferred_language=language)
        if language:
            self._normalizer.load()
        table = self._normalizer.char_rep_map
        self._pattern = re.compile("|".join(re.escape(p) for p in table))
        self._table = table

    @property
    def version(self) -> str:
        """Return the normaliser version recorded in cache fingerprints."""
        return f"{NORMALIZER_VERSION}:{self.language or 'none'}"

    def normalize(self, text: str) -> str:
        """Return `text` as IndexTTS2 hands it to SentencePiece (normalised, CJK-spaced, upper-case)."""
        from indextts.utils.common import tokenize_by_CJK_char

        if self.language:
            text = self._normalizer.normalize(text)
        else:
            text = self._pattern.sub(lambda m: self._table[m.group()], text)
        return tokenize_by_CJK_char(text)

    def text_ids(self, text: str, tokenizer: Any) -> list[int]:
        """Return the ids of `text` for UnifiedVoice (no start/stop; the model adds them).

        Like IndexTTS2's `TextTokenizer.encode`, a one-character text is encoded as is.
        """
        if len(text.strip()) == 1:
            return list(tokenizer.encode(text))
        return list(tokenizer.encode(self.normalize(text)))



@dataclass
class IndexTTSModelConfig:
    """`UnifiedVoice` keyword arguments plus the IndexTTS2 config.yaml they came from."""

    kwargs: dict[str, Any]
    indextts_config: dict[str, Any]
    dropout: float | None = None  # the run's `model.dropout` for every dropout of the GPT (None: GPT-2's 0.1)

    @property
    def max_text_tokens(self) -> int:
        """Return the text position limit (IndexTTS2: 600)."""
        return int(self.kwargs["max_text_tokens"])

    @property
    def max_speech_tokens(self) -> int:
        """Return the semantic-code position limit (IndexTTS2: 1815)."""
        return int(self.kwargs["max_mel_tokens"])

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready record kept in checkpoint metadata (`model_config`)."""
        return {
            "family": "indextts",
            "kwargs": copy.deepcopy(self.kwargs),
            "indextts_config": copy.deepcopy(self.indextts_config),
            "dropout": self.dropout,
            "max_text_tokens": self.max_text_tokens,
            "max_speech_tokens": self.max_speech_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "IndexTTSModelConfig":
        """Return the config recorded by `to_dict`; raises InputError when it is not an IndexTTS2 record."""
        if not isinstance(data, Mapping) or "kwargs" not in data or "indextts_config" not in data:
            raise InputError("checkpoint metadata has no IndexTTS2 model_config; was it trained with family indextts?")
        return cls(dict(data["kwargs"]), dict(data["indextts_config"]), data.get("dropout"))
