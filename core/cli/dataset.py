"""`dataset import`, `dataset filter`, `dataset sample` and `dataset split`: validated, filtered manifests
from audio datasets, and speaker-aware splits."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from core.paths import CLI_PATH, PathType
from core.cli.common import (LANGUAGE_ARG, Result, add_command, add_force_option, add_group, csv_list, float_in, int_in,
                             name_list)
from core.numbers import MAX_CLIP_SECONDS, MAX_WORKERS
from core.data.sample_text import MAX_RECOMBINED
from core.config import load_settings
from core.errors import InputError
from core.data.importers import FORMAT_NAMES, ImportOptions
from core.data.importers.hf import HUB_PREFIX
from core.data.filter_config import FILTERS, FilterConfig
from core.tables import render_mapping

if TYPE_CHECKING:
    from core.data.importing import ImportSummary

SHOWN_REJECTS = 20
SPLIT_NAMES = ("train", "val", "eval")
INDEXTTS_PROCESSED = "indextts-processed"


def _sample_rate() -> int:
    return int(load_settings().get("audio.sample_rate", 16000))


def _filter_config(args: argparse.Namespace) -> FilterConfig | None:
    """Return the FilterConfig the filter options ask for, or None when filtering is not asked for."""
    if not getattr(args, "filter", True):
        return None
    return FilterConfig(min_duration=args.filter_min_duration, max_duration=args.filter_max_duration,
                        max_clipping=args.max_clipping, min_snr=args.min_snr, keep_silence=args.keep_silence,
                        rate_factor=args.rate_factor, near_duplicate=args.near_duplicate, off=args.skip_filter)


def _filter_lines(filters: dict) -> list[str]:
    removed = ", ".join(f"{name} {count}" for name, count in filters["removed"].items())
    histogram = ", ".join(f"{span}s: {count}" for span, count in filters["duration_histogram"].items())
    return [f"  filters removed: {removed}; silence trimmed in {filters['trimmed']}, "
            f"digits verbalised in {filters['digits_verbalised']}", f"  durations: {histogram}"]


def _summary_result(summary: "ImportSummary", strict: bool) -> Result:
    data = summary.to_dict()
    shown = {k: data[k] for k in ("output", "kept", "rejected", "hours")}
    lines = [render_mapping(shown)]
    for name, totals in summary.per_speaker.items():
        lines.append(f"  speaker {name}: {totals['clips']} clips, {totals['hours'] * 60:.1f} min")
    for name, totals in summary.per_language.items():
        lines.append(f"  language {name}: {totals['clips']} clips, {totals['hours'] * 60:.1f} min")
    if summary.filters is not None:
        lines.extend(_filter_lines(summary.filters))
    lines.extend(f"  reject {r.message()}" for r in summary.rejects[:SHOWN_REJECTS])
    if summary.outside_input:
        lines.append(f"  warning: {len(summary.outside_input)} row(s) point outside the input folder "
                     "(pass --confine-to-roots to reject them):")
        lines.extend(f"    {row['source']}:{row['line']} {row['id']} -> {row['audio']}"
                     for row in summary.outside_input[:SHOWN_REJECTS])
    if summary.rejected > SHOWN_REJECTS:
        lines.append(f"  … {summary.rejected - SHOWN_REJECTS} more in {summary.rejects_path}")
    if strict and summary.rejected:
        first = "; ".join(r.message() for r in summary.rejects[:3])
        raise InputError(f"--strict: {summary.rejected} row(s) rejected (see {summary.rejects_path}): {first}")
    return Result(data, "\n".join(lines))


def _import_indextts_processed(args: argparse.Namespace) -> Result:
    from core.families.indextts.community_import import import_processed
    from core.tokenizers.tokenizer import load_tokenizer

    if not args.tokenizer:
        raise InputError("--format indextts-processed needs --tokenizer: the run's tokenizer, with which the text ids are re-derived.")
    result = import_processed(args.input, load_tokenizer(args.tokenizer), args.output)
    lines = [f"imported {result.clips} clips into the IndexTTS2 feature cache {result.cache_dir} "
             f"(use it as data.manifest of a family: indextts run)"]
    lines.extend(f"  reject {r.message()}" for r in result.rejects[:SHOWN_REJECTS])
    if args.strict and result.rejects:
        raise InputError(f"--strict: {len(result.rejects)} clip(s) rejected: {result.rejects[0].message()}")
    return Result(result.to_dict(), "\n".join(lines))


def _import(args: argparse.Namespace) -> Result:
    """Import a dataset into OUTPUT/manifest.jsonl (+ rejects.jsonl, summary.json, audio/).

    Formats: ljspeech (metadata.csv + wavs/), folder (clips with same-stem .txt/.lab),
    srt (a recording + its .srt, one clip per subtitle), manifest (re-validate a manifest.jsonl),
    commonvoice (a Common Voice release: --tsv, default validated.tsv, and clips/*.mp3; speaker = client_id),
    hf (a datasets.save_to_disk folder, parquet/arrow files, or a Hub dataset id hf:owner/name[:config][@split]
    loaded with `datasets` from your cache, offline under HF_HUB_OFFLINE=1; --audio-column, --text-column,
    --speaker-column),
    indextts-processed (a folder from the community IndexTTS2 preprocess_data.py: codes, conditioning and
    emotion .npy files become an IndexTTS2 feature cache in OUTPUT; text ids re-derived with --tokenizer).
    Every bad row lands in rejects.jsonl with its line and reason; the input is never modified.
    Audio is converted to mono wav at audio.sample_rate from the config. --filter measures and filters each clip
    (see `dataset filter`).
    """
    from core.data.importing import import_dataset
    from core.tokenizers.tokenizer import load_tokenizer

    if args.format == INDEXTTS_PROCESSED:
        return _import_indextts_processed(args)
    source, tables = args.input, ()
    if str(args.input).startswith(HUB_PREFIX):
        if args.format != "hf":
            raise InputError(f"--input {args.input}: a Hub dataset id goes with --format hf.")
        from core.data.importers.hf import hub_dataset

        source, tables = hub_dataset(str(args.input))
    if args.codec is not None and not args.tokenizer:
        raise InputError("--codec builds the own codec's cache in the same pass and needs --tokenizer (its text ids).")

    if args.min_duration is not None or args.max_duration is not None:
        low, high = args.min_duration or 0.0, args.max_duration or float("inf")
        if low >= high:
            raise InputError(f"--min-duration {low} must be below --max-duration {high}.")
        duration = (low, high)
    else:
        duration = None
    with contextlib.ExitStack() as stack:
        cache = None
        if args.codec is not None:
            from core.data.cache import SamePassCache

            root = args.cache_root or load_settings().resolve("cache")
            cache = stack.enter_context(SamePassCache(args.tokenizer, args.codec, root, args.val_ratio))
        summary = import_dataset(
            args.format,
            source,
            args.output,
            _sample_rate(),
            ImportOptions(language=args.language, speaker=args.speaker, padding=args.padding, tsv=args.tsv,
                          audio_column=args.audio_column, text_column=args.text_column, speaker_column=args.speaker_column,
                          tables=tables),
            tokenizer=load_tokenizer(args.tokenizer) if args.tokenizer else None,
            duration_range=duration,
            uppercase=args.uppercase,
            workers=args.workers,
            confine_to=load_settings().allowed_roots if args.confine_to_roots else None,
            filters=_filter_config(args),
            cache=cache,
        )
    result = _summary_result(summary, args.strict)
    if summary.cache is not None:
        info = summary.cache
        result.data["cache"] = info.to_dict()
        result.text += f"\n  cache {info.path}: {info.items} clips (built in the same pass; skipped {len(info.skipped)})"
    return result


def _filter(args: argparse.Namespace) -> Result:
    """Filter a manifest's clips into OUTPUT: duration, clipping, SNR, VAD silence trim, text, speech rate, duplicates.

    Each clip's measured values (duration, clipping, snr_db, lead/trail_silence, speech_s, chars_per_s,
    digits_verbalised) go into OUTPUT/manifest.jsonl; removed clips into rejects.jsonl as 'filter NAME: why';
    summary.json's `filters` holds the thresholds, clips removed per filter and a duration histogram.
    Silence beyond --keep-silence is cut with webrtcvad. Pass --tokenizer to `dataset import` to also
    reject text with characters the tokenizer cannot encode.
    """
    from core.data.importing import import_dataset

    summary = import_dataset("manifest", args.manifest, args.output, _sample_rate(), workers=args.workers,
                             confine_to=load_settings().allowed_roots if args.confine_to_roots else None,
                             filters=_filter_config(args))
    return _summary_result(summary, strict=False)


def _sample(args: argparse.Namespace) -> Result:
    """Render the built-in sentences with espeak-ng (two voices per language) into a dataset."""
    from core.data.sample import sample_dataset

    summary = sample_dataset(args.output, _sample_rate(), args.languages, args.per_language, args.workers, args.recombined)
    return _summary_result(summary, strict=True)


def _split(args: argparse.Namespace) -> Result:
    """Show a manifest's train/val split (hash of the id) or hold out whole speakers."""
    from core.data.manifest import load_manifest_rows, write_manifest
    from core.data.splits import split_by_speaker, split_of

    rows = load_manifest_rows(args.manifest)
    if args.by == "clip":
        if args.write:
            raise InputError("--write needs --by speaker (a split by clip id is recomputed by every stage).")
        val = [row.id for row in rows if split_of(row.id, args.val_ratio) == "val"]
        data = {"train": len(rows) - len(val), "val": len(val), "val_ratio": args.val_ratio, "val_ids": val}
        return Result(data, render_mapping({k: data[k] for k in ("train", "val", "val_ratio")}))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.speaker] = counts.get(row.speaker, 0) + 1
    of_speaker = split_by_speaker(counts, args.val_ratio, args.eval_ratio)
    parts = {name: [row for row in rows if of_speaker[row.speaker] == name] for name in SPLIT_NAMES}
    speakers = {s: {"split": of_speaker[s], "clips": counts[s]} for s in sorted(counts)}
    data = {"by": "speaker", **{name: len(part) for name, part in parts.items()}, "val_ratio": args.val_ratio,
            "eval_ratio": args.eval_ratio, "speakers": speakers,
            "single_clip_speakers": sorted(s for s, n in counts.items() if n == 1)}
    lines = [render_mapping({k: data[k] for k in ("train", "val", "eval")})]
    lines.extend(f"  speaker {s}: {v['clips']} clips → {v['split']}" for s, v in speakers.items())
    if data["single_clip_speakers"]:
        lines.append(f"  single-clip speakers: {', '.join(data['single_clip_speakers'])}")
    if args.write:
        files = _split_files(args)
        written = {name: str(write_manifest(files[name], part)) for name, part in parts.items() if part}
        data["written"] = written
        lines.extend(f"  wrote {path}" for path in written.values())
    return Result(data, "\n".join(lines))


def _split_files(args: argparse.Namespace) -> dict[str, Path]:
    """Return {train, val, eval: the manifest file `dataset split --write` writes it to}, beside the manifest."""
    if not (args.write and args.by == "speaker"):
        return {}
    folder = args.manifest.parent if not args.manifest.is_dir() else args.manifest
    return {name: folder / f"manifest.{name}.jsonl" for name in SPLIT_NAMES}


def _add_filter_options(command: argparse.ArgumentParser) -> None:
    """Add the filter threshold options shared by `dataset import --filter` and `dataset filter`."""
    command.add_argument("--skip-filter", type=csv_list, default=[], metavar="NAMES",
                         help=f"comma-separated filters to switch off: {', '.join(FILTERS)}")
    command.add_argument("--filter-min-duration", type=float_in(0.0, MAX_CLIP_SECONDS), default=0.5, help="shortest clip after trimming, s (default 0.5)")
    command.add_argument("--filter-max-duration", type=float_in(0.0, MAX_CLIP_SECONDS, low_open=True), default=20.0, help="longest clip after trimming, s (default 20)")
    command.add_argument("--max-clipping", type=float_in(0.0, 1.0), default=0.001, help="largest share of clipped samples (default 0.001)")
    command.add_argument("--min-snr", type=float_in(-100.0, 200.0), default=15.0, help="lowest estimated SNR in dB (default 15)")
    command.add_argument("--keep-silence", type=float_in(0.0, 60.0), default=0.3, help="leading/trailing silence kept after VAD trimming, s (default 0.3)")
    command.add_argument("--rate-factor", type=float_in(1.0, 100.0, low_open=True), default=2.5,
                         help="chars/s of speech outside median/F…median×F is an outlier (default 2.5)")
    command.add_argument("--near-duplicate", type=float_in(0.0, 0.5), default=0.2,
                         help="largest fingerprint bit error of a near-duplicate (default 0.2; 0 = exact only)")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `dataset` group: import, filter, sample, split."""
    group = add_group(subparsers, "dataset", "import, validate and sample speech datasets")
    imp = add_command(group, "import", _import)
    imp.add_argument("--format", required=True, choices=[*FORMAT_NAMES, INDEXTTS_PROCESSED], help="input layout")
    imp.add_argument("--input", required=True, type=PathType(prefixes=(HUB_PREFIX,)),
                     help="input folder or file; with --format hf also a Hub dataset id hf:owner/name[:config][@split] (from your datasets cache)")
    imp.add_argument("--output", required=True, type=CLI_PATH, help="output dataset folder")
    imp.add_argument("--language", type=LANGUAGE_ARG, help="language code of the clips (required for folder and srt)")
    imp.add_argument("--speaker", help="speaker name (default: per format)")
    imp.add_argument("--tokenizer", type=CLI_PATH, help="reject text with characters this tokenizer cannot encode")
    imp.add_argument("--uppercase", action="store_true", help="upper-case text (for tokenizers trained upper-case)")
    imp.add_argument("--min-duration", type=float_in(0.0, MAX_CLIP_SECONDS), help="shortest clip kept in seconds (default 1 for srt, else 0.3)")
    imp.add_argument("--max-duration", type=float_in(0.0, MAX_CLIP_SECONDS, low_open=True), help="longest clip kept in seconds (default 15 for srt, else 30)")
    imp.add_argument("--padding", type=float_in(0.0, 60.0), default=0.1, help="srt: seconds added on each side of a subtitle (default 0.1)")
    imp.add_argument("--strict", action="store_true", help="exit 2 when any row is rejected")
    imp.add_argument("--confine-to-roots", action="store_true",
                     help="reject rows whose audio (symlinks followed) lies outside the input's folder, "
                          "the workspace and data_roots (the dashboard and every dataset.import job always set it)")
    imp.add_argument("--workers", type=int_in(1, MAX_WORKERS), default=2, help="worker processes converting clips (default 2)")
    imp.add_argument("--codec", type=CLI_PATH, help="also build the own codec's preprocessing cache in the same pass, "
                                                     "each clip decoded once (needs --tokenizer; as `preprocess` builds it)")
    imp.add_argument("--cache-root", type=CLI_PATH, help="--codec: the cache root (default: the workspace's cache/)")
    imp.add_argument("--val-ratio", type=float_in(0.0, 1.0, high_open=True), default=0.05,
                     help="--codec: share of clips in the cache's val split (default 0.05)")
    imp.add_argument("--tsv", default="validated.tsv", help="commonvoice: the table to import (default validated.tsv)")
    imp.add_argument("--audio-column", default="audio", help="hf: the audio column (default audio)")
    imp.add_argument("--text-column", default="text", help="hf: the text column (default text)")
    imp.add_argument("--speaker-column", help="hf: the speaker column (default: --speaker, else one speaker 'hf')")
    imp.add_argument("--filter", action="store_true", help="measure and filter every clip (thresholds below)")
    _add_filter_options(imp)
    flt = add_command(group, "filter", _filter)
    flt.add_argument("--manifest", required=True, type=CLI_PATH, help="manifest.jsonl to filter")
    flt.add_argument("--output", required=True, type=CLI_PATH, help="output dataset folder")
    flt.add_argument("--workers", type=int_in(1, MAX_WORKERS), default=2, help="worker processes (default 2)")
    flt.add_argument("--confine-to-roots", action="store_true", help="reject rows whose audio lies outside the allowed roots")
    _add_filter_options(flt)
    sample = add_command(group, "sample", _sample)
    sample.add_argument("--output", required=True, type=CLI_PATH, help="output dataset folder")
    sample.add_argument("--languages", type=name_list("language code"), default=["en", "am"], help="comma-separated languages: en, am, es (default en,am)")
    sample.add_argument("--per-language", type=int_in(1, 10_000), default=24, help="clips per language (default 24)")
    sample.add_argument("--recombined", type=int_in(0, MAX_RECOMBINED), default=0,
                        help="extra clips per language whose sentences reshuffle the words of the --per-language "
                             "sentences, for text variety (default 0)")
    sample.add_argument("--workers", type=int_in(1, MAX_WORKERS), default=2, help="parallel espeak-ng processes (default 2)")
    split = add_command(group, "split", _split)
    split.add_argument("--manifest", required=True, type=CLI_PATH, help="manifest.jsonl")
    split.add_argument("--val-ratio", type=float_in(0.0, 1.0, high_open=True), default=0.05, help="share of clips in val (default 0.05)")
    split.add_argument("--by", choices=["clip", "speaker"], default="clip",
                       help="clip: hash of the clip id; speaker: whole speakers held out for val and eval")
    split.add_argument("--eval-ratio", type=float_in(0.0, 1.0, high_open=True), default=0.0,
                       help="--by speaker: share of clips (whole speakers) in the eval set (default 0)")
    split.add_argument("--write", action="store_true",
                       help="--by speaker: write manifest.train.jsonl, manifest.val.jsonl, manifest.eval.jsonl beside the manifest "
                            "(never over the manifest itself; over earlier ones only with --force)")
    add_force_option(split, "earlier manifest.train/val/eval.jsonl")
    split.set_defaults(writes=lambda args: list(_split_files(args).values()))
