"""The one feature-cache engine: a fingerprinted folder of per-clip `.npz` items for any model family.

A `FeatureSource` (the own codec's `CodecFeatures` in `core.data.cache`, `ChatterboxFeatures` and
`IndexTTSFeatures` in `core.families`) gives only its fingerprint parts and a batch featuriser;
`build_feature_cache` does the rest the same way for all: the folder `<root>/<fingerprint>/` (a sha256
over the source's format and parts, the tokenizer, the manifest bytes and the val ratio), items written
atomically as `items/<hash of the clip id>.npz` (by the worker that featurised them), one `journal.jsonl`
line per finished item so an interrupted build resumes, every recorded item checked against its sha256
(a corrupt one is rebuilt; an item written but never recorded is adopted as it is), and `index.json`
with the entries, length histograms and splits. Clips that fail are listed in `skipped`; a build with
no usable clip is refused. `load_item` reads any family's item back, checked.

Several processes may build one cache (`core.data.shards`): each shard featurises its batches, keeps
its own journal (`journal.<I>of<N>.jsonl`, failures included) and, once every clip of the manifest
is built or refused by some shard, writes the merged `index.json` — the one a single process writes,
entry for entry. Items are written byte-deterministically (fixed zip member times), so each item's
bytes do not depend on which process or when it was built.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import threading
import time
import uuid
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol, Sequence, TypeVar

import numpy as np

from core.data.manifest import ManifestRow, read_manifest
from core.data.shards import Shard
from core.data.splits import speakers_held_out, split_of
from core.data.workers import ordered_map
from core.errors import InputError
from core.fsutil import atomic_write_json, fresh_temp, open_append, replace_bytes, sha256_file
from core.progress import Progress
from core.structured import StructureError, loads_json, read_json_file

INDEX_NAME = "index.json"
JOURNAL_NAME = "journal.jsonl"
SHARDS_NAME = "shards.json"  # what the shards of a build agreed on (its batch size) while it runs
ITEMS_DIR = "items"
STAGING_PREFIX = ".staging-"  # folders of items featurised before their manifest existed (`Staging`)
ITEM_TIME = (1980, 1, 1, 0, 0, 0)  # every item's zip member time: an item's bytes depend on its arrays only
#: the default index format (the own codec's and Chatterbox's caches); a source may name its own
CACHE_FORMAT = "linguaforge-cache-1"
HISTOGRAM_BINS = 10
#: clips per featuriser call when a family's settings leave `feature_batch_size` null (bench/family_features.py)
DEFAULT_BATCH = {"cuda": 16, "cpu": 8}
#: what a featuriser returns per clip: its arrays, or why the clip cannot be used
Features = dict[str, np.ndarray] | str
T = TypeVar("T")


class FeatureSource(Protocol):
    """What a family gives the engine: `format` names its index, `label` its progress line, `dtypes` its
    item arrays (always 1-D `text_ids` and `codes`, then its own). `featurise` returns per row its arrays
    or why the clip cannot be used, whatever the batch; `index_fields` adds the family's own fields
    (e.g. `codec`) to the index."""

    format: str
    label: str
    dtypes: Mapping[str, Any]

    def fingerprint_parts(self) -> dict[str, str]: ...
    def featurise(self, rows: list[ManifestRow]) -> list[Features]: ...
    def index_fields(self, items: list[dict[str, Any]]) -> dict[str, Any]: ...


@dataclass
class CacheIndex:
    """A built cache: its folder and the parsed index.json."""

    path: Path
    data: dict[str, Any]

    items = property(lambda self: self.data["items"], doc="Item entries: id, file, split, speaker, language, text, "
                     "n_text, n_codes, max_id, max_code, sha256.")
    tokenizer_fingerprint = property(lambda self: self.data["tokenizer"]["fingerprint"],
                                     doc="sha256 of the tokenizer file the text ids came from.")
    codec_fingerprint = property(lambda self: self.data["codec"]["fingerprint"],
                                 doc="Fingerprint of the codec or feature models the codes came from.")
    max_text_id = property(lambda self: int(self.data["max_text_id"]), doc="The largest text id in any item (-1 for an empty cache).")


@dataclass
class CacheInfo:
    """What one `build_feature_cache` call did. A shard's build is `complete` once every clip of the
    manifest is built or skipped by some shard (the index is then written); `missing` counts the
    clips no shard has finished yet."""

    path: Path
    fingerprint: str
    items: int
    built: int
    reused: int
    rebuilt: int
    skipped: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    shard: str | None = None
    complete: bool = True
    missing: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready report."""
        return {**asdict(self), "path": str(self.path), "seconds": round(self.seconds, 3),
                "clips_per_s": round(self.built / self.seconds, 1) if self.seconds > 0 else None}


