"""Import a folder made by the community IndexTTS2 scripts (`preprocess_data.py`, `build_gpt_prompt_pairs.py`).

Layout read: `train_manifest.jsonl` / `val_manifest.jsonl`, one JSON object per clip with `id`,
`text`, `speaker`, `language`, and paths relative to the folder: `codes_path` (semantic codes,
`.npy`), `condition_path` (32 × model_dim speaker latents), `emo_vec_path` (emotion vector after
`emovec_layer`/`emo_layer`) and `text_ids_path` (the ids the script stored). Every clip is
validated on its own (a bad one is rejected with its line and reason); a path that leads outside
the folder (`../`, an absolute path elsewhere, a symlink out) is such a reason: nothing outside
the folder is read. The text ids are re-derived from the text with the run's tokenizer and
IndexTTS2's front end; when they differ from the stored ids, the folder was built with another
tokenizer (the stale-cache failure of the field reports) and the import is refused with the reason.
The result is a LinguaForge IndexTTS2 feature cache (same format as `train` builds), with prompt
pairs rebuilt per speaker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.confine import inside_folder
from core.data.feature_cache import ITEMS_DIR, fingerprint_of, write_index, write_item
from core.data.manifest import Reject
from core.data.pairs import build_pairs
from core.errors import InputError
from core.families.indextts.gpt import CONDITIONING_LATENTS, SEMANTIC_CODES, IndexTextNormalizer
from core.families.indextts.features import CACHE_FORMAT, IndexTTSFeatures
from core.fsutil import sha256_file
from core.structured import loads_json, read_json_file

MANIFESTS = {"train": "train_manifest.jsonl", "val": "val_manifest.jsonl"}
PATH_KEYS = ("codes_path", "condition_path", "emo_vec_path", "text_ids_path")


@dataclass
class ProcessedImport:
    """What `import_processed` wrote: the cache folder, how many clips, and the rejects."""

    cache_dir: Path
    clips: int
    rejects: list[Reject] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready summary."""
        return {"cache": str(self.cache_dir), "clips": self.clips, "rejected": len(self.rejects),
                "rejects": [r.to_dict() for r in self.rejects]}


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"unreadable {path.name} ({str(exc).splitlines()[0]})") from None


def _clip(folder: Path, record: dict[str, Any], width: int | None) -> dict[str, np.ndarray]:
    missing = [k for k in ("id", "text", *PATH_KEYS) if not record.get(k)]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    if not isinstance(record["text"], str):
        raise ValueError(f"text must be a string, not {type(record['text']).__name__}")
    arrays = {}
    for key in PATH_KEYS:
        try:
            path = inside_folder(folder, record[key], key)  # the one check of a path a folder's metadata names
        except InputError as exc:
            raise ValueError(str(exc)) from None
        if not path.is_file():
            raise ValueError(f"{key} {path} does not exist")
        arrays[key[: -len("_path")]] = _load_npy(path)
    codes, condition, emo = arrays["codes"].reshape(-1), arrays["condition"], arrays["emo_vec"].reshape(-1)
    if codes.size == 0 or not np.issubdtype(codes.dtype, np.integer) or codes.min() < 0 or codes.max() >= SEMANTIC_CODES:
        raise ValueError(f"codes must be integers in 0..{SEMANTIC_CODES - 1} (found {codes.dtype}, {codes.min() if codes.size else 'empty'}..{codes.max() if codes.size else ''})")
    if condition.ndim != 2 or condition.shape[0] != CONDITIONING_LATENTS:
        raise ValueError(f"condition has shape {condition.shape}, expected ({CONDITIONING_LATENTS}, model_dim)")
    if emo.shape[0] != condition.shape[1] or (width is not None and emo.shape[0] != width):
        raise ValueError(f"emo_vec width {emo.shape[0]} does not match the condition width {condition.shape[1] if width is None else width}")
    return {"text_ids": arrays["text_ids"].reshape(-1), "codes": codes, "condition": condition, "emo_vec": emo}


