"""IndexTTS2 training features in a fingerprinted, resumable cache.

Per clip, as IndexTTS2 computes them: text ids (`IndexTextNormalizer.text_ids`), w2v-BERT 2.0
layer-17 features of the clip read through IndexTTS2's front end (`core.families.indextts_audio`)
→ MaskGCT semantic codes (the targets), and — for when the clip serves as a PROMPT — its speaker
latents (32 × model_dim) from the clip cut at 15 s and its emotion vector from the clip read as
IndexTTS2's emotion front end reads it. Training pairs each target with a different clip of the
same speaker (`pairs.json`). Clips are computed `batch_size` at a time (`BatchFeaturizer`) with
the same results as one at a time.

Folder `<root>/<fingerprint>/`: `index.json`, `journal.jsonl` (one line per finished clip, so
an interrupted build resumes), `items/<n>.npz` and `pairs.json`. The fingerprint covers the
tokenizer, every feature model's file hash (gpt.pth for the frozen conditioning encoders,
w2v-BERT, the stats, the semantic codec), the audio front end's and the normaliser's versions,
the val ratio and the manifest.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import torch

from core.data.cache import read_checked_item
from core.data.manifest import ManifestRow
from core.data.pairs import choose_prompts
from core.data.splits import split_of
from core.errors import InputError
from core.fsutil import atomic_write, atomic_write_json, sha256_file
from core.families.indextts_model import SEMANTIC_CODES
from core.progress import Progress

CACHE_FORMAT = "linguaforge-indextts-cache-1"
INDEX_NAME = "index.json"
JOURNAL_NAME = "journal.jsonl"
PAIRS_NAME = "pairs.json"
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


def features_fingerprint(parts: Mapping[str, str]) -> str:
    """Return the cache fingerprint (first 16 hex digits of a sha256 over `parts`, sorted by name)."""
    payload = json.dumps({"format": CACHE_FORMAT, **dict(sorted(parts.items()))}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def item_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """Return one cache item as `.npz` bytes (text_ids int32, codes int32, condition and emo_vec float32)."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        text_ids=np.asarray(arrays["text_ids"], dtype=np.int32),
        codes=np.asarray(arrays["codes"], dtype=np.int32),
        condition=np.asarray(arrays["condition"], dtype=np.float32),
        emo_vec=np.asarray(arrays["emo_vec"], dtype=np.float32),
    )
    return buffer.getvalue()