def feature_batch_size(section: Mapping[str, Any] | None, device: Any, family: str) -> int:
    """Return the clips per featuriser call: the family section's `feature_batch_size`, else DEFAULT_BATCH for the device.

    Raises InputError when the setting is not a positive integer.
    """
    value = (section or {}).get("feature_batch_size")
    if value is None:
        return DEFAULT_BATCH["cuda" if str(device).startswith("cuda") else "cpu"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"settings families.{family}.feature_batch_size is {value!r}; set a positive integer "
                         "(clips per forward pass) or null for the device default.")
    return value


def batches(items: Sequence[T], size: int) -> Iterator[list[T]]:
    """Yield consecutive lists of at most `size` (at least 1) items, in order."""
    size = max(1, size)
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def fingerprint_of(format: str, parts: Mapping[str, str]) -> str:
    """Return the sha256 hex digest naming the cache folder of `parts` in index format `format`."""
    return hashlib.sha256(json.dumps({"format": format, **parts}, sort_keys=True).encode()).hexdigest()


def item_file(clip_id: str) -> str:
    """Return the item path of a clip inside its cache folder (named by a hash of the id, so never shared)."""
    return f"{ITEMS_DIR}/{hashlib.sha256(clip_id.encode()).hexdigest()[:24]}.npz"


def item_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """Return `arrays` as the bytes of an uncompressed `.npz` whose members carry ITEM_TIME, so equal arrays
    give equal bytes (`np.savez` stamps the current time)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for key, value in arrays.items():
            with archive.open(zipfile.ZipInfo(f"{key}.npy", ITEM_TIME), "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
    return buffer.getvalue()


def write_item(path: Path, arrays: Mapping[str, np.ndarray]) -> str:
    """Write `arrays` as `.npz` (`item_bytes`) to `path` atomically (temp file + os.replace); return the sha256 of the bytes."""
    data = item_bytes(arrays)
    replace_bytes(path, data)
    return hashlib.sha256(data).hexdigest()


# numpy parses each .npy header with `ast.literal_eval`, and CPython 3.11's AST builder counts its recursion depth in
# state every thread shares: two threads parsing at once can fail with "SystemError: AST constructor recursion depth
# mismatch" (python/cpython#106905; it failed a training's batch reader once in a CI run). The training data reads
# items in threads, so the parse of the bytes in memory takes turns; reading and checksumming the files does not.
_PARSE = threading.Lock()


def _arrays(data: bytes) -> dict[str, np.ndarray] | None:
    """Return every array of `.npz` bytes, or None when they are not a readable `.npz`."""
    try:
        with _PARSE, np.load(io.BytesIO(data)) as npz:
            return {key: npz[key] for key in npz.files}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None


def load_item(cache_dir: str | os.PathLike[str], entry: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Return every array of the item of index entry `entry` in any family's cache (text_ids, codes, the family's own).

    Raises InputError naming the file when it is missing, fails its checksum, is unreadable or its
    lengths differ from the entry's; `preprocess` (or `train`) rebuilds such an item.
    """
    path, rebuild = Path(cache_dir) / entry["file"], "Run `preprocess` (or `train`) again to rebuild it."
    if not path.is_file():
        raise InputError(f"{path}: cache item missing. {rebuild}")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise InputError(f"{path}: cache item fails its checksum (corrupt). {rebuild}")
    arrays = _arrays(data)
    if arrays is None or any(arrays[k].shape != (entry[n],) for k, n in (("text_ids", "n_text"), ("codes", "n_codes")) if k in arrays):
        raise InputError(f"{path}: cache item unreadable or not of its index entry's lengths. {rebuild}")
    return arrays


