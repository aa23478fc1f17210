"""`python -m core train --config RUN.yaml [--resume auto|PATH | --fresh] [--max-steps N] [--reset-optimizer]`."""

from __future__ import annotations

import argparse

from core.cli.common import Result, add_command, int_in, memory_size, MEMORY_SIZE_HELP
from core.numbers import MAX_STEPS
from core.config import load_settings
from core.paths import CLI_PATH, PathType
from core.training.run_config import load_run_config
from core.tables import render_mapping


def _train(args: argparse.Namespace) -> Result:
    """Train a TTS or LM run from a run config.

    Train from a run config (runs/<run>/config.yaml shape; `preset: NAME` inherits config/presets/NAME.yaml).
    Order: plan the run → resolve tokenizer → size the model → doctor (must pass) → data → train.
    Writes runs/<name>/: config.yaml, metrics.jsonl, tb/, checkpoints/, log.txt, status.json.
    Touch runs/<name>/STOP or send SIGTERM to save and stop (exit 0, state `stopped`).
    A run folder that already holds checkpoints is never overwritten: without --resume or --fresh
    the command refuses (exit 2) and changes nothing.
    Multi-GPU: torchrun --standalone --nproc_per_node N -m core train --config RUN.yaml (N ranks of batch.size B
    train as one process with N x B; several machines: docs/scaling-out.md).
    """
    from core.recipe import train

    config = load_run_config(args.config)
    result = train(config, args.config, load_settings(), resume=args.resume, max_steps=args.max_steps,
                   reset_optimizer=args.reset_optimizer, fresh=args.fresh, device_memory=args.device_memory)
    data = result.to_dict()
    shown = {k: data[k] for k in ("state", "step", "run_dir", "last_checkpoint", "best_val_loss")}
    shown.update({f"val_{k}": round(v, 4) for k, v in result.val.items()})
    return Result(data, render_mapping(shown))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `train` command."""
    parser = add_command(subparsers, "train", _train)
    parser.add_argument("--config", required=True, type=CLI_PATH, help="run config YAML (its paths resolve against the workspace)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--resume", default=None, type=PathType(keywords=("auto",)), help="`auto` (newest checkpoint of the run, if any) or a checkpoint path")
    start.add_argument("--fresh", action="store_true",
                       help="start over: move a run already in runs/<name>/ aside to runs/<name>.old-<time>, then train from step 0")
    parser.add_argument("--max-steps", type=int_in(1, MAX_STEPS), default=None,
                        help="stop at this step (the lr schedule still follows schedule.max_steps)")
    parser.add_argument("--device-memory", type=memory_size, metavar="SIZE",
                        help="refuse to start unless the doctor's memory plan fits this much device memory (24GiB, 80GB, …; "
                             f"{MEMORY_SIZE_HELP})")
    parser.add_argument("--reset-optimizer", action="store_true",
                        help="when resuming, start a fresh AdamW state on purpose (never done silently)")
