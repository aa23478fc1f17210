"""Import a dataset into a validated manifest folder.

`import_dataset` reads one of the layouts in `core.data.importers`, checks every candidate (text,
tokenizer coverage, audio, duration, duplicate ids), converts kept audio to mono wav at the
configured sample rate under `OUTPUT/audio/`, and writes `manifest.jsonl`, `rejects.jsonl` and
`summary.json` atomically. It never stops at the first bad row and never modifies the input.

Each clip is decoded, resampled, measured, trimmed and written by a worker process (`core.data.workers`),
which can also featurise it for the own codec's cache from the samples it has (`SamePassCache`), so the
whole data path decodes a clip once. The wavs are written without waiting on the disk; the parent fsyncs
them while the workers go on, and before the manifest that names them is written.
"""

from __future__ import annotations

import hashlib
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import soundfile as sf
import torch

from core.audio import check_finite, decode_audio, pcm16, pcm16_samples, pcm16_wav, read_audio, resample
from core.confine import is_inside, real_path
from core.errors import InputError
from core.fsutil import atomic_write_json, fsync_path, replace_bytes
from core.data.filter_config import FilterConfig
from core.data.filters import ClipCheck, check_clip, dataset_rejects, duration_histogram, text_check
from core.data.importers import FORMAT_NAMES, Candidate, ImportOptions, commonvoice, folder, hf, ljspeech, manifest, srt
from core.data.manifest import ManifestRow, Reject, write_manifest, write_rejects
from core.data.workers import ordered_map
from core.progress import Progress
from core.text import NORMALIZER_NAME, NORMALIZER_VERSION, normalize_text
from core.tokenizers.tokenizer import Tokenizer
from core.torch_threads import torch_threads

if TYPE_CHECKING:
    from core.data.cache import SamePassCache
    from core.data.feature_cache import CacheInfo

FORMATS: dict[str, Callable[[Path, ImportOptions], tuple[list[Candidate], list[Reject]]]] = {
    "ljspeech": ljspeech.collect,
    "folder": folder.collect,
    "srt": srt.collect,
    "manifest": manifest.collect,
    "commonvoice": commonvoice.collect,
    "hf": hf.collect,
}
assert tuple(FORMATS) == FORMAT_NAMES, "core.data.importers.FORMAT_NAMES must list every format reader"
DEFAULT_DURATION = {"srt": (1.0, 15.0)}
FALLBACK_DURATION = (0.3, 30.0)
SILENCE_PEAK = 1e-4
CLIPS_PER_TASK = 8  # clips a worker process converts per task
_UNSAFE = re.compile(r"[^\w.-]+")


@dataclass
class ImportSummary:
    """What an import kept and rejected, and where it wrote its files."""

    output: Path
    manifest: Path
    rejects_path: Path
    kept: int
    rejected: int
    hours: float
    per_speaker: dict[str, dict[str, float]]
    per_language: dict[str, dict[str, float]]
    reasons: dict[str, int]
    normalizer: dict[str, Any]
    sample_rate: int
    rejects: list[Reject] = field(default_factory=list)
    outside_input: list[dict[str, Any]] = field(default_factory=list)
    filters: dict[str, Any] | None = None
    cache: "CacheInfo | None" = None  # the cache built in the same pass (not part of summary.json)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready summary (also written to summary.json)."""
        return {
            "output": str(self.output),
            "manifest": str(self.manifest),
            "rejects_file": str(self.rejects_path),
            "kept": self.kept,
            "rejected": self.rejected,
            "hours": round(self.hours, 5),
            "per_speaker": self.per_speaker,
            "per_language": self.per_language,
            "reject_reasons": self.reasons,
            "normalizer": self.normalizer,
            "sample_rate": self.sample_rate,
            "outside_input": self.outside_input,
            **({"filters": self.filters} if self.filters is not None else {}),
        }


class _UnencodableChecker:
    """Finds characters a tokenizer can only encode as its unknown id."""

    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[str, bool] = {}

    def bad_characters(self, text: str) -> list[str]:
        if self.tokenizer is None or self.tokenizer.unk_id is None:
            return []
        bad = []
        for char in dict.fromkeys(text):
            if char.isspace():
                continue
            if char not in self.cache:
                self.cache[char] = self.tokenizer.unk_id in self.tokenizer.encode(char)
            if self.cache[char]:
                bad.append(char)
        return bad


