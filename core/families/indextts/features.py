"""IndexTTS2 training features in the one feature cache (`core.data.feature_cache`, format CACHE_FORMAT).

Per clip, as IndexTTS2 computes them (`indextts.models.BatchFeaturizer`): text ids, MaskGCT semantic
codes of the clip's w2v-BERT 2.0 features (the targets), and — for when the clip serves as a prompt —
its speaker latents (32 × model_dim) and emotion vector. Training pairs each target with a different
clip of the same speaker (`core.data.pairs`). The fingerprint parts are `indextts.data.feature_model_parts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from core.data.feature_cache import Features
from core.data.manifest import ManifestRow
from core.families.indextts.gpt import SEMANTIC_CODES

CACHE_FORMAT = "linguaforge-indextts-cache-1"


@dataclass
class IndexTTSFeatures:
    """The feature-cache source of IndexTTS2: `dtypes`' arrays from `featurise_batch` (a `BatchFeaturizer`),
    fingerprinted by `parts` (the feature models' file hashes, front-end and normaliser versions); without
    `featurise_batch` it only writes indexes (an imported folder)."""

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

    def index_fields(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Return the feature models' fingerprint as `codec`, with the semantic codebook size."""
        return {"codec": {"fingerprint": self.parts.get("features", ""), "codebook_size": SEMANTIC_CODES}}

