"""LinguaForge's own TTS model: training samples from the preprocessing cache and its prompt pairs.

`prepare_cache` builds (or reuses) `cache/<fingerprint>/` for the run's manifest, tokenizer and
codec, and its `pairs.json`. `tts_samples` turns the cache into train/val `SampleSet`s: one
sample per (target clip, prompt clip) pair, the prompt's mel as the reference (the target's own
when its speaker has no other clip), with clips over the position limits filtered and counted.
Items are held in memory by a `ClipStore` (compact arrays, up to `STORE_BYTES`), read in bulk by
a thread pool a window of batches at a time, so each clip is read once per run when the split
fits the budget, and at most once per window otherwise.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.data.cache import build_cache
from core.data.feature_cache import load_item, open_cache
from core.errors import InputError
from core.data.pairs import PAIRS_NAME, build_pairs, load_pairs, training_pairs
from core.data.splits import TRAIN, VAL
from core.families.base import FamilyRun
from core.families.contract import SampleSet

REFERENCE_FRAMES = 256
STORE_BYTES = 4 * 1024**3
READ_THREADS = 4


class ClipStore:
    """Cache items of one split held in memory (text ids, codes, the first REFERENCE_FRAMES mel frames).

    `get(ids)` returns the items, reading the missing ones in one bulk pass over a thread pool;
    the least recently used items are dropped beyond `budget` bytes.
    """

    def __init__(self, cache_dir: Path, entries: dict[str, dict[str, Any]], budget: int = STORE_BYTES) -> None:
        self.cache_dir, self.entries, self.budget = cache_dir, entries, budget
        self.items: OrderedDict[str, dict[str, np.ndarray]] = OrderedDict()
        self.size = 0
        self.reads = 0

    def _read(self, clip_id: str) -> dict[str, np.ndarray]:
        raw = load_item(self.cache_dir, self.entries[clip_id])
        return {"text_ids": raw["text_ids"], "codes": raw["codes"],
                "ref_mel": np.ascontiguousarray(raw["ref_mel"][:REFERENCE_FRAMES])}

    def get(self, clip_ids: list[str]) -> dict[str, dict[str, np.ndarray]]:
        """Return `{clip id: item}` for `clip_ids`; raises InputError for a missing or corrupt item."""
        missing = list(dict.fromkeys(c for c in clip_ids if c not in self.items))
        if len(missing) > 1:
            with ThreadPoolExecutor(min(READ_THREADS, len(missing))) as pool:
                read = dict(zip(missing, pool.map(self._read, missing)))
        else:
            read = {c: self._read(c) for c in missing}
        self.reads += len(read)
        found = {c: self.items[c] for c in clip_ids if c in self.items}
        for clip_id in clip_ids:
            if clip_id in self.items:
                self.items.move_to_end(clip_id)
        found.update(read)
        for clip_id, item in read.items():
            self.items[clip_id] = item
            self.size += sum(a.nbytes for a in item.values())
        while self.size > self.budget and len(self.items) > len(clip_ids):
            _, dropped = self.items.popitem(last=False)
            self.size -= sum(a.nbytes for a in dropped.values())
        return found


def prepare_cache(run: FamilyRun) -> Path:
    """Return the cache folder for the run (built or completed now when needed), with pairs.json.

    Raises InputError when the run names no manifest or codec, or preprocessing fails.
    """
    if run.manifest is None:
        raise InputError(f"{run.source}: task tts needs data.manifest (from `dataset import`).")
    info = build_cache(run.manifest, run.tokenizer.path, run.codec_path, run.cache_root, val_ratio=run.val_ratio,
                       split_by=run.split_by, shard=run.feature_shard, device=run.feature_device)
    run.feature_build = info
    if info.complete and not (info.path / PAIRS_NAME).is_file():
        build_pairs(info.path, run.prompts_per_target, run.seed)
    return info.path


def tts_samples(run: FamilyRun, model_config: Any, cache_dir: Path) -> dict[str, SampleSet]:
    """Return `{"train", "val"}` SampleSets of `{text_ids, codes, ref_mel}` tensors from the cache.

    Raises InputError when the cache was built with another tokenizer or codec, or no
    training clip fits the model's position limits.
    """
    index = open_cache(cache_dir)
    if index.tokenizer_fingerprint != run.tokenizer.fingerprint or index.codec_fingerprint != run.codec.fingerprint:
        raise InputError(f"{cache_dir}: built with another tokenizer or codec than the run's. Run `preprocess` again.")
    pairs = load_pairs(cache_dir)
    entries = {e["id"]: e for e in index.items}

    def samples(store: ClipStore, pairs_chosen: list[tuple[str, str]], indices: list[int]) -> list[dict[str, torch.Tensor]]:
        chosen_pairs = [pairs_chosen[i] for i in indices]
        items = store.get([clip for pair in chosen_pairs for clip in pair])
        return [{"text_ids": torch.from_numpy(items[t]["text_ids"]), "codes": torch.from_numpy(items[t]["codes"]),
                 "ref_mel": torch.from_numpy(items[p]["ref_mel"])} for t, p in chosen_pairs]

    splits: dict[str, SampleSet] = {}
    for split in (TRAIN, VAL):
        chosen, filtered = training_pairs(index.items, pairs, split, model_config.max_text_tokens,
                                          model_config.max_speech_tokens, run.prompts_per_target)
        lengths = [entries[t]["n_text"] + entries[t]["n_codes"] for t, _ in chosen]
        many = partial(samples, ClipStore(cache_dir, entries), chosen)
        splits[split] = SampleSet(lengths, lambda i, many=many: many([i])[0], filtered=filtered, load_many=many,
                                  extra={"languages": [entries[t].get("language") for t, _ in chosen]})
    if not splits[TRAIN].lengths:
        raise InputError(
            f"{cache_dir}: no training clip fits max_text_tokens {model_config.max_text_tokens} / "
            f"max_speech_tokens {model_config.max_speech_tokens} ({splits[TRAIN].filtered} filtered). "
            "Raise the limits in model: or use shorter clips."
        )
    return splits
