"""Chatterbox features: the published feature models and the fingerprinted feature cache.

Per clip, as `ChatterboxMultilingualTTS.prepare_conditionals` / `generate` prepare them: S3 speech
tokens of the whole clip (16 kHz in, 25 tokens/s, 6561 codes), the conditioning prompt tokens
(the first 6 s tokenised with `max_len=150`), the VoiceEncoder's 256-d embedding, and the text
ids after `chatterbox_text.prepare_text`. The S3 tokenizer's weights are the `tokenizer.*`
tensors of `s3gen.pt`; its shape (layers from the keys, width from the shapes) is read from
them, so a reduced test model and the published one load through the same code.

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
from core.families.chatterbox_text import TEXT_PREP_VERSION, text_ids
from core.fsutil import sha256_file
from core.tokenizers.tokenizer import Tokenizer

S3_SR = 16_000
SPEECH_CODES = 6561
PROMPT_TOKENS = 150
PROMPT_SECONDS = 6
S3_HEAD_DIM = 64
FEATURE_FORMAT = "chatterbox-features-1"


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    from core.checkpoint import load_checkpoint

    return load_checkpoint(path).state_dict


def build_s3_tokenizer(n_state: int, n_layer: int) -> Any:
    """Return the published `S3Tokenizer` class at `n_state` width and `n_layer` blocks.

    (`S3Tokenizer.__init__` drops its `config` argument, so the V2 base is initialised with the
    config and the subclass's mel filterbank and window are registered as it registers them.)
    """
    from chatterbox.models.s3tokenizer.s3tokenizer import S3Tokenizer, _fb
    from s3tokenizer.model_v2 import ModelConfig, S3TokenizerV2

    tokenizer = S3Tokenizer.__new__(S3Tokenizer)
    config = ModelConfig(n_audio_state=n_state, n_audio_head=max(1, n_state // S3_HEAD_DIM), n_audio_layer=n_layer)
    S3TokenizerV2.__init__(tokenizer, "speech_tokenizer_v2_25hz", config)
    tokenizer.n_fft = 400
    filters = _fb(n_freqs=tokenizer.n_fft // 2 + 1, n_mels=config.n_mels, sample_rate=S3_SR, f_min=0,
                  f_max=S3_SR // 2, norm="slaney", mel_scale="slaney").T
    tokenizer.register_buffer("_mel_filters", filters.float())
    tokenizer.register_buffer("window", torch.hann_window(tokenizer.n_fft))
    return tokenizer


def s3_tokenizer_from_s3gen(state: dict[str, torch.Tensor], source: Path) -> Any:
    """Return the S3 tokenizer loaded strictly from the `tokenizer.*` tensors of an S3Gen state dict.

    Raises InputError when they are absent or do not fit the class.
    """
    prefix = "tokenizer."
    sub = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    width_key = "encoder.blocks.0.attn.query.weight"
    if width_key not in sub:
        raise InputError(f"{source}: no S3 tokenizer weights ({prefix}{width_key} missing); is it Chatterbox's s3gen file?")
    n_layer = len({k.split(".")[2] for k in sub if k.startswith("encoder.blocks.")})
    tokenizer = build_s3_tokenizer(int(sub[width_key].shape[0]), n_layer)
    missing, unexpected = tokenizer.load_state_dict(sub, strict=False)
    missing = [k for k in missing if k not in tokenizer.ignore_state_dict_missing]
    if missing or unexpected:
        raise InputError(f"{source}: S3 tokenizer weights do not fit (missing {missing[:3]}, unexpected {unexpected[:3]}).")
    return tokenizer.eval()


def load_voice_encoder(path: Path) -> Any:
    """Return the published `VoiceEncoder` loaded strictly from `path`. Raises InputError when it does not fit."""
    from chatterbox.models.voice_encoder import VoiceEncoder

    encoder = VoiceEncoder()
    try:
        encoder.load_state_dict(_load_tensors(path))
    except RuntimeError as exc:
        raise InputError(f"{path}: not Chatterbox's VoiceEncoder ({str(exc).splitlines()[0]}).") from exc
    return encoder.eval()


@dataclass
class FeatureModels:
    """The loaded feature models and the fingerprint of their files."""

    s3_tokenizer: Any
    voice_encoder: Any
    fingerprint: str
    files: dict[str, str]

    def to(self, device: torch.device) -> "FeatureModels":
        """Move both models to `device`; return self."""
        self.s3_tokenizer.to(device)
        self.voice_encoder.to(device)
        return self


def feature_fingerprint(files: dict[str, Path]) -> str:
    """Return the sha256 over the feature models' file hashes (voice encoder, s3gen) and the format."""
    digest = hashlib.sha256(FEATURE_FORMAT.encode())
    for role in ("voice_encoder", "s3gen"):
        digest.update(sha256_file(files[role]).encode())
    return digest.hexdigest()


def load_feature_models(files: dict[str, Path]) -> FeatureModels:
    """Return the S3 tokenizer and VoiceEncoder from the published files ({role: path})."""
    s3gen = files["s3gen"]
    return FeatureModels(
        s3_tokenizer=s3_tokenizer_from_s3gen(_load_tensors(s3gen), s3gen),
        voice_encoder=load_voice_encoder(files["voice_encoder"]),
        fingerprint=feature_fingerprint(files),
        files={k: str(v) for k, v in files.items()},
    )


@torch.no_grad()
def batch_features(models: FeatureModels, wavs16: list[torch.Tensor]) -> list[dict[str, np.ndarray]]:
    """Return, per 16 kHz clip, {speech (int), prompt (int, ≤150), speaker_emb (float32 [256])}.

    The clips go through the models together: the S3 tokenizer pads their mels and masks the
    padding in every convolution, FSMN memory and attention (`make_non_pad_mask` on the lengths),
    so each clip's tokens are those it gets alone; the VoiceEncoder embeds each clip's own
    fixed-length partials (no padding), averaged per clip.
    """
    audios = [w.numpy().astype(np.float32) for w in wavs16]
    speech, lengths = models.s3_tokenizer.forward(audios)
    prompt, prompt_lengths = models.s3_tokenizer.forward([a[: PROMPT_SECONDS * S3_SR] for a in audios], max_len=PROMPT_TOKENS)
    embeds = np.asarray(models.voice_encoder.embeds_from_wavs(audios, sample_rate=S3_SR), dtype=np.float32)
    return [
        {
            "speech": speech[i, : int(lengths[i])].cpu().numpy(),
            "prompt": prompt[i, : int(prompt_lengths[i])].cpu().numpy(),
            "speaker_emb": embeds[i],
        }
        for i in range(len(audios))
    ]


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
