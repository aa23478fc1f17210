"""`doctor`: the preflight checks, from a run config or from explicit files."""

from __future__ import annotations

import argparse

from core.paths import CLI_PATH
from core.cli.common import Result, add_command, int_in, memory_size, MEMORY_SIZE_HELP
from core.numbers import MAX_VOCAB
from core.config import load_settings
from core.checks.doctor import DoctorContext, doctor_context_from_run_config, run_doctor
from core.errors import InputError
from core.families import FAMILIES
from core.training.run_config import load_run_config


# option (argparse dest) -> the DoctorContext field it sets, over what a --config gave
OVERRIDES = {
    "tokenizer": "tokenizer_path",
    "base_tokenizer": "base_tokenizer_path",
    "target_config": "target_config_path",
    "checkpoint": "checkpoint_path",
    "cache": "cache_dir",
    "family": "family",
    "freeze_until": "freeze_until",
    "declared_vocab": "declared_vocab",
    "device": "device",
    "device_memory": "device_memory",
    "nproc": "ranks",
}


def _context(args: argparse.Namespace) -> DoctorContext:
    settings = load_settings()
    if args.config:
        config_path = args.config
        ctx = doctor_context_from_run_config(load_run_config(config_path, settings), config_path, settings)
    elif args.tokenizer or args.checkpoint or args.cache or args.target_config:
        ctx = DoctorContext(settings=settings)
    else:
        raise InputError("doctor needs --config RUN.yaml, or --tokenizer and/or --checkpoint. See --help.")
    for option, field in OVERRIDES.items():
        if getattr(args, option) is not None:
            setattr(ctx, field, getattr(args, option))
    return ctx


def _doctor(args: argparse.Namespace) -> Result:
    """Check that tokenizer, checkpoint, config and freeze range agree before anything starts.

    Run every preflight check and print pass / warn / fail with the numbers and the fix.
    Exit 0 when nothing fails, 2 otherwise. Options given with --config override it.
    """
    report = run_doctor(_context(args))
    return Result(report.to_dict(), report.render(), 0 if report.ok else 2)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `doctor` command."""
    parser = add_command(subparsers, "doctor", _doctor)
    parser.add_argument("--config", type=CLI_PATH, help="run config YAML (its paths resolve against the workspace)")
    parser.add_argument("--tokenizer", type=CLI_PATH, help="tokenizer .model or .json")
    parser.add_argument("--base-tokenizer", type=CLI_PATH,
                        help="the tokenizer the checkpoint was trained with (yours must extend it)")
    parser.add_argument("--target-config", type=CLI_PATH, help="a foreign trainer's config to gate: IndexTTS2 "
                        "config.yaml (gpt.number_text_tokens) or a Chatterbox/T3 config (text_tokens_dict_size)")
    parser.add_argument("--checkpoint", type=CLI_PATH, help="checkpoint .safetensors / .pt / .pth")
    parser.add_argument("--cache", type=CLI_PATH, help="preprocessing cache folder (cache/<fingerprint>) to check against the tokenizer")
    parser.add_argument("--family", choices=list(FAMILIES), help="checkpoint family (default: metadata or keys)")
    parser.add_argument("--freeze-until", type=int_in(0, MAX_VOCAB), help="first trainable text row (rows below stay frozen)")
    parser.add_argument("--declared-vocab", type=int_in(1, MAX_VOCAB),
                        help="a vocab size some other trainer's config declares (fails when it disagrees)")
    parser.add_argument("--device-memory", type=memory_size, metavar="SIZE",
                        help="plan the run's memory for a device of this size (24GiB, 80GB, …; "
                             f"{MEMORY_SIZE_HELP}) instead of this machine's free memory")
    parser.add_argument("--nproc", type=int_in(1, 64), metavar="N",
                        help="plan each of N processes of a run under torchrun (--nproc_per_node N): DDP's gradient "
                             "buckets on every rank (default 1)")
    parser.add_argument("--device", choices=["cuda", "cpu"],
                        help="the device type the memory plan is for (default: cuda with --device-memory, else the run's)")
