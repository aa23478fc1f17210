"""IndexTTS2 training features in a fingerprinted, resumable cache.

Per clip, as IndexTTS2 computes them: text ids (`IndexTextNormalizer.text_ids`), w2v-BERT 2.0
layer-17 features of the clip read through IndexTTS2's front end (`core.families.indextts_audio`)
→ MaskGCT semantic codes (the targets), and — for when the clip serves as a PROMPT — its speaker
latents (32 × model_dim) from the clip cut at 15 s and its emotion vector from the clip read as
IndexTTS2's emotion front end reads it. Training pairs each target with a different clip of the
same speaker (`pairs.json`). Clips are computed `batch_size` at a time with the same results as
one at a time.

`IndexTTSFeatures` gives these (computed by `indextts_models.BatchFeaturizer`) to the one feature-cache engine (`core.data.feature_cache`), which
builds `<root>/<fingerprint>/` (journal, resume, sha-checked items, index); `pairs.json` is
`core.data.pairs`'. The fingerprint covers the tokenizer, every feature model's file hash
(gpt.pth for the frozen conditioning encoders, w2v-BERT, the stats, the semantic codec), the
audio front end's and the normaliser's versions, the val ratio and the manifest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from core.data.feature_cache import Features, build_feature_cache, open_cache, read_checked_item
from core.data.manifest import ManifestRow
from core.data.pairs import load_pairs  # noqa: F401  (re-exported: the IndexTTS2 cache's pairs.json is the shared one)
from core.families.indextts_gpt import SEMANTIC_CODES

CACHE_FORMAT = "linguaforge-indextts-cache-1"
ITEM_KEYS = ("text_ids", "codes", "condition", "emo_vec")


@dataclass
class IndexTTSFeatures:
    """The feature-cache source of IndexTTS2: ITEM_KEYS from `featurise_batch` (a `BatchFeaturizer`), fingerprinted
    by `parts` (the feature models' file hashes, front-end and normaliser versions)."""

    parts: dict[str, str]
    featurise_batch: Callable[[list[ManifestRow]], list[dict[str, np.ndarray]]] | None = None
    format = CACHE_FORMAT
    label = "indextts features"
    dtypes = {"text_ids": np.int32, "codes": np.int32, "condition": np.float32, "emo_vec": np.float32}

    def fingerprint_parts(self) -> dict[str, str]:
        """Return `parts`."""
        return dict(self.parts)

    def featurise(self, rows: list[ManifestRow]) -> list[Features]:
        """Return `featurise_batch(rows)`."""
        assert self.featurise_batch is not None, "an IndexTTSFeatures without a featuriser only writes indexes"
        return list(self.featurise_batch(rows))

    def entry_fields(self, row: ManifestRow, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Return the clip's text (an imported folder's manifest is rebuilt from it)."""
        return {"text": row.text}

    def index_fields(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Return the feature models' fingerprint as `codec`, with the semantic codebook size."""
        return {"codec": {"fingerprint": self.parts.get("features", ""), "codebook_size": SEMANTIC_CODES}}


def build_features(
    manifest: Path, output_root: str | os.PathLike[str], fingerprint_parts: Mapping[str, str], featurize: Callable[[list[ManifestRow]], list[dict[str, np.ndarray]]],
    tokenizer: Any, val_ratio: float = 0.05, batch_size: int = 1,
) -> Path:
    """Return the cache folder of the manifest's clips (the feature-cache engine), computing only clips not already cached.

    `featurize(rows)` returns ITEM_KEYS for each of up to `batch_size` clips (not in the fingerprint:
    it does not change the features). Raises InputError when no clip can be featurised.
    """
    source = IndexTTSFeatures(dict(fingerprint_parts), featurize)
    return build_feature_cache(source, manifest, tokenizer, output_root, val_ratio, batch_size).path


def load_item(cache_dir: str | os.PathLike[str], entry: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Return the arrays of one cached item; raises InputError when the file is missing, corrupt or unreadable."""
    return read_checked_item(Path(cache_dir) / entry["file"], entry["sha256"], ITEM_KEYS,
                             "Delete the cache folder and rebuild it.")


def open_features(cache_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the parsed index.json of an IndexTTS2 cache; raises InputError when absent, unreadable or of another format."""
    return open_cache(cache_dir, (CACHE_FORMAT,)).data
