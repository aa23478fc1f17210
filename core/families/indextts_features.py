"""IndexTTS2 training features in a fingerprinted, resumable cache.

Per clip, as IndexTTS2 computes them: text ids (`IndexTextNormalizer.text_ids`), w2v-BERT 2.0
layer-17 features of the clip read through IndexTTS2's front end (`core.families.indextts_audio`)
→ MaskGCT semantic codes (the targets), and — for when the clip serves as a PROMPT — its speaker
latents (32 × model_dim) from the clip cut at 15 s and its emotion vector from the clip read as
IndexTTS2's emotion front end reads it. Training pairs each target with a different clip of the
same speaker (`pairs.json`). Clips are computed `batch_size` at a time (`BatchFeaturizer`) with
the same results as one at a time.

`IndexTTSFeatures` gives these to the one feature-cache engine (`core.data.feature_cache`), which
builds `<root>/<fingerprint>/` (journal, resume, sha-checked items, index); `pairs.json` is
`core.data.pairs`'. The fingerprint covers the tokenizer, every feature model's file hash
(gpt.pth for the frozen conditioning encoders, w2v-BERT, the stats, the semantic codec), the
audio front end's and the normaliser's versions, the val ratio and the manifest.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch

from core.data.feature_cache import Features, build_feature_cache, open_cache, read_checked_item
from core.data.manifest import ManifestRow
from core.data.pairs import load_pairs  # noqa: F401  (re-exported: the IndexTTS2 cache's pairs.json is the shared one)
from core.families.indextts import SEMANTIC_CODES
from core.fsutil import sha256_file

CACHE_FORMAT = "linguaforge-indextts-cache-1"
ITEM_KEYS = ("text_ids", "codes", "condition", "emo_vec")


def path_fingerprint(path: str | os.PathLike[str]) -> str:
    """Return the sha256 of a file, or of a folder's files (relative names and their sha256, sorted)."""
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path).as_posix()}={sha256_file(file)}\n".encode())
    return digest.hexdigest()


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


def equal_length_groups(tensors: list[torch.Tensor]) -> list[list[int]]:
    """Return the indices of `tensors` [1, T, …] grouped by equal T (groups in first-seen order)."""
    groups: dict[int, list[int]] = {}
    for i, tensor in enumerate(tensors):
        groups.setdefault(int(tensor.shape[1]), []).append(i)
    return list(groups.values())


class BatchFeaturizer:
    """Computes ITEM_KEYS for a batch of manifest rows with IndexTTS2's feature models and the frozen base GPT.

    Audio goes through IndexTTS2's front end (`core.families.indextts_audio`): the codes come from
    the whole clip read as the speaker front end reads it (22.05 kHz → 16 kHz), the speaker latents
    from the same clip cut at 15 s as a prompt is cut (the same features when the clip is shorter),
    the emotion vector from the clip read at 16 kHz as the emotion front end reads it. w2v-BERT
    (the large model) runs on padded batches with its attention mask. The semantic codec and the
    conditioning encoders pad nothing: their convolutions would carry padding into the last real
    frames, so they run on groups of equal length (`equal_length_groups`).
    """

    def __init__(self, semantic: Any, gpt: torch.nn.Module, normalizer: Any, tokenizer: Any) -> None:
        self.semantic = semantic
        self.gpt = gpt.eval()
        self.normalizer = normalizer
        self.tokenizer = tokenizer

    def _grouped(self, tensors: list[torch.Tensor], run: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
        """Return `run` of each tensor [1, T, …], computed on groups of equal T."""
        out: list[torch.Tensor] = [torch.empty(0)] * len(tensors)
        for group in equal_length_groups(tensors):
            result = run(torch.cat([tensors[i] for i in group]))
            for row, i in enumerate(group):
                out[i] = result[row]
        return out

    @torch.no_grad()
    def __call__(self, rows: list[ManifestRow]) -> list[dict[str, np.ndarray]]:
        """Return, per row, text ids, semantic codes, speaker latents and emotion vector of its clip."""
        from core.families.indextts_audio import MAX_PROMPT_SECONDS, SPEAKER_RATE, emotion_audio, speaker_audio
        from core.families.indextts_models import emotion_vectors, speaker_latents

        clips = [speaker_audio(row.path, max_seconds=None) for row in rows]
        features = self.semantic.features_batch([clip.wav_16k[0] for clip in clips])
        prompts = list(features)
        long = [i for i, clip in enumerate(clips) if clip.wav_22k.shape[1] > MAX_PROMPT_SECONDS * SPEAKER_RATE]
        if long:
            cut = self.semantic.features_batch([speaker_audio(rows[i].path).wav_16k[0] for i in long])
            for i, feature in zip(long, cut):
                prompts[i] = feature
        emotion = self.semantic.features_batch([emotion_audio(row.path)[0] for row in rows])
        codes = self._grouped(features, self.semantic.codes)
        latents = self._grouped(prompts, lambda f: speaker_latents(self.gpt, f))
        vectors = self._grouped(emotion, lambda f: emotion_vectors(self.gpt, f))
        return [
            {
                "text_ids": np.asarray(self.normalizer.text_ids(row.text, self.tokenizer), dtype=np.int32),
                "codes": codes[i].cpu().numpy().astype(np.int32),
                "condition": latents[i].float().cpu().numpy(),
                "emo_vec": vectors[i].float().cpu().numpy(),
            }
            for i, row in enumerate(rows)
        ]
