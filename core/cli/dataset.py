"""`dataset import`, `dataset sample` and `dataset split`: validated manifests from audio datasets."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from core.paths import CLI_PATH
from core.cli.common import Result, add_command, add_group, csv_list, float_in, int_at_least
from core.config import load_settings
from core.errors import InputError
from core.data.importers import FORMAT_NAMES, ImportOptions
from core.tables import render_mapping

if TYPE_CHECKING:
    from core.data.importing import ImportSummary

SHOWN_REJECTS = 20
INDEXTTS_PROCESSED = "indextts-processed"


def _sample_rate() -> int:
    return int(load_settings().get("audio.sample_rate", 16000))


def _summary_result(summary: "ImportSummary", strict: bool) -> Result:
    data = summary.to_dict()
    shown = {k: data[k] for k in ("output", "kept", "rejected", "hours")}
    lines = [render_mapping(shown)]
    for name, totals in summary.per_speaker.items():
        lines.append(f"  speaker {name}: {totals['clips']} clips, {totals['hours'] * 60:.1f} min")
    for name, totals in summary.per_language.items():
        lines.append(f"  language {name}: {totals['clips']} clips, {totals['hours'] * 60:.1f} min")
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
    from core.families.indextts_import import import_processed
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
    indextts-processed (a folder from the community IndexTTS2 preprocess_data.py: codes, conditioning and
    emotion .npy files become an IndexTTS2 feature cache in OUTPUT; text ids re-derived with --tokenizer).
    Every bad row lands in rejects.jsonl with its line and reason; the input is never modified.
    Audio is converted to mono wav at audio.sample_rate from the config.
    """
    from core.data.importing import import_dataset
    from core.tokenizers.tokenizer import load_tokenizer

    if args.format == INDEXTTS_PROCESSED:
        return _import_indextts_processed(args)

    if args.min_duration is not None or args.max_duration is not None:
        low, high = args.min_duration or 0.0, args.max_duration or float("inf")
        if low >= high:
            raise InputError(f"--min-duration {low} must be below --max-duration {high}.")
        duration = (low, high)
    else:
        duration = None
    summary = import_dataset(
        args.format,
        args.input,
        args.output,
        _sample_rate(),
        ImportOptions(language=args.language, speaker=args.speaker, padding=args.padding),
        tokenizer=load_tokenizer(args.tokenizer) if args.tokenizer else None,
        duration_range=duration,
        uppercase=args.uppercase,
        workers=args.workers,
        confine_to=load_settings().allowed_roots if args.confine_to_roots else None,
    )
    return _summary_result(summary, args.strict)


def _sample(args: argparse.Namespace) -> Result:
    """Render the built-in sentences with espeak-ng (two voices per language) into a dataset."""
    from core.data.sample import sample_dataset

    summary = sample_dataset(args.output, _sample_rate(), args.languages, args.per_language, args.workers)
    return _summary_result(summary, strict=True)


def _split(args: argparse.Namespace) -> Result:
    """Show the deterministic train/val split of a manifest (hash of the id)."""
    from core.data.manifest import load_manifest_rows
    from core.data.splits import split_of

    rows = load_manifest_rows(args.manifest)
    val = [row.id for row in rows if split_of(row.id, args.val_ratio) == "val"]
    data = {"train": len(rows) - len(val), "val": len(val), "val_ratio": args.val_ratio, "val_ids": val}
    return Result(data, render_mapping({k: data[k] for k in ("train", "val", "val_ratio")}))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `dataset` group: import, sample, split."""
    group = add_group(subparsers, "dataset", "import, validate and sample speech datasets")
    imp = add_command(group, "import", _import)
    imp.add_argument("--format", required=True, choices=[*FORMAT_NAMES, INDEXTTS_PROCESSED], help="input layout")
    imp.add_argument("--input", required=True, type=CLI_PATH, help="input folder or file")
    imp.add_argument("--output", required=True, type=CLI_PATH, help="output dataset folder")
    imp.add_argument("--language", help="language code of the clips (required for folder and srt)")
    imp.add_argument("--speaker", help="speaker name (default: per format)")
    imp.add_argument("--tokenizer", type=CLI_PATH, help="reject text with characters this tokenizer cannot encode")
    imp.add_argument("--uppercase", action="store_true", help="upper-case text (for tokenizers trained upper-case)")
    imp.add_argument("--min-duration", type=float_in(0.0), help="shortest clip kept in seconds (default 1 for srt, else 0.3)")
    imp.add_argument("--max-duration", type=float_in(0.0, low_open=True), help="longest clip kept in seconds (default 15 for srt, else 30)")
    imp.add_argument("--padding", type=float_in(0.0), default=0.1, help="srt: seconds added on each side of a subtitle (default 0.1)")
    imp.add_argument("--strict", action="store_true", help="exit 2 when any row is rejected")
    imp.add_argument("--confine-to-roots", action="store_true",
                     help="reject rows whose audio (symlinks followed) lies outside the input's folder, "
                          "the workspace and data_roots (the dashboard and every dataset.import job always set it)")
    imp.add_argument("--workers", type=int_at_least(1), default=2, help="audio conversion threads (default 2)")
    sample = add_command(group, "sample", _sample)
    sample.add_argument("--output", required=True, type=CLI_PATH, help="output dataset folder")
    sample.add_argument("--languages", type=csv_list, default=["en", "am"], help="comma-separated languages (default en,am)")
    sample.add_argument("--per-language", type=int_at_least(1), default=24, help="clips per language (default 24)")
    sample.add_argument("--workers", type=int_at_least(1), default=2, help="parallel espeak-ng processes (default 2)")
    split = add_command(group, "split", _split)
    split.add_argument("--manifest", required=True, type=CLI_PATH, help="manifest.jsonl")
    split.add_argument("--val-ratio", type=float_in(0.0, 1.0, high_open=True), default=0.05, help="share of clips in val (default 0.05)")