def safe_file_stem(clip_id: str) -> str:
    """Return a file-name-safe stem for `clip_id`, with a short hash when characters changed."""
    stem = _UNSAFE.sub("_", clip_id).strip("._") or "clip"
    if stem != clip_id:
        stem = f"{stem}-{hashlib.sha1(clip_id.encode('utf-8')).hexdigest()[:8]}"
    return stem


def _load_candidate_audio(candidate: Candidate, sample_rate: int) -> torch.Tensor:
    if candidate.data is not None:
        return decode_audio(*candidate.data(), sample_rate)[0]
    if candidate.start is None:
        return read_audio(candidate.audio, sample_rate)[0]
    info = sf.info(str(candidate.audio))
    start = int(round(candidate.start * info.samplerate))
    stop = int(round(candidate.end * info.samplerate))
    data, rate = sf.read(str(candidate.audio), start=start, stop=stop, dtype="float32", always_2d=True)
    check_finite(data, candidate.audio)
    wav = torch.from_numpy(data.mean(axis=1).copy())
    return resample(wav, rate, sample_rate)


def _reject(candidate: Candidate, reason: str, playable: bool = False) -> Reject:
    audio = str(candidate.audio) if playable and candidate.data is None and candidate.start is None else None
    return Reject(candidate.source, candidate.line, reason, candidate.id, audio)


@dataclass
class _Conversion:
    """What converting a clip needs besides the clip (sent to each worker process once): where its wav goes,
    the rate, the duration range, the filters, and the cache built in the same pass (or None)."""

    audio_dir: Path
    sample_rate: int
    duration_range: tuple[float, float]
    filters: FilterConfig | None = None
    cache: SamePassCache | None = None


class _Encoded:
    """A picklable `Candidate.data`: encoded audio bytes read from a table in the parent process."""

    def __init__(self, data: tuple[bytes, str]) -> None:
        self.data = data

    def __call__(self) -> tuple[bytes, str]:
        return self.data


#: one converted clip: its manifest row (or reject) and, when the filters ran and kept it, its measures
Converted = tuple[ManifestRow | Reject, ClipCheck | None]


def _convert(job: _Conversion, clips: list[tuple[Candidate, str, str]]) -> list[Converted]:
    """Convert a chunk of clips (in a worker process, or here with one worker)."""
    return [_convert_clip(job, clip) for clip in clips]


def _convert_clip(job: _Conversion, item: tuple[Candidate, str, str]) -> Converted:
    """Check one candidate's audio, write its wav (unsynced: the parent fsyncs the batch) and stage its cache item."""
    candidate, text, stem = item
    try:
        wav = _load_candidate_audio(candidate, job.sample_rate)
    except InputError as exc:
        return _reject(candidate, str(exc).replace(f"{candidate.audio}: ", f"audio {candidate.audio}: ")), None
    except (sf.LibsndfileError, RuntimeError, ValueError) as exc:
        return _reject(candidate, f"audio {candidate.audio}: unreadable ({exc})"), None
    if wav.numel() == 0:
        return _reject(candidate, f"audio {candidate.audio}: empty (no samples)"), None
    if float(wav.abs().max()) < SILENCE_PEAK:
        return _reject(candidate, f"audio {candidate.audio}: empty (silent)"), None
    duration = wav.numel() / job.sample_rate
    min_s, max_s = job.duration_range
    if not min_s <= duration <= max_s:
        return _reject(candidate, f"duration {duration:.2f}s outside {min_s:g}-{max_s:g}s"), None
    meta = dict(candidate.meta)
    check = None
    if job.filters is not None:
        check = check_clip(wav, job.sample_rate, text, job.filters)
        if check.removed_by is not None:
            return _reject(candidate, f"filter {check.removed_by}: {check.reason}", playable=True), None
        wav, duration = check.wav, check.values["duration"]
        check = replace(check, wav=None)  # the parent reads its measures; a tensor would travel through shared memory
        meta.update(check.values)
    relative = f"audio/{stem}.wav"
    pcm = pcm16(wav)
    replace_bytes(job.audio_dir.parent / relative, pcm16_wav(pcm, job.sample_rate))
    row = ManifestRow(id=candidate.id, audio=relative, text=text, speaker=candidate.speaker, language=candidate.language,
                      duration=duration, path=job.audio_dir.parent / relative, line=candidate.line or 0, meta=meta)
    if job.cache is not None:
        job.cache.add(row, pcm16_samples(pcm), job.sample_rate)
    return row, check


