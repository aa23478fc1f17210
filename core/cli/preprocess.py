"""`preprocess`: the fingerprinted cache of text ids, speech codes and speaker references."""

from __future__ import annotations

import argparse

from core.paths import CLI_PATH
from core.cli.common import Result, add_command, float_in, int_in
from core.numbers import MAX_WORKERS
from core.config import load_settings
from core.tables import render_mapping


def _preprocess(args: argparse.Namespace) -> Result:
    """Turn a manifest into text ids, speech codes and speaker references in OUTPUT/<fingerprint>/.

    Build the preprocessing cache. The folder name is a fingerprint of the tokenizer, the codec,
    the text normaliser, the val ratio and the manifest, so a changed tokenizer never reuses an
    old cache. Runs across CPU cores, resumes an interrupted build and rebuilds corrupt items.
    """
    from core.data.cache import build_cache

    output = args.output or load_settings().resolve("cache")
    info = build_cache(
        args.manifest,
        args.tokenizer,
        args.codec,
        output,
        workers=args.workers,
        val_ratio=args.val_ratio,
        uppercase=args.uppercase,
    )
    data = info.to_dict()
    shown = {k: v for k, v in data.items() if k != "skipped"} | {"skipped": len(info.skipped)}
    lines = [render_mapping(shown)]
    lines.extend(f"  skipped {s.get('id')} (line {s.get('line')}): {s['error']}" for s in info.skipped[:20])
    return Result(data, "\n".join(lines))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `preprocess` command."""
    parser = add_command(subparsers, "preprocess", _preprocess)
    parser.add_argument("--manifest", required=True, type=CLI_PATH, help="manifest.jsonl")
    parser.add_argument("--tokenizer", required=True, type=CLI_PATH, help="tokenizer .model or .json")
    parser.add_argument("--codec", required=True, type=CLI_PATH, help="codec .pt made by `codec train`")
    parser.add_argument("--output", type=CLI_PATH, help="cache root (default: the workspace's cache/)")
    parser.add_argument("--workers", type=int_in(1, MAX_WORKERS), help="worker processes (default: CPU cores)")
    parser.add_argument("--val-ratio", type=float_in(0.0, 1.0, high_open=True), default=0.05, help="share of clips in the val split (default 0.05)")
    case = parser.add_mutually_exclusive_group()
    case.add_argument("--uppercase", dest="uppercase", action="store_true", default=None, help="upper-case text before tokenising")
    case.add_argument("--no-uppercase", dest="uppercase", action="store_false", help="keep the text's case")