def open_cache(cache_dir: str | os.PathLike[str], formats: tuple[str, ...] = (CACHE_FORMAT,)) -> CacheIndex:
    """Return the CacheIndex of a built cache folder whose index format is one of `formats`.

    Raises InputError when index.json is missing, unreadable, of another format, or lacks a field its
    readers rely on (a damaged or hand-made index).
    """
    path = Path(cache_dir).resolve()
    index_path = path / INDEX_NAME
    if not index_path.is_file():
        raise InputError(f"{path}: no {INDEX_NAME}; not a built cache. Run `preprocess` (or `train`) first.")
    try:
        data = read_json_file(index_path, "its text")
    except StructureError as exc:  # not UTF-8 or JSON, nested or sized beyond any reader's bound
        raise InputError(f"{index_path}: unreadable cache index ({exc}). Delete the folder and build it again.") from None
    if not isinstance(data, dict) or data.get("format") not in formats:
        raise InputError(f"{index_path}: not a {' or '.join(formats)} index. Build the cache again.")
    problem = _index_problem(data)
    if problem is not None:
        raise InputError(f"{index_path}: damaged cache index ({problem}). Delete the folder and build it again.")
    return CacheIndex(path, data)


# the fields every index holds ({field: type}, and {field: {key: type}} for its records); `manifest` when built from one
_INDEX_FIELDS: dict[str, Any] = {"created": str, "max_text_id": int, "items": list,
                                 "tokenizer": {"path": str, "fingerprint": str}, "codec": {"fingerprint": str}}
_MANIFEST_FIELDS = {"path": str, "sha256": str}


def _index_problem(data: dict[str, Any]) -> str | None:
    """Return what is missing or mistyped in a parsed index.json (the fields readers rely on), or None."""
    wanted = dict(_INDEX_FIELDS, **({"manifest": _MANIFEST_FIELDS} if "manifest" in data else {}))
    for name, kind in wanted.items():
        value = data.get(name)
        if isinstance(kind, dict):
            if not isinstance(value, dict) or any(not isinstance(value.get(k), t) for k, t in kind.items()):
                return f"`{name}` lacks {', '.join(kind)}"
        elif not isinstance(value, kind) or isinstance(value, bool):
            return f"`{name}` missing or not {kind.__name__}"
    if not all(isinstance(item, dict) for item in data["items"]):
        return "an entry of `items` is not an object"
    return None


def histogram(values: list[int]) -> dict[str, Any]:
    """Return min, max, mean, p95 and a HISTOGRAM_BINS-bin histogram (edges, counts) of `values`."""
    if not values:
        return {"min": 0, "max": 0, "mean": 0.0, "p95": 0, "edges": [], "counts": []}
    counts, edges = np.histogram(values, bins=HISTOGRAM_BINS)
    return {"min": int(min(values)), "max": int(max(values)), "mean": round(float(np.mean(values)), 2),
            "p95": int(np.percentile(values, 95)), "edges": [round(float(e), 1) for e in edges], "counts": [int(c) for c in counts]}


def entry_of(row: ManifestRow, arrays: Mapping[str, np.ndarray], val_ratio: float, sha256: str) -> dict[str, Any]:
    """Return the index entry of `row`'s item holding `arrays`."""
    text, codes = arrays["text_ids"], arrays["codes"]
    return {"id": row.id, "file": item_file(row.id), "split": split_of(row.id, val_ratio), "speaker": row.speaker,
            "language": row.language, "text": row.text, "n_text": int(text.size), "n_codes": int(codes.size),
            "max_id": int(text.max()) if text.size else -1, "max_code": int(codes.max()) if codes.size else -1, "sha256": sha256}


