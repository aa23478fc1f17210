"""`embeddings extend`: resize a checkpoint's text rows for an extended tokenizer."""

from __future__ import annotations

import argparse

from core.paths import CLI_PATH
from core.cli.common import SEED_ARG, Result, add_command, add_group, options_of
from core.errors import InputError
from core.families import FAMILIES
from core.tokenizers.vocab import INIT_METHODS
from core.tables import render_mapping


def _extend(args: argparse.Namespace) -> Result:
    """Resize a checkpoint's text embedding and head from a base tokenizer to its extension.

    Copy base rows bit for bit and initialise the rows of new pieces.
    fvt: mean of the base rows of the pieces the base tokenizer splits a new piece into
         (falls back to mean when the base knows none of them); translit: fvt, and a piece the base
         cannot spell is romanized (anyascii; upper-cased for an upper-case base) and FVT runs over the
         romanization; mean: mean of the base rows;
    normal: N(mean, per-dimension std of the base rows). New head-bias entries start at the base mean.
    """
    from core.training.embeddings import extend_checkpoint  # torch loads only when the command runs

    if args.write_config and not args.target_config:
        raise InputError("--write-config needs --target-config IN (the foreign config to correct).")
    report = extend_checkpoint(
        args.checkpoint, args.base_tokenizer, args.tokenizer, args.output,
        **options_of(args, "family", "init", "allow_truncate", "seed", "target_config", "write_config"),
    )
    init = ", ".join(f"{m} {n}" for m, n in report["init"].items() if n) or "none (no new rows)"
    text = render_mapping(
        {
            "output": report["output"],
            "family": report["family"],
            "tokenizer": f"{report['base_size']} -> {report['size']} ids",
            "rows": f"{report['rows_before']} -> {report['rows_after']}",
            "family because": report["family_reason"],
            "base rows copied": report["base_rows_copied"],
            "new rows": init,
            "extra rows moved": (
                f"{report['extra_rows_moved']['from']} -> {report['extra_rows_moved']['to']}"
                if report["extra_rows_moved"] else "none"
            ),
            **({"config written": f"{report['config']['output']} ({report['config']['key']}: "
                                  f"{report['config']['before']} -> {report['config']['after']})"}
               if report.get("config") else {}),
        }
    )
    return Result(report, text)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `embeddings` group with its `extend` command."""
    group = add_group(subparsers, "embeddings", "resize checkpoint text rows to a tokenizer")
    parser = add_command(group, "extend", _extend)
    parser.add_argument("--checkpoint", required=True, type=CLI_PATH, help="input checkpoint (.safetensors, .pt, .pth)")
    parser.add_argument("--base-tokenizer", required=True, type=CLI_PATH, help="the tokenizer the checkpoint was made for")
    parser.add_argument("--tokenizer", required=True, type=CLI_PATH, help="the extended tokenizer (a prefix extension of the base)")
    parser.add_argument("--output", required=True, type=CLI_PATH, help="output checkpoint (.safetensors or .pt), written atomically")
    parser.add_argument("--family", default="auto", choices=["auto", *FAMILIES], help="checkpoint family (default: detect)")
    parser.add_argument("--init", default="fvt", choices=INIT_METHODS, help="how new rows start (default: fvt)")
    parser.add_argument("--allow-truncate", action="store_true", help="allow the result to have fewer rows")
    parser.add_argument("--seed", type=SEED_ARG, default=0, help="random seed for --init normal")
    parser.add_argument("--target-config", type=CLI_PATH, help="a foreign trainer's config (IndexTTS2 config.yaml, Chatterbox/T3 "
                        "config) whose vocab size must follow the new tokenizer")
    parser.add_argument("--write-config", type=CLI_PATH, help="write the --target-config copy with the vocab size corrected "
                        "(atomic; never over an input)")