def _convert_all(checked: list[tuple[Candidate, str, str]], job: _Conversion, workers: int,
                 rejects: list[Reject]) -> tuple[list[ManifestRow], dict[str, ClipCheck]]:
    """Convert every clip in `workers` processes; return the rows kept (in input order) and their measures,
    adding the rejects to `rejects`. The wavs are fsynced (here, while the workers go on) before it returns."""
    progress = Progress("dataset import", total=len(checked))
    rows: list[ManifestRow] = []
    checks: dict[str, ClipCheck] = {}
    # one clip's tensors are small: intra-op threads only spin (10× the resample CPU)
    with torch_threads(1), ThreadPoolExecutor(max_workers=2) as syncer:
        processes = workers if len(checked) > CLIPS_PER_TASK else 1  # a single task: no pool to start
        for converted in ordered_map(_convert, (job,), _chunks(checked, CLIPS_PER_TASK), processes):
            for result, check in converted:
                if isinstance(result, Reject):
                    rejects.append(result)
                    continue
                rows.append(result)
                syncer.submit(fsync_path, result.path)
                if check is not None:
                    checks[result.id] = check
            progress.update(len(converted))
    fsync_path(job.audio_dir)
    progress.finish()
    return rows, checks


def _chunks(checked: list[tuple[Candidate, str, str]], size: int) -> Iterator[list[tuple[Candidate, str, str]]]:
    """Yield the clips `size` at a time, ready to pickle: a table's audio bytes read here (its rows are not picklable)."""
    for start in range(0, len(checked), size):
        yield [(replace(c, data=_Encoded(c.data())) if c.data is not None else c, text, stem)
               for c, text, stem in checked[start:start + size]]


def _check_text(
    candidates: list[Candidate], checker: _UnencodableChecker, uppercase: bool, filters: FilterConfig | None = None
) -> tuple[list[tuple[Candidate, str, str]], list[Reject]]:
    """Return (candidate, normalised text, file stem) for candidates passing the text checks."""
    kept: list[tuple[Candidate, str, str]] = []
    rejects: list[Reject] = []
    first_line: dict[str, int | None] = {}
    stems: set[str] = set()
    for candidate in candidates:
        if candidate.id in first_line:
            rejects.append(_reject(candidate, f"duplicate id (first at line {first_line[candidate.id]})"))
            continue
        first_line[candidate.id] = candidate.line
        raw = candidate.text
        if filters is not None:
            raw, verbalised, problem = text_check(raw, candidate.language, filters)
            if problem:
                rejects.append(_reject(candidate, f"filter text: {problem}"))
                continue
            candidate.meta["digits_verbalised"] = verbalised
        text = normalize_text(raw, candidate.language, uppercase)
        if not text:
            rejects.append(_reject(candidate, "empty text"))
            continue
        bad = checker.bad_characters(text)
        if bad:
            prefix = "filter text: " if filters is not None else ""
            rejects.append(_reject(candidate, f"{prefix}text has characters the tokenizer cannot encode: {''.join(bad)!r}"))
            continue
        stem = safe_file_stem(candidate.id)
        if stem in stems:
            stem = f"{stem}-{hashlib.sha1(candidate.id.encode('utf-8')).hexdigest()[:8]}"
        stems.add(stem)
        kept.append((candidate, text, stem))
    return kept, rejects


def _totals(rows: list[ManifestRow], key: str) -> dict[str, dict[str, float]]:
    totals: dict[str, dict[str, float]] = {}
    for row in rows:
        entry = totals.setdefault(getattr(row, key), {"clips": 0, "hours": 0.0})
        entry["clips"] += 1
        entry["hours"] += (row.duration or 0.0) / 3600.0
    return {k: {"clips": v["clips"], "hours": round(v["hours"], 5)} for k, v in sorted(totals.items())}