def write_item(path: Path, arrays: Mapping[str, np.ndarray]) -> str:
    """Write one item atomically and return the sha256 of its bytes."""
    data = item_bytes(arrays)
    with atomic_write(path) as tmp:
        tmp.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def load_item(cache_dir: str | os.PathLike[str], entry: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Return the arrays of one cached item; raises InputError when the file is missing, corrupt or unreadable."""
    return read_checked_item(Path(cache_dir) / entry["file"], entry["sha256"], ITEM_KEYS,
                             "Delete the cache folder and rebuild it.")


def _read_journal(path: Path) -> dict[str, dict[str, Any]]:
    done: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            done[entry["id"]] = entry
    return done


def _reusable(cache_dir: Path, entry: Mapping[str, Any]) -> bool:
    path = cache_dir / entry["file"]
    return path.is_file() and sha256_file(path) == entry["sha256"]


def write_pairs(cache_dir: Path, items: list[dict[str, Any]], per_target: int, seed: int = 0) -> dict[str, list[str]]:
    """Write `pairs.json` ({target id: [prompt ids]}, same speaker, never itself) and return it."""
    rng = random.Random(seed)
    by_speaker: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        by_speaker.setdefault(item["speaker"], []).append(item)
    pairs = {}
    for item in items:
        prompts = choose_prompts(item, by_speaker[item["speaker"]], per_target, rng)
        if prompts:
            pairs[item["id"]] = prompts
    atomic_write_json(cache_dir / PAIRS_NAME, pairs)
    return pairs


def load_pairs(cache_dir: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Return `pairs.json` of a cache; raises InputError when it is missing."""
    path = Path(cache_dir) / PAIRS_NAME
    if not path.is_file():
        raise InputError(f"{path}: no prompt pairs; rebuild the IndexTTS2 cache (train builds it on demand).")
    return json.loads(path.read_text(encoding="utf-8"))


def open_features(cache_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the parsed index.json of an IndexTTS2 cache; raises InputError when absent or of another format."""
    path = Path(cache_dir) / INDEX_NAME
    if not path.is_file():
        raise InputError(f"{path}: not an IndexTTS2 feature cache (no {INDEX_NAME}).")
    index = json.loads(path.read_text(encoding="utf-8"))
    if index.get("format") != CACHE_FORMAT:
        raise InputError(f"{path}: cache format {index.get('format')!r}, expected {CACHE_FORMAT!r}; rebuild it.")
    return index


BatchFeatures = Callable[[list[ManifestRow]], list[dict[str, np.ndarray]]]


def _histogram(values: list[int]) -> dict[str, int]:
    return {"min": min(values, default=0), "max": max(values, default=0), "count": len(values)}


def _write_entry(number: int, row: ManifestRow, arrays: Mapping[str, np.ndarray], val_ratio: float, cache_dir: Path) -> dict[str, Any]:
    """Write clip `number`'s item file and return its index entry."""
    file = f"items/{number:07d}.npz"
    return {
        "id": row.id,
        "file": file,
        "split": split_of(row.id, val_ratio),
        "speaker": row.speaker,
        "language": row.language,
        "text": row.text,
        "n_text": int(arrays["text_ids"].size),
        "n_codes": int(arrays["codes"].size),
        "max_id": int(np.max(arrays["text_ids"], initial=-1)),
        "max_code": int(np.max(arrays["codes"], initial=-1)),
        "sha256": write_item(cache_dir / file, arrays),
    }


def build_features(
    rows: Iterable[ManifestRow],
    output_root: str | os.PathLike[str],
    fingerprint_parts: Mapping[str, str],
    featurize: BatchFeatures,
    tokenizer: Any,
    val_ratio: float = 0.05,
    prompts_per_target: int = 1,
    progress_label: str = "indextts features",
    batch_size: int = 1,
) -> Path:
    """Return the cache folder for these rows, computing only clips not already cached.

    `featurize(rows)` returns the arrays of ITEM_KEYS for each of up to `batch_size` clips
    (the batch size does not change the features, so it is not in the fingerprint). Finished
    clips are journaled one by one, so an interrupted build resumes; a journaled item whose
    bytes changed is rebuilt. The index carries the same `tokenizer`, `codec`, `max_text_id`,
    `histograms` and `items` fields as the LinguaForge cache, so the doctor's cache checks read both.
    """
    rows = list(rows)
    parts = dict(fingerprint_parts, tokenizer=tokenizer.fingerprint, val_ratio=str(val_ratio))
    fingerprint = features_fingerprint(parts)
    cache_dir = Path(output_root) / fingerprint
    (cache_dir / "items").mkdir(parents=True, exist_ok=True)
    journal_path = cache_dir / JOURNAL_NAME
    done = _read_journal(journal_path)
    progress = Progress(progress_label, total=len(rows))
    entries: dict[int, dict[str, Any]] = {}
    pending: list[tuple[int, ManifestRow]] = []
    with journal_path.open("a", encoding="utf-8") as journal:

        def flush() -> None:
            if not pending:
                return
            for (number, row), arrays in zip(pending, featurize([row for _, row in pending])):
                entries[number] = _write_entry(number, row, arrays, val_ratio, cache_dir)
                journal.write(json.dumps(entries[number], ensure_ascii=False) + "\n")
                journal.flush()
                progress.update(1)
            pending.clear()

        for number, row in enumerate(rows):
            entry = done.get(row.id)
            if entry is not None and _reusable(cache_dir, entry):
                entries[number] = entry
                progress.update(1)
                continue
            pending.append((number, row))
            if len(pending) >= batch_size:
                flush()
        flush()
    progress.finish()
    items = [entries[number] for number in range(len(rows))]
    write_index(cache_dir, fingerprint, parts, tokenizer, items, prompts_per_target)
    return cache_dir


def write_index(
    cache_dir: Path, fingerprint: str, parts: Mapping[str, str], tokenizer: Any, items: list[dict[str, Any]], prompts_per_target: int
) -> None:
    """Write `pairs.json` and `index.json` of a finished IndexTTS2 cache."""
    write_pairs(cache_dir, items, prompts_per_target)
    atomic_write_json(cache_dir / INDEX_NAME, {
        "format": CACHE_FORMAT,
        "fingerprint": fingerprint,
        "parts": dict(parts),
        "tokenizer": {"path": str(tokenizer.path), "fingerprint": tokenizer.fingerprint, "size": tokenizer.size},
        "codec": {"fingerprint": parts.get("features", ""), "codebook_size": SEMANTIC_CODES},
        "max_text_id": max((e["max_id"] for e in items), default=-1),
        "max_code": max((e["max_code"] for e in items), default=-1),
        "histograms": {"n_text": _histogram([e["n_text"] for e in items]), "n_codes": _histogram([e["n_codes"] for e in items])},
        "splits": {s: sum(1 for e in items if e["split"] == s) for s in ("train", "val")},
        "items": items,
    })


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