def write_index(cache_dir: Path, source: FeatureSource, fingerprint: str, parts: Mapping[str, str], tokenizer: Any,
                items: list[dict[str, Any]], **fields: Any) -> None:
    """Write `index.json`: the shared fields (tokenizer, parts, max ids, histograms, splits, items), the source's and `fields`."""
    atomic_write_json(cache_dir / INDEX_NAME, {
        "format": source.format, "fingerprint": fingerprint,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "parts": dict(parts),
        "tokenizer": {"path": str(Path(tokenizer.path).resolve()), "fingerprint": tokenizer.fingerprint, "size": tokenizer.size},
        **source.index_fields(items), **fields,
        "max_text_id": max((e["max_id"] for e in items), default=-1),
        "max_code": max((e.get("max_code", -1) for e in items), default=-1),
        "histograms": {key: histogram([e[key] for e in items]) for key in ("n_text", "n_codes")},
        "splits": {s: sum(1 for e in items if e["split"] == s) for s in ("train", "val")},
        "items": items,
    })


def journal_name(shard: Shard | None) -> str:
    """Return the journal file of a build: JOURNAL_NAME, or `journal.<I>of<N>.jsonl` for a shard."""
    return JOURNAL_NAME if shard is None else f"journal.{shard.label}.jsonl"


def _journals(cache_dir: Path) -> Iterator[Path]:
    """Yield the journal files of every build (single or shard) of `cache_dir`."""
    yield from sorted(cache_dir.glob("journal*.jsonl"))


def _journal_lines(cache_dir: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Return (entries by id, why a clip failed by id) of every journal; a line torn by an interruption is skipped."""
    entries: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for journal in _journals(cache_dir):
        for line in journal.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = loads_json(line, "journal line")
            except ValueError:  # a partial or damaged line: its item is adopted from its file or built again
                continue
            if isinstance(entry, dict) and "id" in entry and "sha256" in entry:
                entries[entry["id"]] = entry
            elif isinstance(entry, dict) and "id" in entry and isinstance(entry.get("error"), str):
                failed[entry["id"]] = entry["error"]
    return entries, failed


def _records(cache_dir: Path, format: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Return (entries of the journals and of a readable index by id, journaled failures by id)."""
    known, failed = _journal_lines(cache_dir)
    try:
        known.update({e["id"]: e for e in open_cache(cache_dir, (format,)).items})
    except InputError:
        pass  # no index yet, or a damaged one: its items are checked through the journal or adopted from their files
    return known, failed


def _agree_batch_size(cache_dir: Path, batch_size: int) -> None:
    """Record the batch size the shards of `cache_dir` cut the manifest by (the first shard's), or check this one's.

    Raises InputError when other shards of the running build use another batch size.
    """
    record = cache_dir / SHARDS_NAME
    fd, tmp = fresh_temp(record)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps({"batch_size": batch_size}))
    try:
        os.link(tmp, record)  # atomic: exactly one shard's record appears, whole
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    agreed = read_json_file(record)["batch_size"]
    if agreed != batch_size:
        raise InputError(f"{cache_dir}: its other shards featurise {agreed} clips per batch, this one {batch_size}; "
                         "shards must cut the manifest alike. Set the family's feature_batch_size to "
                         f"{agreed} in the settings for this shard (or build without --shard).")


def _adopted(source: FeatureSource, row: ManifestRow, cache_dir: Path, val_ratio: float) -> dict[str, Any] | None:
    """Return the entry of an item an interrupted build wrote (atomically) but never recorded, or None."""
    path = cache_dir / item_file(row.id)
    data = path.read_bytes() if path.is_file() else b""
    arrays = _arrays(data) if data else None
    if arrays is None or not set(source.dtypes) <= set(arrays):
        return None
    return entry_of(row, arrays, val_ratio, hashlib.sha256(data).hexdigest())


def store_features(source: FeatureSource, folder: Path, val_ratio: float, row: ManifestRow, features: Features) -> Any:
    """Write one clip's features as its item in `folder` (a cache or staging folder); return its index entry,
    or the featuriser's reason unchanged when the clip cannot be used."""
    if isinstance(features, str):
        return features
    arrays = {key: np.asarray(features[key], dtype=dtype) for key, dtype in source.dtypes.items()}
    return entry_of(row, arrays, val_ratio, write_item(folder / item_file(row.id), arrays))