def import_processed(
    source: str | os.PathLike[str], tokenizer: Any, output: str | os.PathLike[str],
    normalizer: IndexTextNormalizer | None = None, prompts_per_target: int = 1,
) -> ProcessedImport:
    """Return the feature cache written into the folder `output` from a community processed folder.

    A run uses it with `data.manifest: <output>` (a cache folder in place of a manifest).
    Raises InputError when the folder has no manifest, no clip survives, or the stored text ids
    were made with another tokenizer.
    """
    folder = Path(source).resolve()
    if not folder.is_dir():
        raise InputError(f"{folder}: input folder not found.")
    normalizer = normalizer or IndexTextNormalizer()
    found = {split: folder / name for split, name in MANIFESTS.items() if (folder / name).is_file()}
    if not found:
        raise InputError(f"{folder}: no {' or '.join(MANIFESTS.values())}; not a folder made by IndexTTS2's preprocess_data.py.")
    rejects: list[Reject] = []
    clips: list[tuple[dict[str, Any], dict[str, np.ndarray]]] = []
    width: int | None = None
    mismatched: list[str] = []
    for split, manifest in found.items():
        for number, raw in enumerate(manifest.read_bytes().splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                record = loads_json(raw, f"{manifest} line {number}")
                arrays = _clip(folder, record, width)
            except (ValueError, AttributeError, TypeError) as exc:  # not UTF-8 or JSON, a field of the wrong type
                rejects.append(Reject(str(manifest), number, str(exc), None))
                continue
            width = arrays["condition"].shape[1]
            derived = np.asarray(normalizer.text_ids(record["text"], tokenizer), dtype=np.int32)
            if not np.array_equal(derived, arrays["text_ids"].astype(np.int32)):
                mismatched.append(f"{manifest.name}:{number} ({record['id']}: stored {arrays['text_ids'][:6].tolist()}…, "
                                  f"{tokenizer.path.name} gives {derived[:6].tolist()}…)")
            arrays["text_ids"] = derived
            entry = {"id": str(record["id"]), "split": split, "speaker": str(record.get("speaker") or "unknown"),
                     "language": str(record.get("language") or ""), "text": record["text"]}
            clips.append((entry, arrays))
    if mismatched:
        stats = folder / "stats.json"
        named = read_json_file(stats).get("tokenizer") if stats.is_file() else None
        raise InputError(
            f"{folder}: built with another tokenizer{f' ({named})' if named else ''}: {len(mismatched)} of {len(clips)} clips' "
            f"stored text ids differ from {tokenizer.path} with IndexTTS2's front end, first {mismatched[0]}. Training on them "
            "would feed wrong ids. Import with the tokenizer it was built with, or build features from the audio with `train`."
        )
    if not clips:
        first = f" First problem: {rejects[0].message()}" if rejects else ""
        raise InputError(f"{folder}: no usable clip.{first}")
    parts = {"source": ";".join(sha256_file(p) for p in found.values()), "normalizer": normalizer.version, "tokenizer": tokenizer.fingerprint}
    features = IndexTTSFeatures(parts)
    cache_dir = Path(output).resolve()
    (cache_dir / ITEMS_DIR).mkdir(parents=True, exist_ok=True)
    items = []
    for number, (entry, arrays) in enumerate(clips):
        file = f"{ITEMS_DIR}/{number:07d}.npz"
        arrays = {key: np.asarray(arrays[key], dtype=dtype) for key, dtype in features.dtypes.items()}
        entry.update(file=file, n_text=int(arrays["text_ids"].size), n_codes=int(arrays["codes"].size),
                     max_id=int(arrays["text_ids"].max(initial=-1)), max_code=int(arrays["codes"].max()),
                     sha256=write_item(cache_dir / file, arrays))
        items.append(entry)
    write_index(cache_dir, features, fingerprint_of(CACHE_FORMAT, parts), parts, tokenizer, items)
    build_pairs(cache_dir, prompts_per_target)
    return ProcessedImport(cache_dir, len(items), rejects)
