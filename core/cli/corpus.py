"""`python -m core corpus …`: build text corpora for tokenizer training."""

from __future__ import annotations

import argparse

from core.paths import CLI_PATH
from core.cli.common import LANGUAGE_ARG, Result, add_command, add_group
from core.tokenizers.corpus import collect_corpus
from core.tables import render_mapping


def _collect(args: argparse.Namespace) -> Result:
    """Write the normalised text of a manifest to a corpus file.

    Write the `text` field of each manifest row (optionally only one language),
    normalised (Unicode NFC, collapsed whitespace, Ethiopic punctuation kept), one per line.
    """
    summary = collect_corpus(args.manifest, args.output, args.language).as_dict()
    return Result(summary, render_mapping(summary))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Register the `corpus` group and its `collect` command."""
    commands = add_group(subparsers, "corpus", "build text corpora for tokenizer training")
    parser = add_command(commands, "collect", _collect)
    parser.add_argument("--manifest", type=CLI_PATH, required=True, metavar="M.jsonl")
    parser.add_argument("--language", metavar="CODE", type=LANGUAGE_ARG, help="keep only rows of this language (e.g. am)")
    parser.add_argument("--output", type=CLI_PATH, required=True, metavar="corpus.txt")