def _write(source: FeatureSource, cache_dir: Path, val_ratio: float, rows: list[ManifestRow]) -> list[Any]:
    """Featurise `rows` with `source` and write their items into `cache_dir`; return per row its entry or why it failed."""
    return [store_features(source, cache_dir, val_ratio, row, result) for row, result in zip(rows, source.featurise(rows))]


@dataclass
class Staging:
    """Items featurised before their manifest exists — the import featurises each clip from the samples it
    has just decoded, so a clip is decoded once — kept with their journal entries in `folder` (under the
    cache root, so taking them in is a rename) until `build_feature_cache(…, staged=folder)` takes those
    of its manifest's clips and reuses them like its own."""

    folder: Path
    val_ratio: float
    _journal: Any = field(default=None, repr=False, compare=False)  # this process's journal, open once

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_journal": None}

    @classmethod
    def create(cls, output_root: str | os.PathLike[str], val_ratio: float) -> "Staging":
        """Return a new staging folder under `output_root` (made by the first `add`)."""
        return cls(Path(output_root).resolve() / f"{STAGING_PREFIX}{uuid.uuid4().hex}", val_ratio)

    def add(self, source: FeatureSource, row: ManifestRow, features: Features) -> None:
        """Stage one clip's features (a clip the featuriser refuses is left to the build, which records why)."""
        if self._journal is None:
            (self.folder / ITEMS_DIR).mkdir(parents=True, exist_ok=True)
            # line-buffered: each entry is on disk when add returns, even if the pool ends this process abruptly
            self._journal = open_append(self.folder / f"journal.staged-{os.getpid()}.jsonl", buffering=1)
        entry = store_features(source, self.folder, self.val_ratio, row, features)
        if not isinstance(entry, str):
            self._journal.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def discard(self) -> None:
        """Delete the staging folder and what it holds."""
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        shutil.rmtree(self.folder, ignore_errors=True)


def _take_staged(staged: Path, cache_dir: Path, rows: list[ManifestRow]) -> None:
    """Move the staged items of `rows` and the staged journals into `cache_dir`; delete the rest of `staged`."""
    if not staged.is_dir():
        return
    for row in rows:
        item = staged / item_file(row.id)
        if item.is_file():
            os.replace(item, cache_dir / item_file(row.id))
    for journal in staged.glob("journal*.jsonl"):
        os.replace(journal, cache_dir / journal.name)
    shutil.rmtree(staged, ignore_errors=True)


def _execute(args: tuple[Any, ...], chunks: list[list[ManifestRow]], workers: int) -> Iterator[tuple[list[ManifestRow], list[Any]]]:
    """Yield (batch, `_write`'s results) in order: in this process, or in `workers` processes given `args` once each."""
    yield from zip(chunks, ordered_map(_write, args, chunks, workers if len(chunks) > 1 else 1))


