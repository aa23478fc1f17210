"""Chatterbox features: the published feature models and the fingerprinted feature cache.

Per clip, as `ChatterboxMultilingualTTS.prepare_conditionals` / `generate` prepare them: S3 speech
tokens of the whole clip (16 kHz in, 25 tokens/s, 6561 codes), the conditioning prompt tokens
(the first 6 s tokenised with `max_len=150`), the VoiceEncoder's 256-d embedding, and the text
ids after `chatterbox_text.prepare_text`. The S3 tokenizer's weights are the `tokenizer.*`
tensors of `s3gen.pt`; its shape (layers from the keys, width from the shapes) is read from
them, so a reduced test model and the published one load through the same code.

The cache lives in `cache/<fingerprint>/` (fingerprint: tokenizer, each feature model's file
hash, text-preparation version, manifest, val ratio) with the index layout of
`core.data.cache`, so `open_cache`, `pairs.json` and the doctor's cache checks apply to it.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.audio import read_audio
from core.data.cache import CACHE_FORMAT, INDEX_NAME, ITEMS_DIR, _histogram, open_cache, read_checked_item, write_item
from core.data.manifest import read_manifest
from core.data.splits import split_of
from core.errors import InputError
from core.families.chatterbox_text import TEXT_PREP_VERSION, text_ids
from core.fsutil import atomic_write_json, sha256_file
from core.progress import Progress
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


def item_bytes(text: list[int], features: dict[str, np.ndarray]) -> bytes:
    """Return the `.npz` bytes of one item: text_ids int32, codes int32 (speech tokens), prompt int32, speaker_emb float32."""
    buffer = io.BytesIO()
    np.savez(buffer, text_ids=np.asarray(text, dtype=np.int32), codes=features["speech"].astype(np.int32),
             prompt=features["prompt"].astype(np.int32), speaker_emb=features["speaker_emb"].astype(np.float32))
    return buffer.getvalue()


def load_features(cache_dir: Path, entry: dict[str, Any]) -> dict[str, np.ndarray]:
    """Return the arrays of one cached item. Raises InputError when it is missing, corrupt or unreadable."""
    return read_checked_item(cache_dir / entry["file"], entry["sha256"], ITEM_KEYS,
                             "Delete it and run `train` (or `preprocess`) again to rebuild it.")


def cache_fingerprint(tokenizer: Tokenizer, features: str, manifest_sha: str, val_ratio: float) -> str:
    """Return the sha256 naming the feature cache folder."""
    key = json.dumps([CACHE_FORMAT, FEATURE_FORMAT, tokenizer.fingerprint, features, TEXT_PREP_VERSION, manifest_sha, val_ratio])
    return hashlib.sha256(key.encode()).hexdigest()


def _entry(row: Any, file: str, val_ratio: float, ids: list[int], sha: str, clip: dict[str, np.ndarray]) -> dict[str, Any]:
    return {
        "id": row.id, "file": file, "split": split_of(row.id, val_ratio), "speaker": row.speaker,
        "language": row.language, "n_text": len(ids), "n_codes": int(clip["speech"].shape[0]),
        "n_prompt": int(clip["prompt"].shape[0]), "max_id": max(ids, default=-1),
        "max_speech_id": int(clip["speech"].max(initial=-1)), "sha256": sha,
    }


def _finished_item(path: Path) -> tuple[str, dict[str, np.ndarray]] | None:
    """Return (sha256, arrays as clip features) of an item an interrupted build already wrote, or None."""
    if not path.is_file():
        return None
    data = path.read_bytes()
    try:
        with np.load(io.BytesIO(data)) as arrays:
            clip = {"speech": arrays["codes"], "prompt": arrays["prompt"], "speaker_emb": arrays["speaker_emb"]}
    except (OSError, ValueError, KeyError):
        return None
    return hashlib.sha256(data).hexdigest(), clip


def build_feature_cache(
    manifest: Path, tokenizer: Tokenizer, files: dict[str, Path], output_root: Path, val_ratio: float,
    device: torch.device | None = None, batch_size: int = 1,
) -> Path:
    """Build (or reuse) `output_root/<fingerprint>/` for the manifest; return the folder.

    Clips go through the feature models `batch_size` at a time (`batch_features`); the batch
    size does not change the features, so it is not part of the fingerprint. Items an
    interrupted build already wrote (atomically, named by clip id) are reused, so it continues.
    A clip whose text uses a language the tokenizer has no tag for fails the build (InputError);
    unreadable audio is listed in `skipped`. Raises InputError when no clip can be featurised.
    """
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    manifest = manifest.resolve()
    rows, rejects = read_manifest(manifest)
    manifest_sha = sha256_file(manifest)
    features = feature_fingerprint(files)
    fingerprint = cache_fingerprint(tokenizer, features, manifest_sha, val_ratio)
    cache_dir = output_root.resolve() / fingerprint
    if (cache_dir / INDEX_NAME).is_file():
        return cache_dir
    (cache_dir / ITEMS_DIR).mkdir(parents=True, exist_ok=True)
    models: FeatureModels | None = None
    start = time.monotonic()
    entries: dict[str, dict[str, Any]] = {}
    skipped = [{"id": r.id, "line": r.line, "error": r.reason} for r in rejects]
    progress = Progress("chatterbox features", total=len(rows))
    pending: list[tuple[Any, str, list[int], torch.Tensor]] = []

    def flush() -> None:
        nonlocal models
        if not pending:
            return
        models = models or load_feature_models(files).to(device)
        for (row, file, ids, _), clip in zip(pending, batch_features(models, [p[3] for p in pending])):
            entries[row.id] = _entry(row, file, val_ratio, ids, write_item(cache_dir / file, item_bytes(ids, clip)), clip)
            progress.update()
        pending.clear()

    for row in rows:
        ids = text_ids(tokenizer, row.text, row.language)
        file = f"{ITEMS_DIR}/{hashlib.sha256(row.id.encode()).hexdigest()[:24]}.npz"
        finished = _finished_item(cache_dir / file)
        if finished is not None:
            entries[row.id] = _entry(row, file, val_ratio, ids, *finished)
            progress.update()
            continue
        try:
            wav, _ = read_audio(row.path, S3_SR)
        except InputError as exc:
            skipped.append({"id": row.id, "line": row.line, "error": str(exc)})
            progress.update()
            continue
        pending.append((row, file, ids, wav))
        if len(pending) >= batch_size:
            flush()
    flush()
    progress.finish()
    items = [entries[row.id] for row in rows if row.id in entries]
    if not items:
        detail = f" First problem: {skipped[0]['error']}" if skipped else ""
        raise InputError(f"{manifest}: no clip could be featurised.{detail}")
    index = {
        "format": CACHE_FORMAT,
        "family": "chatterbox",
        "fingerprint": fingerprint,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "manifest": {"path": str(manifest), "sha256": manifest_sha, "rows": len(rows), "rejected": len(rejects)},
        "tokenizer": {"path": str(tokenizer.path.resolve()), "fingerprint": tokenizer.fingerprint, "size": tokenizer.size},
        "codec": {"fingerprint": features, "files": {k: str(v) for k, v in files.items()}, "codebook_size": SPEECH_CODES, "frame_rate": 25},
        "text_preparation": TEXT_PREP_VERSION,
        "val_ratio": val_ratio,
        "max_text_id": max(e["max_id"] for e in items),
        "max_speech_id": max(e["max_speech_id"] for e in items),
        "histograms": {"n_text": _histogram([e["n_text"] for e in items]), "n_codes": _histogram([e["n_codes"] for e in items])},
        "splits": {s: sum(1 for e in items if e["split"] == s) for s in ("train", "val")},
        "skipped": skipped,
        "seconds": round(time.monotonic() - start, 3),
        "items": items,
    }
    atomic_write_json(cache_dir / INDEX_NAME, index)
    open_cache(cache_dir)
    return cache_dir