def reason_label(reason: str) -> str:
    """Return the kind of a reject reason, the same for every clip rejected for it: `filter <name>`, the
    duration bounds without the clip's own duration ("duration outside 0.3-30s"), else the reason without
    its file, quoted text, bracketed detail and measured numbers."""
    if reason.startswith("filter "):
        return reason.split(":", 1)[0]
    duration = re.match(r"duration \S+ (outside \S+)$", reason)
    if duration:
        return f"duration {duration.group(1)}"
    label = re.sub(r"(audio \S+|\b\d+(\.\d+)?s?\b|'.*'|\(.*\))", "", reason)
    return re.sub(r"\s+", " ", label).strip(" :.;") or reason


def _reason_counts(rejects: list[Reject]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for reject in rejects:
        label = reason_label(reject.reason)
        counts[label] = counts.get(label, 0) + 1
    return counts


def _split_outside(
    candidates: list[Candidate], roots: list[Path], confine: bool
) -> tuple[list[Candidate], list[Reject], list[dict[str, Any]]]:
    """Return (candidates kept, rejects, rows kept although they point outside `roots`).

    Symlinks are followed. With `confine`, rows whose audio lies outside `roots` become rejects;
    without, they are kept and listed so the report can name them. A row whose audio path cannot name a
    file (a NUL byte: `core.confine.check_path_text`) is always a reject.
    """
    kept: list[Candidate] = []
    rejects: list[Reject] = []
    outside: list[dict[str, Any]] = []
    for candidate in candidates:
        try:
            inside = is_inside(candidate.audio, roots)
        except InputError as exc:  # a NUL byte or a lone surrogate in the path a row names
            rejects.append(_reject(candidate, str(exc)))
            continue
        if inside:
            kept.append(candidate)
            continue
        where = str(real_path(candidate.audio))
        if confine:
            rejects.append(_reject(candidate, f"audio {candidate.audio}: leads outside the allowed folders (to {where})"))
        else:
            outside.append({"id": candidate.id, "source": candidate.source, "line": candidate.line, "audio": where})
            kept.append(candidate)
    return kept, rejects, outside


def _drop_across_clips(rows: list[ManifestRow], checks: dict[str, ClipCheck], filters: FilterConfig,
                       candidates: dict[str, Candidate], rejects: list[Reject]) -> list[ManifestRow]:
    """Return `rows` less the speech-rate outliers and duplicates (their wav files deleted, rejects added)."""
    found = dataset_rejects({row.id: checks[row.id] for row in rows}, filters)
    for row in rows:
        if row.id in found:
            row.path.unlink(missing_ok=True)
            name, reason = found[row.id]
            rejects.append(_reject(candidates[row.id], f"filter {name}: {reason}", playable=True))
    return [row for row in rows if row.id not in found]


def _filter_tally(filters: FilterConfig, rows: list[ManifestRow], rejects: list[Reject]) -> dict[str, Any]:
    """Return the filter record: thresholds, clips removed per filter, trimmed and verbalised counts, histogram."""
    removed = {name: 0 for name in filters.record()["on"]}
    for reject in rejects:
        if reject.reason.startswith("filter "):
            name = reject.reason.split(":", 1)[0][len("filter "):]
            removed[name] = removed.get(name, 0) + 1
    trimmed = sum(1 for r in rows if (r.meta.get("lead_silence") or 0) > filters.keep_silence
                  or (r.meta.get("trail_silence") or 0) > filters.keep_silence) if filters.on("silence") else 0
    return {
        "thresholds": filters.record(),
        "removed": removed,
        "trimmed": trimmed,
        "digits_verbalised": sum(1 for r in rows if r.meta.get("digits_verbalised")),
        "duration_histogram": duration_histogram([r.duration or 0.0 for r in rows]),
    }


def _guard_output(source: Path, output: Path) -> None:
    source_dir = source if source.is_dir() else source.parent
    if is_inside(source_dir, [output]):
        raise InputError(
            f"{output}: the output folder holds the input ({source}); the input is never modified. "
            "Choose a separate --output folder."
        )


def import_dataset(
    fmt: str,
    source: str | Path,
    output: str | Path,
    sample_rate: int,
    options: ImportOptions | None = None,
    tokenizer: Tokenizer | None = None,
    duration_range: tuple[float, float] | None = None,
    uppercase: bool = False,
    workers: int = 2,
    confine_to: list[Path] | None = None,
    filters: FilterConfig | None = None,
    cache: "SamePassCache | None" = None,
) -> ImportSummary:
    """Import `source` in format `fmt` into `output`; return the ImportSummary.

    Audio whose real location (symlinks followed) lies outside the input's folder is listed in
    `outside_input`; with `confine_to` (extra allowed folders, e.g. the workspace and data roots)
    such rows are rejected instead of imported. With `filters`, each clip is measured, trimmed and
    filtered (`core.data.filters`); the values go into its manifest row, the removed clips into the
    rejects ("filter NAME: …") and the tally with the thresholds into summary.json's `filters`.
    Clips are converted in `workers` processes. With `cache`, each kept clip is also featurised from the
    samples just decoded and the own codec's cache of the manifest is built (`summary.cache`).

    Raises InputError for an unknown format, a missing input, an output folder that holds the
    input, or a layout that cannot be read at all. Bad rows become rejects, never errors.
    """
    if fmt not in FORMATS:
        raise InputError(f"format {fmt!r}: unknown. Choose one of {', '.join(FORMATS)}.")
    source, output = Path(source).resolve(), Path(output).resolve()
    if not source.exists():
        raise InputError(f"{source}: input not found.")
    if output.exists() and not output.is_dir():
        raise InputError(f"--output {output}: a file, not a folder. Give a folder for the dataset (it is created).")
    _guard_output(source, output)
    options = options or ImportOptions()
    if fmt in ("folder", "srt") and not options.language:
        raise InputError(f"format {fmt!r}: pass --language (for example --language am) so clips are labelled.")
    duration_range = duration_range or DEFAULT_DURATION.get(fmt, FALLBACK_DURATION)
    candidates, rejects = FORMATS[fmt](source, options)
    source_dir = source if source.is_dir() else source.parent
    candidates, outside_rejects, outside = _split_outside(
        candidates, [source_dir, *(confine_to or [])], confine=confine_to is not None
    )
    rejects.extend(outside_rejects)
    checked, text_rejects = _check_text(candidates, _UnencodableChecker(tokenizer), uppercase, filters)
    rejects.extend(text_rejects)
    if not checked:
        rejects.sort(key=lambda r: (r.source, r.line or 0))
        first = "; ".join(r.message() for r in rejects[:2]) or "it holds no rows"
        raise InputError(f"{source}: nothing to import as {fmt} ({len(rejects)} row(s) rejected: {first}). "
                         "Check --format and the input file.")
    audio_dir = output / "audio"
    created = [p for p in (output, audio_dir) if not p.exists()]
    audio_dir.mkdir(parents=True, exist_ok=True)
    rows, checks = _convert_all(checked, _Conversion(audio_dir, sample_rate, duration_range, filters, cache), workers, rejects)
    if filters is not None:
        rows = _drop_across_clips(rows, checks, filters, {c.id: c for c, _, _ in checked}, rejects)
    rejects.sort(key=lambda r: (r.source, r.line or 0))
    if not rows:
        for folder in reversed(created):
            folder.rmdir()
        first = "; ".join(r.message() for r in rejects[:2])
        raise InputError(f"{source}: no clip could be imported ({len(rejects)} rejected: {first}). Fix the audio files.")
    manifest_path = write_manifest(output / "manifest.jsonl", rows)
    rejects_path = write_rejects(output / "rejects.jsonl", rejects)
    summary = ImportSummary(
        output=output,
        manifest=manifest_path,
        rejects_path=rejects_path,
        kept=len(rows),
        rejected=len(rejects),
        hours=sum(row.duration or 0.0 for row in rows) / 3600.0,
        per_speaker=_totals(rows, "speaker"),
        per_language=_totals(rows, "language"),
        reasons=_reason_counts(rejects),
        normalizer={"name": NORMALIZER_NAME, "version": NORMALIZER_VERSION, "uppercase": uppercase},
        sample_rate=sample_rate,
        rejects=rejects,
        outside_input=outside,
        filters=None if filters is None else _filter_tally(filters, rows, rejects),
    )
    atomic_write_json(output / "summary.json", summary.to_dict())
    if cache is not None:
        summary.cache = cache.finish(manifest_path, workers)
    return summary
