"""`prune --checkpoint IN --output OUT.safetensors`: keep weights and metadata only."""

from __future__ import annotations

import argparse

from core.paths import CLI_PATH
from core.cli.common import Result, add_command, add_force_option
from core.config import load_settings
from core.tables import render_mapping


def _prune(args: argparse.Namespace) -> Result:
    """Strip a training checkpoint to weights and metadata (safetensors).

    Drops optimiser, scheduler and RNG state. Copies the tokenizer (and codec) beside the output as
    <stem>.tokenizer.<ext> and <stem>.codec.pt unless --no-copy; inference finds them by fingerprint.
    An existing output is replaced only with --force.
    """
    from core.training.prune import prune_checkpoint

    report = prune_checkpoint(args.checkpoint, args.output, load_settings(), copy_assets=not args.no_copy)
    shown = {k: report[k] for k in ("output", "input_bytes", "output_bytes", "tensors", "step")}
    shown.update({f"copied {k}": v for k, v in report["assets"].items()})
    return Result(report, render_mapping(shown))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `prune` command."""
    parser = add_command(subparsers, "prune", _prune)
    parser.add_argument("--checkpoint", required=True, type=CLI_PATH, help="training checkpoint (.pt)")
    parser.add_argument("--output", required=True, type=CLI_PATH, help="output .safetensors")
    parser.add_argument("--no-copy", action="store_true", help="do not copy the tokenizer and codec beside the output")
    add_force_option(parser)
