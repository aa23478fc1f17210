"""TTS training samples from the preprocessing cache and its prompt pairs.

`prepare_cache` builds (or reuses) `cache/<fingerprint>/` for the run's manifest, tokenizer and
codec, and its `pairs.json`. `tts_samples` turns the cache into train/val `SampleSet`s: one
sample per (target clip, prompt clip) pair, the prompt's mel as the reference (the target's own
when its speaker has no other clip), with clips over the position limits filtered and counted.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from core.data.cache import build_cache, load_item, open_cache
from core.config import Settings
from core.errors import InputError
from core.data.pairs import PAIRS_NAME, build_pairs, load_pairs
from core.training.run_config import RunConfig
from core.data.splits import TRAIN, VAL
from core.tokenizers.tokenizer import Tokenizer
from core.training.data import SampleSet

REFERENCE_FRAMES = 256
ITEM_CACHE = 4096


def prepare_cache(config: RunConfig, settings: Settings, tokenizer: Tokenizer) -> Path:
    """Return the cache folder for the run (built or completed now when needed), with pairs.json.

    Raises InputError when the run names no manifest or codec, or preprocessing fails.
    """
    if not config.data.manifest:
        raise InputError(f"{config.source}: task tts needs data.manifest (from `dataset import`).")
    info = build_cache(
        settings.resolve(config.data.manifest), tokenizer.path, settings.resolve(config.codec),
        settings.resolve("cache"), val_ratio=config.data.val_ratio,
    )
    if not (info.path / PAIRS_NAME).is_file():
        build_pairs(info.path, config.data.prompts_per_target, config.seed)
    return info.path


def tts_samples(
    config: RunConfig, settings: Settings, tokenizer: Tokenizer, codec: Any, model_config: Any, cache_dir: Path
) -> dict[str, SampleSet]:
    """Return `{"train", "val"}` SampleSets of `{text_ids, codes, ref_mel}` tensors from the cache.

    Raises InputError when the cache was built with another tokenizer or codec, or no
    training clip fits the model's position limits.
    """
    index = open_cache(cache_dir)
    if index.tokenizer_fingerprint != tokenizer.fingerprint or index.codec_fingerprint != codec.fingerprint:
        raise InputError(f"{cache_dir}: built with another tokenizer or codec than the run's. Run `preprocess` again.")
    pairs = load_pairs(cache_dir)
    entries = {e["id"]: e for e in index.items}

    @lru_cache(maxsize=ITEM_CACHE)
    def item(clip_id: str) -> dict[str, torch.Tensor]:
        raw = load_item(cache_dir, entries[clip_id])
        return {key: torch.from_numpy(value.astype("float32" if key == "ref_mel" else "int64")) for key, value in raw.items()}

    def sample(pair: tuple[str, str]) -> dict[str, torch.Tensor]:
        target, prompt = item(pair[0]), item(pair[1])
        return {"text_ids": target["text_ids"], "codes": target["codes"], "ref_mel": prompt["ref_mel"][:REFERENCE_FRAMES]}

    splits: dict[str, SampleSet] = {}
    for split in (TRAIN, VAL):
        chosen: list[tuple[str, str]] = []
        filtered = 0
        for entry in index.items:
            if entry["split"] != split:
                continue
            if entry["n_text"] > model_config.max_text_tokens or entry["n_codes"] > model_config.max_speech_tokens:
                filtered += 1
                continue
            prompts = pairs.get(entry["id"]) or [entry["id"]]
            chosen.extend((entry["id"], prompt) for prompt in prompts[: config.data.prompts_per_target])
        lengths = [entries[t]["n_text"] + entries[t]["n_codes"] for t, _ in chosen]
        splits[split] = SampleSet(lengths, lambda i, chosen=chosen: sample(chosen[i]), filtered=filtered)
    if not splits[TRAIN].lengths:
        raise InputError(
            f"{cache_dir}: no training clip fits max_text_tokens {model_config.max_text_tokens} / "
            f"max_speech_tokens {model_config.max_speech_tokens} ({splits[TRAIN].filtered} filtered). "
            "Raise the limits in model: or use shorter clips."
        )
    return splits
