"""Chatterbox features in the one feature cache (`core.data.feature_cache`), in the own codec's index format.

Per clip: the S3 speech tokens of the clip read at 16 kHz, its voice prompt (prompt tokens and VoiceEncoder
embedding) made by the one maker both speakers use (`chatterbox.feature_models.reference_audio` and
`voice_prompts`, as the published `prepare_conditionals` makes it), and the text ids after
`chatterbox.text.prepare_text`; fingerprinted by the feature models' file hashes, the feature format (2: the
prompt from the reference resampled 16 → 24 → 16 kHz as `prepare_conditionals` resamples it; 1 read it at
16 kHz directly) and the text-preparation version.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.audio import read_audio, resample
from core.data.feature_cache import CACHE_FORMAT, Features
from core.data.manifest import ManifestRow
from core.errors import InputError
from core.families.chatterbox.feature_models import (
    MULTILINGUAL_PROMPT, S3_SR, FeatureModels, batch_features, load_feature_models, reference_audio,
)
from core.families.chatterbox.text import TEXT_PREP_VERSION, text_ids
from core.fsutil import sha256_file
from core.tokenizers.tokenizer import Tokenizer

SPEECH_CODES = 6561
FEATURE_FORMAT = "chatterbox-features-2"


def feature_fingerprint(files: dict[str, Path], feature_format: str = FEATURE_FORMAT) -> str:
    """Return the sha256 over the feature models' file hashes (voice encoder, s3gen) and the format."""
    digest = hashlib.sha256(feature_format.encode())
    for role in ("voice_encoder", "s3gen"):
        digest.update(sha256_file(files[role]).encode())
    return digest.hexdigest()


@dataclass
class ChatterboxFeatures:
    """The feature-cache source of Chatterbox: `text_ids`, `codes` (S3 speech tokens), `prompt`, `speaker_emb`.

    The feature models load on the first clip that needs computing (a complete cache loads none).
    A family with the same feature models and another prompt or text preparation (Chatterbox-Turbo)
    subclasses it, overriding the class attributes and `clip_text_ids`.
    """

    tokenizer: Tokenizer
    files: dict[str, Path]
    device: torch.device
    models: FeatureModels | None = None
    format = CACHE_FORMAT
    label = "chatterbox features"
    family = "chatterbox"
    feature_format = FEATURE_FORMAT
    text_preparation = TEXT_PREP_VERSION
    prompt = MULTILINGUAL_PROMPT
    dtypes = {"text_ids": np.int32, "codes": np.int32, "prompt": np.int32, "speaker_emb": np.float32}

    @cached_property
    def features(self) -> str:
        """The feature models' fingerprint (`feature_fingerprint`, hashed once)."""
        return feature_fingerprint(self.files, self.feature_format)

    def fingerprint_parts(self) -> dict[str, str]:
        """Return the feature models' fingerprint and the text-preparation version."""
        return {"features": self.features, "text_preparation": self.text_preparation}

    def clip_text_ids(self, row: ManifestRow) -> list[int]:
        """Return the row's text ids (`chatterbox.text.text_ids`)."""
        return text_ids(self.tokenizer, row.text, row.language)

    def featurise(self, rows: list[ManifestRow]) -> list[Features]:
        """Return each row's arrays (`batch_features`), or why its audio is unreadable.

        Raises InputError when a text's language has no tag in the tokenizer.
        """
        ids = [self.clip_text_ids(row) for row in rows]
        wavs: dict[int, tuple[torch.Tensor, int]] = {}
        results: list[Features] = []
        for i, row in enumerate(rows):
            try:
                wavs[i] = read_audio(row.path)
                results.append({})
            except InputError as exc:
                results.append(str(exc))
        if wavs:
            self.models = self.models or load_feature_models(self.files).to(self.device)
            clips = [resample(wav, rate, S3_SR) for wav, rate in wavs.values()]   # what read_audio(path, S3_SR) gives
            refs = [reference_audio(wav, rate, self.prompt)[1] for wav, rate in wavs.values()]
            for i, clip in zip(wavs, batch_features(self.models, clips, refs, self.prompt)):
                results[i] = {"text_ids": np.asarray(ids[i]), "codes": clip["speech"], "prompt": clip["prompt"],
                              "speaker_emb": clip["speaker_emb"]}
        return results

    def index_fields(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Return the family, the feature models as `codec` and the text-preparation version."""
        return {"family": self.family, "text_preparation": self.text_preparation,
                "codec": {"fingerprint": self.features, "files": {k: str(v) for k, v in self.files.items()},
                          "codebook_size": SPEECH_CODES, "frame_rate": 25}}

