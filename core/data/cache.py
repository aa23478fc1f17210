"""The own codec's preprocessing cache: text ids, speech codes and a speaker reference per clip.

`build_cache` gives `core.data.feature_cache` the own codec's featuriser (`CodecFeatures`) and
its fingerprint parts (the codec, the text normaliser version and its upper-casing); the engine
fingerprints, journals, resumes and sha-checks the build and writes `index.json`. Clips are
featurised in parallel worker processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.data.feature_cache import CACHE_FORMAT, CacheInfo, Features, build_feature_cache
from core.data.manifest import ManifestRow
from core.data.shards import Shard
from core.errors import InputError
from core.text import NORMALIZER_NAME, NORMALIZER_VERSION
from core.tokenizers.romanize import base_is_uppercase
from core.tokenizers.tokenizer import Tokenizer, load_tokenizer

#: index formats with this cache's `tokenizer`, `codec`, `max_text_id`, `histograms` and `items`
#: fields, which the doctor's cache checks read (every feature-cache engine index has them).
SHARED_INDEX_FORMATS = (CACHE_FORMAT, "linguaforge-indextts-cache-1")
CLIPS_PER_TASK = 16  # clips a pool worker featurises (and writes) per task


@dataclass
class CodecFeatures:
    """The own codec's features: normalised text ids, codec codes and the clip's mel as speaker reference.

    Pickles as its paths only, so pool workers receive it cheaply and load the models once each.
    """

    tokenizer_path: str
    codec_path: str
    uppercase: bool
    format = CACHE_FORMAT
    label = "preprocess"
    dtypes = {"text_ids": np.int32, "codes": np.int32, "ref_mel": np.float16}
    _loaded: tuple[Tokenizer, Any] | None = field(default=None, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_loaded": None}

    def _models(self) -> tuple[Tokenizer, Any]:
        from core.speech.codec import load_codec

        if self._loaded is None:
            self._loaded = (load_tokenizer(self.tokenizer_path), load_codec(self.codec_path))
        return self._loaded

    def fingerprint_parts(self) -> dict[str, str]:
        """Return the codec's fingerprint and the normaliser version (with `+upper` when upper-casing)."""
        return {"codec": self._models()[1].fingerprint,
                "normalizer": f"{NORMALIZER_VERSION}{'+upper' if self.uppercase else ''}"}

    def featurise(self, rows: list[ManifestRow]) -> list[Features]:
        """Return, per row, {text_ids, codes, ref_mel} or why the clip cannot be used (unreadable, empty)."""
        from core.audio import read_audio
        from core.text import normalize_text

        tokenizer, codec = self._models()
        results: list[Features] = []
        for row in rows:
            try:
                mel = codec.mel(read_audio(row.path, codec.sample_rate)[0])
            except InputError as exc:
                results.append(str(exc))
                continue
            text_ids = np.asarray(tokenizer.encode(normalize_text(row.text, row.language, self.uppercase)))
            ok = text_ids.size and mel.shape[0]
            results.append({"text_ids": text_ids, "codes": codec.quantize(mel).numpy(), "ref_mel": mel.numpy()} if ok
                           else "no text ids or no speech frames")
        return results

    def index_fields(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Return the codec (path, fingerprint, codebook, frame rate, mel bins) and normaliser fields."""
        codec = self._models()[1]
        return {"codec": {"path": str(Path(self.codec_path).resolve()), "fingerprint": codec.fingerprint,
                          "codebook_size": codec.codebook_size, "frame_rate": codec.frame_rate, "n_mels": codec.n_mels},
                "normalizer": {"name": NORMALIZER_NAME, "version": NORMALIZER_VERSION, "uppercase": self.uppercase}}


def build_cache(manifest: str | os.PathLike[str], tokenizer_path: str | os.PathLike[str], codec_path: str | os.PathLike[str],
                output_root: str | os.PathLike[str], workers: int | None = None, val_ratio: float = 0.05,
                uppercase: bool | None = None, split_by: str = "clip", shard: Shard | None = None,
                device: str | None = None) -> CacheInfo:
    """Build (or complete, or repair) the own codec's cache of `manifest`; return what was done.

    `uppercase` None decides from the tokenizer (`base_is_uppercase`); `workers` None uses every
    CPU; `split_by` and `shard` as `build_feature_cache`. Rows the manifest rejects and clips that fail
    are listed in `skipped`. Raises InputError when the manifest, tokenizer or codec cannot be loaded, no
    row can be cached, or `device` is not the CPU (the own codec's features run there).
    """
    import torch

    if device not in (None, "cpu"):
        raise InputError(f"device {device}: the own codec's features run on the CPU; use cpu (`preprocess --devices "
                         "cpu,cpu` for two processes) or --workers.")
    tokenizer = load_tokenizer(tokenizer_path)
    source = CodecFeatures(str(tokenizer.path), str(codec_path), base_is_uppercase(tokenizer) if uppercase is None else uppercase)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # per-clip tensors are small; intra-op threads only add overhead
    try:
        return build_feature_cache(source, manifest, tokenizer, output_root, val_ratio, CLIPS_PER_TASK,
                                   workers if workers is not None else (os.cpu_count() or 1), split_by, shard)
    finally:
        torch.set_num_threads(threads)

