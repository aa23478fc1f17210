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
from typing import TYPE_CHECKING, Any

import numpy as np

from core.data.feature_cache import CACHE_FORMAT, CacheInfo, Features, Staging, build_feature_cache
from core.data.manifest import ManifestRow
from core.data.shards import Shard
from core.errors import InputError
from core.text import NORMALIZER_NAME, NORMALIZER_VERSION
from core.tokenizers.romanize import base_is_uppercase
from core.tokenizers.tokenizer import Tokenizer, load_tokenizer

if TYPE_CHECKING:
    import torch

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

        results: list[Features] = []
        for row in rows:
            try:
                wav = read_audio(row.path, self.sample_rate)[0]
            except InputError as exc:
                results.append(str(exc))
                continue
            results.append(self.clip_features(row, wav))
        return results

    @property
    def sample_rate(self) -> int:
        """The rate of the waveforms `clip_features` takes (the codec's)."""
        return self._models()[1].sample_rate

    def clip_features(self, row: ManifestRow, wav: torch.Tensor) -> Features:
        """Return {text_ids, codes, ref_mel} of `row` with its waveform `wav` at `sample_rate`, or why it cannot be used."""
        from core.text import normalize_text

        tokenizer, codec = self._models()
        mel = codec.mel(wav)
        text_ids = np.asarray(tokenizer.encode(normalize_text(row.text, row.language, self.uppercase)))
        if not (text_ids.size and mel.shape[0]):
            return "no text ids or no speech frames"
        return {"text_ids": text_ids, "codes": codec.quantize(mel).numpy(), "ref_mel": mel.numpy()}

    def index_fields(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Return the codec (path, fingerprint, codebook, frame rate, mel bins) and normaliser fields."""
        codec = self._models()[1]
        return {"codec": {"path": str(Path(self.codec_path).resolve()), "fingerprint": codec.fingerprint,
                          "codebook_size": codec.codebook_size, "frame_rate": codec.frame_rate, "n_mels": codec.n_mels},
                "normalizer": {"name": NORMALIZER_NAME, "version": NORMALIZER_VERSION, "uppercase": self.uppercase}}


def codec_features(tokenizer_path: str | os.PathLike[str], codec_path: str | os.PathLike[str],
                   uppercase: bool | None = None) -> tuple[Tokenizer, CodecFeatures]:
    """Return (the tokenizer, the own codec's feature source); `uppercase` None decides from the tokenizer
    (`base_is_uppercase`). Raises InputError when the tokenizer cannot be loaded."""
    tokenizer = load_tokenizer(tokenizer_path)
    return tokenizer, CodecFeatures(str(tokenizer.path), str(codec_path), base_is_uppercase(tokenizer) if uppercase is None else uppercase)


def build_cache(manifest: str | os.PathLike[str], tokenizer_path: str | os.PathLike[str], codec_path: str | os.PathLike[str],
                output_root: str | os.PathLike[str], workers: int | None = None, val_ratio: float = 0.05,
                uppercase: bool | None = None, split_by: str = "clip", shard: Shard | None = None,
                device: str | None = None, staged: Path | None = None) -> CacheInfo:
    """Build (or complete, or repair) the own codec's cache of `manifest`; return what was done.

    `uppercase` as `codec_features`; `workers` None uses every CPU; `split_by`, `shard` and `staged` as
    `build_feature_cache`. Rows the manifest rejects and clips that fail are listed in `skipped`. Raises
    InputError when the manifest, tokenizer or codec cannot be loaded, no row can be cached, or `device`
    is not the CPU (the own codec's features run there).
    """
    from core.torch_threads import torch_threads

    if device not in (None, "cpu"):
        raise InputError(f"device {device}: the own codec's features run on the CPU; use cpu (`preprocess --devices "
                         "cpu,cpu` for two processes) or --workers.")
    tokenizer, source = codec_features(tokenizer_path, codec_path, uppercase)
    with torch_threads(1):  # per-clip tensors are small; intra-op threads only add overhead
        return build_feature_cache(source, manifest, tokenizer, output_root, val_ratio, CLIPS_PER_TASK,
                                   workers if workers is not None else (os.cpu_count() or 1), split_by, shard, staged)


class SamePassCache:
    """The own codec's cache built in the import's pass: each kept clip is featurised in the import's worker
    from the samples its wav file holds (`add`), so no clip is decoded twice; `finish` builds the cache of the
    written manifest, taking the staged items in — the items `build_cache` computes from the wav files.

    Use it as a context manager: on leaving, staged items no build took are deleted (an import that failed).
    Raises InputError (on creation, before the import starts) when the tokenizer or codec cannot be loaded.
    """

    def __init__(self, tokenizer_path: str | os.PathLike[str], codec_path: str | os.PathLike[str],
                 output_root: str | os.PathLike[str], val_ratio: float = 0.05) -> None:
        self.tokenizer_path, self.codec_path, self.output_root, self.val_ratio = tokenizer_path, codec_path, output_root, val_ratio
        self.source = codec_features(tokenizer_path, codec_path)[1]
        self.source.fingerprint_parts()  # loads the codec now: a bad one is refused before any clip
        self.staging = Staging.create(output_root, val_ratio)

    def add(self, row: ManifestRow, samples: np.ndarray, sample_rate: int) -> None:
        """Featurise and stage `row` from its waveform `samples` at `sample_rate` (resampled as `read_audio` would)."""
        import torch

        from core.audio import resample

        wav = resample(torch.from_numpy(samples), sample_rate, self.source.sample_rate)
        self.staging.add(self.source, row, self.source.clip_features(row, wav))

    def finish(self, manifest: str | os.PathLike[str], workers: int | None = None) -> CacheInfo:
        """Build the cache of `manifest` with the staged items; return what was done."""
        return build_cache(manifest, self.tokenizer_path, self.codec_path, self.output_root, workers, self.val_ratio,
                           staged=self.staging.folder)

    def __enter__(self) -> "SamePassCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.staging.discard()  # after `finish` the build has taken what it uses
