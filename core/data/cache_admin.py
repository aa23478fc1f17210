"""Listing and cleaning preprocessing caches under a cache root.

A cache (the own codec's or a model family's feature cache) is "unused" when no future build can
select it again: its build never finished (no index.json), or the manifest, tokenizer or (own)
codec it was built from is gone or changed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from core.data.cache import SHARED_INDEX_FORMATS
from core.data.feature_cache import INDEX_NAME, open_cache
from core.errors import InputError
from core.fsutil import sha256_file

_FINGERPRINT = re.compile(r"[0-9a-f]{64}\Z")


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _changed(recorded_path: str, recorded_sha: str, fingerprint_of: Any) -> bool:
    path = Path(recorded_path)
    return not path.is_file() or fingerprint_of(path) != recorded_sha


def stale_reasons(cache_dir: Path) -> list[str]:
    """Return why the cache at `cache_dir` can no longer be reused (empty when it can)."""
    if not (cache_dir / INDEX_NAME).is_file():
        return ["incomplete build (no index.json)"]
    try:
        data = open_cache(cache_dir, SHARED_INDEX_FORMATS).data
    except InputError as exc:
        return [str(exc)]
    from core.speech.codec import load_codec

    def codec_fingerprint(path: Path) -> str:
        try:
            return load_codec(path).fingerprint
        except InputError:
            return ""

    reasons = []
    manifest = data.get("manifest")  # a cache imported from processed features has none
    if manifest is not None and _changed(manifest["path"], manifest["sha256"], sha256_file):
        reasons.append("manifest missing or changed")
    if _changed(data["tokenizer"]["path"], data["tokenizer"]["fingerprint"], sha256_file):
        reasons.append("tokenizer missing or changed")
    if "path" in data["codec"] and _changed(data["codec"]["path"], data["codec"]["fingerprint"], codec_fingerprint):
        reasons.append("codec missing or changed")
    return reasons


def list_caches(root: str | Path) -> list[dict[str, Any]]:
    """Return one record per cache folder under `root`: fingerprint, items, fingerprints, size, state.

    Raises nothing; a missing root lists nothing.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    records = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and _FINGERPRINT.match(p.name)):
        record: dict[str, Any] = {"fingerprint": folder.name, "path": str(folder), "bytes": _folder_bytes(folder)}
        reasons = stale_reasons(folder)
        try:
            data = open_cache(folder, SHARED_INDEX_FORMATS).data
        except InputError:
            data = None  # incomplete or damaged: `reasons` says which
        if data is not None:
            record.update(
                items=len(data["items"]),
                created=data["created"],
                manifest=(data.get("manifest") or {}).get("path"),
                tokenizer=data["tokenizer"]["fingerprint"][:16],
                codec=data["codec"]["fingerprint"][:16],
                max_text_id=data["max_text_id"],
            )
        record["unused"] = bool(reasons)
        record["reasons"] = reasons
        records.append(record)
    return records


def clean_caches(root: str | Path, unused_only: bool) -> list[dict[str, Any]]:
    """Delete cache folders under `root` (all, or only unused ones); return the removed records."""
    removed = []
    for record in list_caches(root):
        if unused_only and not record["unused"]:
            continue
        shutil.rmtree(record["path"])
        removed.append(record)
    return removed
