"""Model sizes and construction from a run config's `model:` entry or a checkpoint's `model_config`.

`MODEL_SIZES` holds the named shapes (`tiny` trains on a CPU in minutes, `base` wants a GPU).
`model_shape(entry)` resolves `{preset: NAME, …overrides}` into explicit numbers;
`build_model(task, model_config, frozen_rows)` returns a `GPTLM` or `GPTTTS`.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from torch import nn

from models.lm import GPTLM, LMConfig
from models.tts import GPTTTS, TTSConfig

MODEL_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 64, "n_layers": 2, "n_heads": 4, "max_text_tokens": 128, "max_speech_tokens": 256},
    "base": {"d_model": 512, "n_layers": 8, "n_heads": 8, "max_text_tokens": 400, "max_speech_tokens": 800},
}
SHAPE_KEYS = ("d_model", "n_layers", "n_heads", "max_text_tokens", "max_speech_tokens", "n_latents", "dropout", "attention",
              "progress_alignment")


def model_shape(entry: dict[str, Any]) -> dict[str, Any]:
    """Return explicit shape numbers for a `model:` entry (`preset` expanded, overrides applied).

    Raises ValueError naming an unknown preset or key.
    """
    entry = dict(entry)
    preset = entry.pop("preset", None)
    shape: dict[str, Any] = {}
    if preset is not None:
        if preset not in MODEL_SIZES:
            raise ValueError(f"model.preset {preset!r} is not one of {', '.join(MODEL_SIZES)}")
        shape.update(MODEL_SIZES[preset])
    unknown = sorted(set(entry) - set(SHAPE_KEYS))
    if unknown:
        raise ValueError(f"model: unknown key(s) {', '.join(unknown)}; allowed: preset, {', '.join(SHAPE_KEYS)}")
    shape.update(entry)
    if not isinstance(shape.get("progress_alignment", False), bool):
        raise ValueError(f"model.progress_alignment {shape['progress_alignment']!r}: give true or false")
    missing = [k for k in ("d_model", "n_layers", "n_heads") if k not in shape]
    if missing:
        raise ValueError(f"model: {', '.join(missing)} missing; name a preset ({', '.join(MODEL_SIZES)}) or set them")
    return shape


def shape_of(config: dict[str, Any]) -> dict[str, Any]:
    """Return the shape numbers of a saved `model_config` (vocabulary and codec sizes left out)."""
    return {k: v for k, v in config.items() if k in SHAPE_KEYS}


def model_config(task: str, shape: dict[str, Any], **sizes: Any) -> LMConfig | TTSConfig:
    """Return the LMConfig or TTSConfig for `task` from a shape plus vocabulary/codec sizes.

    `sizes` carries `text_rows`, special ids and, for tts, `codebook_size` and `n_mels`.
    Keys a config does not have (such as `max_speech_tokens` for an LM) are ignored.
    """
    cls = TTSConfig if task == "tts" else LMConfig
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in {**shape, **sizes}.items() if k in names})


def build_model(task: str, config: dict[str, Any] | LMConfig | TTSConfig, frozen_rows: int = 0) -> nn.Module:
    """Return a freshly initialised model for `task` (`lm` | `tts`) from a config or its dict.

    Raises ValueError for an unknown task.
    """
    if task not in ("lm", "tts"):
        raise ValueError(f"task {task!r} is not lm or tts")
    if isinstance(config, dict):
        config = model_config(task, config)
    return GPTTTS(config, frozen_rows) if task == "tts" else GPTLM(config, frozen_rows)
