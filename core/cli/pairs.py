"""`pairs build`: same-speaker prompt clips for each cached clip."""

from __future__ import annotations

import argparse

from core.paths import CLI_PATH
from core.cli.common import SEED_ARG, Result, add_command, add_group, int_in


def _build(args: argparse.Namespace) -> Result:
    """Choose N same-speaker prompt clips for every cached clip (writes pairs.json in the cache)."""
    from core.data.pairs import build_pairs

    report = build_pairs(args.cache, args.per_target, args.seed)
    data = report.to_dict()
    lines = [f"wrote {report.pairs} prompt pairs for {report.targets} targets to {report.path}"]
    if report.single_clip_speakers:
        listed = ", ".join(f"{s} ({c})" for s, c in report.single_clip_speakers.items())
        lines.append(f"speakers with one clip (no prompt possible, not used as targets): {listed}")
    if report.short_speakers:
        listed = ", ".join(f"{s} ({n})" for s, n in report.short_speakers.items())
        lines.append(f"speakers with fewer than {args.per_target} other clips (prompts per target): {listed}")
    return Result(data, "\n".join(lines))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `pairs` group: build."""
    group = add_group(subparsers, "pairs", "prompt pairs for TTS training")
    build = add_command(group, "build", _build)
    build.add_argument("--cache", required=True, type=CLI_PATH, help="cache folder (cache/<fingerprint>) made by `preprocess`")
    build.add_argument("--per-target", type=int_in(1, 1000), default=1, help="prompt clips per target (default 1)")
    build.add_argument("--seed", type=SEED_ARG, default=0, help="random seed for the choice (default 0)")
