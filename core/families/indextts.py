"""IndexTTS2's GPT (`indextts.gpt.model_v2.UnifiedVoice`) as LinguaForge sees it.

What lives here: the published folder's file names, the IndexTTS2 `config.yaml` read as a
foreign trainer config (and the corrected copy LinguaForge writes), the backbone shape read
from a checkpoint's tensors, building `UnifiedVoice` at a tokenizer's size (V + 1 text rows,
the extra row last), strict loading of `gpt.pth`, growing the text rows for a larger
tokenizer, and the ONE text → ids function that features and synthesis share.

The published classes are imported lazily: `indextts` pulls in transformers and librosa.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
import yaml

from core.checkpoint import load_checkpoint
from core.errors import InputError
from core.fsutil import atomic_write_text

ROW_OFFSET = 1
TEXT_KEYS = ("text_embedding.weight", "text_head.weight", "text_head.bias")
START_TEXT, STOP_TEXT = 0, 1
SEMANTIC_CODES = 8192
START_MEL, STOP_MEL = 8192, 8193
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

    Raises InputError when the file is missing, not YAML, or lacks the `gpt:` entries
    `UnifiedVoice` is built from (naming the first missing one).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no IndexTTS2 config.yaml here; IndexTTS2 expects it at <model_dir>/{CONFIG_NAME}.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable YAML file ({str(exc).splitlines()[0]}).") from None
    gpt = data.get("gpt") if isinstance(data, dict) else None
    if not isinstance(gpt, dict):
        raise InputError(f"{path}: no `gpt:` section; this is not an IndexTTS2 config.yaml.")
    for key in GPT_REQUIRED:
        if key not in gpt:
            raise InputError(f"{path}: `gpt.{key}` is missing; IndexTTS2's UnifiedVoice needs it.")
    return data


@dataclass
class ConfigProblem:
    """One disagreement between an IndexTTS2 config.yaml and the tokenizer/checkpoint it is used with."""

    key: str
    found: Any
    expected: Any
    message: str


def config_problems(config: Mapping[str, Any], tokenizer_size: int) -> list[ConfigProblem]:
    """Return what in `config` disagrees with a tokenizer of `tokenizer_size` ids (empty when it fits).

    IndexTTS2 builds `text_embedding` with `gpt.number_text_tokens + 1` rows, so the number must
    equal the tokenizer size exactly: smaller dies with a CUDA assert on the new ids, larger
    fails the strict load of a checkpoint sized from the tokenizer.
    """
    declared = config["gpt"].get("number_text_tokens")
    if declared == tokenizer_size:
        return []
    return [
        ConfigProblem(
            "gpt.number_text_tokens", declared, tokenizer_size,
            f"gpt.number_text_tokens is {declared}, but the tokenizer has {tokenizer_size} ids "
            f"(UnifiedVoice would build {declared}+1 text rows instead of {tokenizer_size + ROW_OFFSET}).",
        )
    ]


def corrected_config(config: Mapping[str, Any], tokenizer_size: int, bpe_name: str, gpt_name: str) -> dict[str, Any]:
    """Return a copy of `config` with `gpt.number_text_tokens`, `dataset.bpe_model` and `gpt_checkpoint` set."""
    fixed = copy.deepcopy(dict(config))
    fixed["gpt"]["number_text_tokens"] = int(tokenizer_size)
    fixed.setdefault("dataset", {})["bpe_model"] = bpe_name
    fixed["gpt_checkpoint"] = gpt_name
    return fixed


def write_config(path: str | os.PathLike[str], config: Mapping[str, Any]) -> Path:
    """Write `config` as YAML atomically to `path` and return the path."""
    return atomic_write_text(path, yaml.safe_dump(dict(config), sort_keys=False, allow_unicode=True))


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
    for key in TEXT_KEYS + ("text_pos_embedding.emb.weight", "mel_pos_embedding.emb.weight", "mel_embedding.weight"):
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


def text_rows(state_dict: Mapping[str, torch.Tensor]) -> int:
    """Return the number of text rows (tokenizer size + 1) of an IndexTTS2 state dict."""
    return int(state_dict["text_embedding.weight"].shape[0])


def load_unified_voice(
    state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any], tokenizer_size: int
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Return `(model, kwargs)`: `UnifiedVoice` sized for the tokenizer with `state_dict` loaded strictly.

    Raises InputError when the checkpoint's text rows are not `tokenizer_size + 1` (grow it with
    `grow_text_rows` or `embeddings extend` first) or a key is missing or unexpected.
    """
    rows = text_rows(state_dict)
    if rows != tokenizer_size + ROW_OFFSET:
        raise InputError(
            f"the IndexTTS2 checkpoint has {rows} text rows, the tokenizer {tokenizer_size} ids "
            f"(needs {tokenizer_size + ROW_OFFSET} rows: tokenizer size + 1). Run `embeddings extend` for this tokenizer."
        )
    kwargs = gpt_kwargs_from_state_dict(state_dict, config, tokenizer_size)
    model = build_unified_voice(kwargs)
    result = model.load_state_dict(dict(state_dict), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise InputError(
            f"checkpoint does not fit UnifiedVoice: missing {result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]}."
        )
    return model, kwargs


def grow_text_rows(
    state_dict: Mapping[str, torch.Tensor], new_tokenizer_size: int, init: str = "mean"
) -> dict[str, torch.Tensor]:
    """Return a copy of an IndexTTS2 state dict grown to `new_tokenizer_size + 1` text rows.

    Rows 0..V-1 are kept, rows V..V'-1 are the new tokens (`init`: `mean` of the base token rows,
    or `zeros`), and the old extra row V moves to the new end V'. Raises InputError when the
    tokenizer is smaller than the checkpoint.
    """
    old_tokens = text_rows(state_dict) - ROW_OFFSET
    if new_tokenizer_size < old_tokens:
        raise InputError(f"tokenizer has {new_tokenizer_size} ids, fewer than the checkpoint's {old_tokens}; shrinking is `prune`.")
    grown = dict(state_dict)
    added = new_tokenizer_size - old_tokens
    for key in TEXT_KEYS:
        old = state_dict[key]
        base, extra = old[:old_tokens], old[old_tokens:]
        fill = base.mean(dim=0, keepdim=True) if init == "mean" else torch.zeros_like(base[:1])
        new_rows = fill.expand(added, *old.shape[1:]).clone()
        grown[key] = torch.cat([base, new_rows, extra], dim=0).contiguous()
    return grown


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
