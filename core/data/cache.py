"""The fingerprinted preprocessing cache: text ids, speech codes and a speaker reference per clip.

`build_cache` writes `OUTPUT_ROOT/<fingerprint>/` with `index.json` and one `.npz` per clip in
`items/`. The fingerprint covers the tokenizer, the codec, the text normaliser version (and its
upper-casing), the val ratio and the manifest bytes, so a different tokenizer always gets a
new folder. Items are written atomically in parallel worker processes; each finished item is
appended to `journal.jsonl`, so an interrupted build resumes, and every reused item is checked
against its sha256 so a corrupt one is rebuilt.
"""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from core.errors import InputError
from core.fsutil import atomic_write_json, sha256_file
from core.data.manifest import ManifestRow, read_manifest
from core.progress import Progress
from core.data.splits import split_of
from core.text import NORMALIZER_NAME, NORMALIZER_VERSION
from core.tokenizers.tokenizer import Tokenizer, load_tokenizer

CACHE_FORMAT = "linguaforge-cache-1"
INDEX_NAME = "index.json"
JOURNAL_NAME = "journal.jsonl"
ITEMS_DIR = "items"
HISTOGRAM_BINS = 10
#: index formats with this cache's `tokenizer`, `codec`, `max_text_id`, `histograms` and `items`
#: fields, which the doctor's cache checks read (the IndexTTS2 family's feature cache is one).
SHARED_INDEX_FORMATS = (CACHE_FORMAT, "linguaforge-indextts-cache-1")


@dataclass
class CacheIndex:
    """A built cache: its folder and the parsed index.json."""

    path: Path
    data: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        """The cache fingerprint (also the folder name)."""
        return self.data["fingerprint"]

    @property
    def items(self) -> list[dict[str, Any]]:
        """Item entries: id, file, split, speaker, language, n_text, n_codes, sha256."""
        return self.data["items"]

    @property
    def tokenizer_fingerprint(self) -> str:
        """sha256 of the tokenizer file the text ids came from."""
        return self.data["tokenizer"]["fingerprint"]

    @property
    def codec_fingerprint(self) -> str:
        """Fingerprint of the codec the speech codes came from."""
        return self.data["codec"]["fingerprint"]

    @property
    def max_text_id(self) -> int:
        """The largest text id in any item (-1 for an empty cache)."""
        return int(self.data["max_text_id"])


@dataclass
class CacheInfo:
    """What one `build_cache` call did."""

    path: Path
    fingerprint: str
    items: int
    built: int
    reused: int
    rebuilt: int
    skipped: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready report."""
        rate = self.built / self.seconds if self.seconds > 0 else None
        return {
            "path": str(self.path),
            "fingerprint": self.fingerprint,
            "items": self.items,
            "built": self.built,
            "reused": self.reused,
            "rebuilt": self.rebuilt,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
            "clips_per_s": None if rate is None else round(rate, 1),
        }


def wants_uppercase(tokenizer: Tokenizer) -> bool:
    """Return True when the tokenizer was trained on upper-case text (as IndexTTS2's was).

    Decided from its pieces: ten times more pieces with upper-case than lower-case Latin letters.
    """
    pieces = tokenizer.pieces()
    upper = sum(1 for p in pieces if re.search("[A-Z]", p))
    lower = sum(1 for p in pieces if re.search("[a-z]", p))
    return upper > 10 * max(lower, 1)


def cache_fingerprint(
    tokenizer_fingerprint: str, codec_fingerprint: str, normalizer: str, manifest_sha256: str, val_ratio: float
) -> str:
    """Return the sha256 hex digest naming a cache folder."""
    key = json.dumps(
        [CACHE_FORMAT, tokenizer_fingerprint, codec_fingerprint, normalizer, manifest_sha256, val_ratio]
    )
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def item_bytes(text_ids: np.ndarray, codes: np.ndarray, ref_mel: np.ndarray) -> bytes:
    """Return the `.npz` bytes of one item (text_ids int32, codes int32, ref_mel float16)."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        text_ids=text_ids.astype(np.int32),
        codes=codes.astype(np.int32),
        ref_mel=ref_mel.astype(np.float16),
    )
    return buffer.getvalue()