def build_feature_cache(source: FeatureSource, manifest: str | os.PathLike[str], tokenizer: Any,
                        output_root: str | os.PathLike[str], val_ratio: float, batch_size: int = 1, workers: int = 1,
                        split_by: str = "clip", shard: Shard | None = None, staged: Path | None = None) -> CacheInfo:
    """Build (or complete, or repair) the cache of `manifest` with `source`'s features; return what was done.

    `batch_size` clips go to `source.featurise` at a time (in `workers` processes when more than one;
    neither changes the features). `split_by` `speaker` holds whole speakers out for val. With `shard`,
    only that shard's batches are featurised (`core.data.shards`); the index is written by whichever
    shard finds every clip done, and until then the result is not `complete`. `staged` (a `Staging`
    folder) holds items featurised already; those of the manifest's clips are taken in. Manifest rejects and
    clips the featuriser refuses are listed in `skipped`. Raises InputError when the manifest cannot be
    read, has too few speakers to split by, shards disagree on the batch size, or no clip can be featurised.
    """
    start = time.monotonic()
    manifest = Path(manifest).resolve()
    rows, rejects = read_manifest(manifest)
    manifest_sha = sha256_file(manifest)
    held_out = speakers_held_out(rows, val_ratio) if split_by == "speaker" else None
    parts = {**source.fingerprint_parts(), "tokenizer": tokenizer.fingerprint, "manifest": manifest_sha,
             "val_ratio": str(val_ratio), **({"split": split_by} if held_out else {})}
    fingerprint = fingerprint_of(source.format, parts)
    cache_dir = Path(output_root).resolve() / fingerprint
    (cache_dir / ITEMS_DIR).mkdir(parents=True, exist_ok=True)
    if staged is not None:
        _take_staged(staged, cache_dir, rows)
    if shard is not None:
        _agree_batch_size(cache_dir, max(1, batch_size))
    mine = [batch for b, batch in enumerate(batches(rows, batch_size)) if shard is None or shard.holds(b)]
    known, _ = _records(cache_dir, source.format)
    done: dict[str, dict[str, Any]] = {}
    chunks: list[list[ManifestRow]] = []
    rebuilt = 0
    for batch in mine:
        pending = []
        for row in batch:
            entry = known.get(row.id) or _adopted(source, row, cache_dir, val_ratio)
            if entry is not None and (cache_dir / entry["file"]).is_file() and sha256_file(cache_dir / entry["file"]) == entry["sha256"]:
                done[row.id] = entry
            else:
                rebuilt += entry is not None
                pending.append(row)
        if pending:
            chunks.append(pending)
    reused = len(done)
    failed: dict[str, str] = {}
    progress = Progress(source.label if shard is None else f"{source.label} (shard {shard})", total=sum(map(len, mine)))
    progress.update(reused)
    with open_append(cache_dir / journal_name(shard)) as journal:
        for chunk, results in _execute((source, cache_dir, val_ratio), chunks, workers):
            for row, result in zip(chunk, results):
                if isinstance(result, str):
                    failed[row.id] = result
                    journal.write(json.dumps({"id": row.id, "error": result}, ensure_ascii=False) + "\n")
                else:
                    done[row.id] = result
                    journal.write(json.dumps(result, ensure_ascii=False) + "\n")
            journal.flush()
            progress.update(len(chunk))
    progress.finish()
    built = len(done) - reused
    if shard is not None:
        _add_other_shards(cache_dir, source.format, rows, done, failed)
    missing = sum(1 for row in rows if row.id not in done and row.id not in failed)
    skipped = [{"id": r.id, "line": r.line, "error": r.reason} for r in rejects]
    skipped += [{"id": row.id, "line": row.line, "error": failed[row.id]} for row in rows if row.id in failed and row.id not in done]
    info = CacheInfo(cache_dir, fingerprint, len(done), built, reused, rebuilt, skipped, time.monotonic() - start,
                     None if shard is None else str(shard), missing == 0, missing)
    if missing:
        return info
    items = [done[row.id] for row in rows if row.id in done]
    if held_out is not None:
        items = [{**item, "split": held_out[item["speaker"]]} for item in items]
    if not items:
        detail = f" First problem: {skipped[0]['error']}" if skipped else ""
        raise InputError(f"{manifest}: no clip could be featurised.{detail}")
    write_index(cache_dir, source, fingerprint, parts, tokenizer, items, val_ratio=val_ratio, skipped=skipped,
                manifest={"path": str(manifest), "sha256": manifest_sha, "rows": len(rows), "rejected": len(rejects)},
                seconds=round(info.seconds, 3))
    for journal_path in _journals(cache_dir):
        journal_path.unlink(missing_ok=True)
    (cache_dir / SHARDS_NAME).unlink(missing_ok=True)
    return info


def _add_other_shards(cache_dir: Path, format: str, rows: list[ManifestRow], done: dict[str, dict[str, Any]],
                      failed: dict[str, str]) -> None:
    """Add to `done` and `failed` the clips other shards have recorded (their items present; each shard checked its own)."""
    known, refused = _records(cache_dir, format)
    for row in rows:
        if row.id in done or row.id in failed:
            continue
        entry = known.get(row.id)
        if entry is not None and (cache_dir / entry["file"]).is_file():
            done[row.id] = entry
        elif row.id in refused:
            failed[row.id] = refused[row.id]
