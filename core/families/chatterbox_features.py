"""Chatterbox features in the fingerprinted feature cache.

Per clip: the S3 speech tokens, prompt tokens and VoiceEncoder embedding of `chatterbox_feature_models`,
and the text ids after `chatterbox_text.prepare_text`.

`ChatterboxFeatures` gives these to the one feature-cache engine (`core.data.feature_cache`), which
builds `cache/<fingerprint>/` (fingerprint: tokenizer, each feature model's file hash,
text-preparation version, manifest, val ratio) in the own codec's index format, so `open_cache`,
`pairs.json` and the doctor's cache checks apply to it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from core.audio import read_audio
from core.data import feature_cache
from core.data.cache import CACHE_FORMAT
from core.data.feature_cache import Features, read_checked_item
from core.data.manifest import ManifestRow
from core.errors import InputError
from core.families.chatterbox_feature_models import S3_SR, FeatureModels, batch_features, load_feature_models
from core.families.chatterbox_text import TEXT_PREP_VERSION, text_ids
from core.fsutil import sha256_file
from core.tokenizers.tokenizer import Tokenizer

SPEECH_CODES = 6561
FEATURE_FORMAT = "chatterbox-features-1"


def feature_fingerprint(files: dict[str, Path]) -> str:
    """Return the sha256 over the feature models' file hashes (voice encoder, s3gen) and the format."""
    digest = hashlib.sha256(FEATURE_FORMAT.encode())
    for role in ("voice_encoder", "s3gen"):
        digest.update(sha256_file(files[role]).encode())
    return digest.hexdigest()


ITEM_KEYS = ("text_ids", "codes", "prompt", "speaker_emb")


@dataclass
class ChatterboxFeatures:
    """The feature-cache source of Chatterbox: `text_ids`, `codes` (S3 speech tokens), `prompt`, `speaker_emb`.

    The feature models load on the first clip that needs computing (a complete cache loads none).
    """

    tokenizer: Tokenizer
    files: dict[str, Path]
    device: torch.device
    models: FeatureModels | None = None
    format = CACHE_FORMAT
    label = "chatterbox features"
    dtypes = {"text_ids": np.int32, "codes": np.int32, "prompt": np.int32, "speaker_emb": np.float32}

    @cached_property
    def features(self) -> str:
        """The feature models' fingerprint (`feature_fingerprint`, hashed once)."""
        return feature_fingerprint(self.files)

    def fingerprint_parts(self) -> dict[str, str]:
        """Return the feature models' fingerprint and the text-preparation version."""
        return {"features": self.features, "text_preparation": TEXT_PREP_VERSION}

    def featurise(self, rows: list[ManifestRow]) -> list[Features]:
        """Return each row's arrays (`batch_features`), or why its audio is unreadable.

        Raises InputError when a text's language has no tag in the tokenizer.
        """
        ids = [text_ids(self.tokenizer, row.text, row.language) for row in rows]
        wavs: dict[int, torch.Tensor] = {}
        results: list[Features] = []
        for i, row in enumerate(rows):
            try:
                wavs[i] = read_audio(row.path, S3_SR)[0]
                results.append({})
            except InputError as exc:
                results.append(str(exc))
        if wavs:
            self.models = self.models or load_feature_models(self.files).to(self.device)
            for i, clip in zip(wavs, batch_features(self.models, list(wavs.values()))):
                results[i] = {"text_ids": np.asarray(ids[i]), "codes": clip["speech"], "prompt": clip["prompt"],
                              "speaker_emb": clip["speaker_emb"]}
        return results

    def entry_fields(self, row: ManifestRow, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Return the prompt length and the largest speech token."""
        return {"n_prompt": int(arrays["prompt"].size), "max_speech_id": int(np.max(arrays["codes"], initial=-1))}

    def index_fields(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Return the family, the feature models as `codec`, the text-preparation version and the largest speech token."""
        return {"family": "chatterbox", "text_preparation": TEXT_PREP_VERSION,
                "codec": {"fingerprint": self.features, "files": {k: str(v) for k, v in self.files.items()},
                          "codebook_size": SPEECH_CODES, "frame_rate": 25},
                "max_speech_id": max(e["max_speech_id"] for e in items)}


def load_features(cache_dir: Path, entry: dict[str, Any]) -> dict[str, np.ndarray]:
    """Return the arrays of one cached item. Raises InputError when it is missing, corrupt or unreadable."""
    return read_checked_item(cache_dir / entry["file"], entry["sha256"], ITEM_KEYS,
                             "Delete it and run `train` (or `preprocess`) again to rebuild it.")


def build_feature_cache(
    manifest: Path, tokenizer: Tokenizer, files: dict[str, Path], output_root: Path, val_ratio: float,
    device: torch.device | None = None, batch_size: int = 1,
) -> Path:
    """Build (or complete, or repair) `output_root/<fingerprint>/` for the manifest with the feature cache engine; return the folder.

    Clips go through the feature models `batch_size` at a time (`batch_features`; not in the
    fingerprint, as it does not change the features). A clip whose text uses a language the
    tokenizer has no tag for fails the build (InputError); unreadable audio is listed in `skipped`.
    Raises InputError when no clip can be featurised.
    """
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    source = ChatterboxFeatures(tokenizer, files, device)
    return feature_cache.build_feature_cache(source, manifest, tokenizer, output_root, val_ratio, batch_size).path