def write_item(path: Path, data: bytes) -> str:
    """Write item bytes to `path` atomically (temp file + os.replace); return their sha256."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return hashlib.sha256(data).hexdigest()


class ItemBuilder:
    """Turns a manifest row into a cache item; one per worker process."""

    def __init__(self, tokenizer_path: str, codec_path: str, uppercase: bool) -> None:
        from core.speech.codec import load_codec

        self.tokenizer = load_tokenizer(tokenizer_path)
        self.codec = load_codec(codec_path)
        self.uppercase = uppercase

    def build(self, job: dict[str, Any]) -> dict[str, Any]:
        """Return the item entry for `job` after writing its file, or {id, error} when it fails."""
        from core.audio import read_audio
        from core.text import normalize_text

        try:
            wav = read_audio(job["audio"], self.codec.sample_rate)[0]
        except InputError as exc:
            return {"id": job["id"], "line": job["line"], "error": str(exc)}
        mel = self.codec.mel(wav)
        codes = self.codec.quantize(mel).numpy()
        text_ids = np.asarray(self.tokenizer.encode(normalize_text(job["text"], job["language"], self.uppercase)))
        if text_ids.size == 0 or codes.size == 0:
            return {"id": job["id"], "line": job["line"], "error": "no text ids or no speech frames"}
        sha = write_item(Path(job["dest"]), item_bytes(text_ids, codes, mel.numpy()))
        entry = {k: job[k] for k in ("id", "file", "split", "speaker", "language")}
        entry.update(n_text=int(text_ids.size), n_codes=int(codes.size), max_id=int(text_ids.max()), sha256=sha)
        return entry


_WORKER: ItemBuilder | None = None


def _init_worker(tokenizer_path: str, codec_path: str, uppercase: bool) -> None:
    import torch

    global _WORKER
    torch.set_num_threads(1)
    _WORKER = ItemBuilder(tokenizer_path, codec_path, uppercase)


def _run_job(job: dict[str, Any]) -> dict[str, Any]:
    assert _WORKER is not None
    return _WORKER.build(job)


def _read_journal(path: Path) -> dict[str, dict[str, Any]]:
    entries: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return entries
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and "sha256" in entry and "id" in entry:
            entries[entry["id"]] = entry
    return entries


def _valid(cache_dir: Path, entry: dict[str, Any]) -> bool:
    path = cache_dir / entry["file"]
    return path.is_file() and sha256_file(path) == entry["sha256"]


def _histogram(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"min": 0, "max": 0, "mean": 0.0, "p95": 0, "edges": [], "counts": []}
    counts, edges = np.histogram(values, bins=HISTOGRAM_BINS)
    return {
        "min": int(min(values)),
        "max": int(max(values)),
        "mean": round(float(np.mean(values)), 2),
        "p95": int(np.percentile(values, 95)),
        "edges": [round(float(e), 1) for e in edges],
        "counts": [int(c) for c in counts],
    }


def _jobs(rows: list[ManifestRow], cache_dir: Path, val_ratio: float) -> list[dict[str, Any]]:
    from core.data.importing import safe_file_stem

    jobs = []
    for row in rows:
        file = f"{ITEMS_DIR}/{safe_file_stem(row.id)}.npz"
        jobs.append(
            {
                "id": row.id,
                "line": row.line,
                "audio": str(row.path),
                "text": row.text,
                "language": row.language,
                "speaker": row.speaker,
                "split": split_of(row.id, val_ratio),
                "file": file,
                "dest": str(cache_dir / file),
            }
        )
    return jobs


def _pool_context() -> multiprocessing.context.BaseContext:
    """Return `fork` while this process runs a single thread, else `forkserver`.

    Forking a process that runs other threads (a job worker, TensorBoard writers, a web server)
    can copy a lock that one of them holds, and the pool worker then waits on it forever; the
    fork server forks from a clean single-threaded process instead.
    """
    import threading

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


def _execute(jobs: list[dict[str, Any]], init_args: tuple[str, str, bool], workers: int) -> Iterator[dict[str, Any]]:
    if workers <= 1 or len(jobs) < 2:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # per-clip tensors are small; intra-op threads only add overhead
        try:
            builder = ItemBuilder(*init_args)
            yield from (builder.build(job) for job in jobs)
        finally:
            torch.set_num_threads(threads)
        return
    context = _pool_context()
    chunk = max(1, min(32, len(jobs) // (workers * 8)))
    with context.Pool(workers, initializer=_init_worker, initargs=init_args) as pool:
        yield from pool.imap_unordered(_run_job, jobs, chunksize=chunk)


def build_cache(
    manifest: str | os.PathLike[str],
    tokenizer_path: str | os.PathLike[str],
    codec_path: str | os.PathLike[str],
    output_root: str | os.PathLike[str],
    workers: int | None = None,
    val_ratio: float = 0.05,
    uppercase: bool | None = None,
) -> CacheInfo:
    """Build (or complete, or repair) the cache of `manifest`; return what was done.

    `uppercase` None decides from the tokenizer (`wants_uppercase`). Rows the manifest rejects
    and clips that fail are listed in `skipped`, never fatal. Raises InputError when the
    manifest, tokenizer or codec cannot be loaded, or no row can be cached.
    """
    from core.speech.codec import load_codec

    start = time.monotonic()
    manifest = Path(manifest).resolve()
    tokenizer = load_tokenizer(tokenizer_path)
    codec = load_codec(codec_path)
    rows, rejects = read_manifest(manifest)
    upper = wants_uppercase(tokenizer) if uppercase is None else uppercase
    normalizer = f"{NORMALIZER_VERSION}{'+upper' if upper else ''}"
    manifest_sha = sha256_file(manifest)
    fingerprint = cache_fingerprint(tokenizer.fingerprint, codec.fingerprint, normalizer, manifest_sha, val_ratio)
    cache_dir = Path(output_root).resolve() / fingerprint
    (cache_dir / ITEMS_DIR).mkdir(parents=True, exist_ok=True)
    jobs = _jobs(rows, cache_dir, val_ratio)
    known = _read_journal(cache_dir / JOURNAL_NAME)
    if (cache_dir / INDEX_NAME).is_file():
        try:
            known.update({e["id"]: e for e in open_cache(cache_dir).items})
        except InputError:
            pass  # a damaged index: its items are built again
    done: dict[str, dict[str, Any]] = {}
    rebuilt = built = 0
    for job in jobs:
        entry = known.get(job["id"])
        if entry is not None and entry.get("file") == job["file"] and _valid(cache_dir, entry):
            done[job["id"]] = entry
        elif entry is not None:
            rebuilt += 1
    reused = len(done)
    pending = [job for job in jobs if job["id"] not in done]
    skipped = [{"id": r.id, "line": r.line, "error": r.reason} for r in rejects]
    progress = Progress("preprocess", total=len(jobs))
    progress.update(reused)
    worker_count = workers if workers is not None else (os.cpu_count() or 1)
    with open(cache_dir / JOURNAL_NAME, "a", encoding="utf-8") as journal:
        for entry in _execute(pending, (str(tokenizer.path), str(codec_path), upper), worker_count):
            progress.update()
            if "error" in entry:
                skipped.append(entry)
                continue
            done[entry["id"]] = entry
            built += 1
            journal.write(json.dumps(entry, ensure_ascii=False) + "\n")
            journal.flush()
    progress.finish()
    items = [done[job["id"]] for job in jobs if job["id"] in done]
    if not items:
        detail = f" First problem: {skipped[0]['error']}" if skipped else ""
        raise InputError(f"{manifest}: no clip could be preprocessed.{detail}")
    index = {
        "format": CACHE_FORMAT,
        "fingerprint": fingerprint,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "manifest": {"path": str(manifest), "sha256": manifest_sha, "rows": len(rows), "rejected": len(rejects)},
        "tokenizer": {"path": str(tokenizer.path.resolve()), "fingerprint": tokenizer.fingerprint, "size": tokenizer.size},
        "codec": {
            "path": str(Path(codec_path).resolve()),
            "fingerprint": codec.fingerprint,
            "codebook_size": codec.codebook_size,
            "frame_rate": codec.frame_rate,
            "n_mels": codec.n_mels,
        },
        "normalizer": {"name": NORMALIZER_NAME, "version": NORMALIZER_VERSION, "uppercase": upper},
        "val_ratio": val_ratio,
        "max_text_id": max(e["max_id"] for e in items),
        "histograms": {
            "n_text": _histogram([e["n_text"] for e in items]),
            "n_codes": _histogram([e["n_codes"] for e in items]),
        },
        "splits": {s: sum(1 for e in items if e["split"] == s) for s in ("train", "val")},
        "skipped": skipped,
        "items": items,
    }
    atomic_write_json(cache_dir / INDEX_NAME, index)
    (cache_dir / JOURNAL_NAME).unlink(missing_ok=True)
    return CacheInfo(
        path=cache_dir,
        fingerprint=fingerprint,
        items=len(items),
        built=built,
        reused=reused,
        rebuilt=rebuilt,
        skipped=skipped,
        seconds=time.monotonic() - start,
    )


def open_cache(cache_dir: str | os.PathLike[str], formats: tuple[str, ...] = (CACHE_FORMAT,)) -> CacheIndex:
    """Return the CacheIndex of a built cache folder whose index format is one of `formats`.

    Raises InputError when index.json is missing, unreadable or of another format.
    """
    path = Path(cache_dir).resolve()
    index_path = path / INDEX_NAME
    if not index_path.is_file():
        raise InputError(f"{path}: no {INDEX_NAME}; not a built cache. Run `preprocess` first.")
    try:
        data = json.loads(index_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{index_path}: unreadable cache index ({exc}). Delete the folder and run `preprocess` again.") from exc
    if not isinstance(data, dict) or data.get("format") not in formats:
        raise InputError(f"{index_path}: not a {CACHE_FORMAT} index. Run `preprocess` again.")
    return CacheIndex(path, data)


def read_checked_item(path: Path, sha256: str, keys: Sequence[str], rebuild: str) -> dict[str, np.ndarray]:
    """Return the arrays `keys` of the .npz cache item at `path` after checking its bytes against `sha256`.

    Raises InputError naming the file when it is missing, fails its checksum or lacks an array;
    the message ends with `rebuild`, the command that rebuilds the item.
    """
    if not path.is_file():
        raise InputError(f"{path}: cache item missing. {rebuild}")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise InputError(f"{path}: cache item fails its checksum (corrupt). {rebuild}")
    try:
        with np.load(io.BytesIO(data)) as npz:
            return {key: npz[key] for key in keys}
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"{path}: unreadable cache item ({exc}). {rebuild}") from None


def load_item(cache_dir: str | os.PathLike[str], entry: dict[str, Any]) -> dict[str, np.ndarray]:
    """Return {text_ids int32 [n], codes int32 [m], ref_mel float16 [frames, n_mels]} of one item.

    Raises InputError naming the file when it is missing, fails its checksum or has the wrong
    shapes; `preprocess` (build_cache) rebuilds such items.
    """
    path = Path(cache_dir) / entry["file"]
    item = read_checked_item(path, entry["sha256"], ("text_ids", "codes", "ref_mel"), "Run `preprocess` again to rebuild it.")
    if item["text_ids"].shape != (entry["n_text"],) or item["codes"].shape != (entry["n_codes"],):
        raise InputError(f"{path}: cache item shapes do not match the index. Run `preprocess` again.")
    return item
