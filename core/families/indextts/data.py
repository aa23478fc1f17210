"""Building a run's IndexTTS2 feature cache: which models, which fingerprint, which device."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch

from core.data.feature_cache import build_feature_cache, feature_batch_size, open_cache
from core.data.pairs import build_pairs
from core.errors import InputError
from core.families.indextts.gpt import CONFIG_NAME, IndexTextNormalizer, load_unified_voice, read_indextts_config
from core.families.indextts.audio import FRONT_END_VERSION
from core.families.indextts.features import CACHE_FORMAT, IndexTTSFeatures
from core.families.indextts.models import BatchFeaturizer, ModelPaths, SemanticFeatures, model_paths
from core.fsutil import sha256_file

_FINGERPRINTS: dict[tuple[str, float], str] = {}


def path_fingerprint(path: str | os.PathLike[str]) -> str:
    """Return the sha256 of a file, or of a folder's files (relative names and their sha256, sorted)."""
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path).as_posix()}={sha256_file(file)}\n".encode())
    return digest.hexdigest()


def _cached_fingerprint(path: Path) -> str:
    key = (str(path), path.stat().st_mtime)
    if key not in _FINGERPRINTS:
        _FINGERPRINTS[key] = path_fingerprint(path)
    return _FINGERPRINTS[key]


def feature_model_parts(paths: ModelPaths, gpt_sha256: str, normalizer: IndexTextNormalizer) -> dict[str, str]:
    """Return the fingerprint parts of the feature models: w2v-BERT (+ layer), stats, semantic codec, GPT, the
    audio front end and the normaliser."""
    config = read_indextts_config(paths.model_dir / CONFIG_NAME)
    return {
        "front_end": FRONT_END_VERSION,
        "w2v_bert": _cached_fingerprint(paths.path("w2v_bert")),
        "w2v_layer": str(paths.w2v_layer),
        "w2v_stats": sha256_file(paths.path(config.get("w2v_stat", "wav2vec2bert_stats.pt"))),
        "semantic_codec": _cached_fingerprint(paths.path("semantic_codec")),
        "gpt": gpt_sha256,
        "normalizer": normalizer.version,
    }


def device() -> str:
    """Return `cuda` when a GPU is present, else `cpu` (features run where the training will)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def prepare_features(family: Any, run: Any) -> Path:
    """Return the run's feature cache folder under `<workspace>/cache/`, building missing clips now.

    Raises InputError when the run names no manifest or model folder, or a feature model is missing.
    """
    if run.manifest is None:
        raise InputError(f"{run.source}: family indextts needs data.manifest (a manifest.jsonl from `dataset import`).")
    if run.model_dir is None:
        raise InputError(f"{run.source}: family indextts needs `model_dir:` (the local IndexTTS2 folder) to compute features.")
    manifest = run.manifest
    if manifest.is_dir():
        return imported_cache(manifest, run)
    section = dict(run.options)
    paths = model_paths(run.model_dir, section)
    indextts_config = read_indextts_config(paths.model_dir / CONFIG_NAME)
    normalizer = IndexTextNormalizer(section.get("normalizer_language"))
    parts = feature_model_parts(paths, run.base.sha256, normalizer)
    run.extra["feature_fingerprint"] = _feature_fingerprint(parts)
    parts["features"] = run.extra["feature_fingerprint"]
    where = run.feature_device or device()

    def featurizer() -> BatchFeaturizer:
        semantic = SemanticFeatures(paths, indextts_config["semantic_codec"], where, paths.w2v_layer)
        base_tokens = run.base.state_dict["text_embedding.weight"].shape[0] - 1
        gpt, _ = load_unified_voice(run.base.state_dict, indextts_config, base_tokens)
        return BatchFeaturizer(semantic, gpt.to(where), normalizer, run.tokenizer)

    source = IndexTTSFeatures(parts, _Lazy(featurizer))
    run.feature_build = build_feature_cache(source, manifest, run.tokenizer, run.cache_root, run.val_ratio,
                                            feature_batch_size(section, where, "indextts"), split_by=run.split_by,
                                            shard=run.feature_shard)
    if run.feature_build.complete:
        build_pairs(run.feature_build.path, run.prompts_per_target)
    return run.feature_build.path


def imported_cache(folder: Path, run: Any) -> Path:
    """Return an imported feature cache folder (`dataset import --format indextts-processed`) for the run.

    Raises InputError when it is not an IndexTTS2 cache or its text ids came from another tokenizer.
    """
    index = open_cache(folder, (CACHE_FORMAT,)).data
    made_with = index["tokenizer"]["fingerprint"]
    if made_with != run.tokenizer.fingerprint:
        raise InputError(
            f"{folder}: its text ids came from tokenizer {made_with[:16]} ({index['tokenizer']['path']}), the run uses "
            f"{run.tokenizer.fingerprint[:16]} ({run.tokenizer.path}). Import the folder again with --tokenizer {run.tokenizer.path}."
        )
    run.extra["feature_fingerprint"] = index["fingerprint"]
    return folder


def _feature_fingerprint(parts: dict[str, str]) -> str:
    import hashlib
    import json

    keys = ("front_end", "w2v_bert", "w2v_layer", "w2v_stats", "semantic_codec", "gpt")
    return hashlib.sha256(json.dumps({k: parts[k] for k in keys}, sort_keys=True).encode()).hexdigest()[:16]


class _Lazy:
    """Build the featurizer on the first clip that needs computing (a complete cache loads no model)."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory
        self.featurizer: BatchFeaturizer | None = None

    def __call__(self, rows: list[Any]) -> list[Any]:
        if self.featurizer is None:
            self.featurizer = self.factory()
        return self.featurizer(rows)
