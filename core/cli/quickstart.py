"""`quickstart tts [--preset quick|full]` and `quickstart lm [--corpus FILE…]`: whole journeys, one command."""

from __future__ import annotations

import argparse
import signal
from typing import Any

from core.paths import CLI_PATH, PathType
from core.cli.catalogue import cli_catalogue
from core.cli.common import Result, add_command, add_group, name_arg
from core.tables import render_mapping

EPILOG = """\
Every stage runs as a job on the queue (visible in `jobs list` and the dashboard's Jobs tab) with
a worker started in this process; --external-worker leaves the stages to a worker that is already
running (the dashboard's, or `python -m core worker`); --inline runs them in this process instead.
The report is written to runs/<name>/report.json and report.md.
"""


def _interrupt_on_sigterm() -> None:
    """Turn SIGTERM (a cancelled quickstart job) into KeyboardInterrupt so the running stage is cancelled."""
    def handler(signum: int, frame: Any) -> None:  # noqa: ARG001
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (in-process callers): nothing to install
        pass


def _mode(args: argparse.Namespace) -> dict[str, Any]:
    return {"mode": "inline" if args.inline else "queue", "embedded_worker": not args.external_worker,
            "catalogue": cli_catalogue()}


def _tts(args: argparse.Namespace) -> Result:
    """English base -> Amharic extension -> frozen fine-tune -> speech.

    The espeak sample, an English base tokenizer and model, the Amharic tokenizer extension, fvt embeddings, a frozen-base-rows fine-tune, prune, synthesis and eval.
    """
    from journeys.quickstart import run_tts_quickstart

    _interrupt_on_sigterm()
    report = run_tts_quickstart(args.preset, args.name, **_mode(args))
    training, freeze = report["training"], report["freeze"]
    shown = {
        "report": report["report"]["markdown"],
        "seconds": report["seconds"],
        "tokenizer": f"{report['tokenizer']['base_size']} -> {report['tokenizer']['size']}, "
                     f"Amharic unk rate {report['tokenizer']['unk_rate_new_language']}",
        "Amharic val mel_loss": f"{training['val_mel_loss_start']:.4f} -> {training['val_mel_loss_end']:.4f}",
        "base rows unchanged": freeze["base_rows_sha256_before"] == freeze["base_rows_sha256_after"],
        "audio": ", ".join(a["path"] for a in report["audio"]),
    }
    return Result(report, render_mapping(shown))


def _lm(args: argparse.Namespace) -> Result:
    """Vocabulary sweep, LMs at two or more vocab sizes, bits per byte, samples.

    Sweep vocabulary sizes, train a tokenizer and a small GPT per compared size, report validation bits per byte side by side and sample at two temperatures.
    """
    from journeys.quickstart_lm import run_lm_quickstart

    _interrupt_on_sigterm()
    report = run_lm_quickstart(args.corpus, args.preset, args.name, **_mode(args))
    shown = {"report": report["report"]["markdown"], "seconds": report["seconds"],
             "recommended by the sweep": report["sweep"]["recommended"], "best by val bpb": report["best_vocab_size"]}
    shown.update({f"val bpb @ {m['vocab_size']}": round(m["val_bpb_end"], 4) for m in report["models"]})
    shown.update({f"sample @ T={s['temperature']}": s["prompt"] + s["text"] for s in report["samples"]})
    return Result(report, render_mapping(shown))


def _common(parser: argparse.ArgumentParser, preset: str) -> None:
    parser.epilog = EPILOG
    parser.add_argument("--preset", default=preset, type=PathType(suffixes=(".yaml", ".yml")),
                        help=f"preset name in config/quickstart/ or a preset YAML file (default {preset})")
    parser.add_argument("--name", type=name_arg("--name"), help="run folder name under runs/ (default quickstart-<preset>-<UTC time>)")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--external-worker", action="store_true",
                     help="leave the stage jobs to an already running worker (the dashboard's)")
    how.add_argument("--inline", action="store_true", help="run the stages in this process, not as jobs")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Register the `quickstart` group with its `tts` and `lm` commands."""
    group = add_group(subparsers, "quickstart", "run a whole journey end to end and write a report")
    tts = add_command(group, "tts", _tts)
    _common(tts, "quick")
    lm = add_command(group, "lm", _lm)
    _common(lm, "lm")
    lm.add_argument("--corpus", nargs="+", type=CLI_PATH, metavar="FILE",
                    help="UTF-8 text files (default: the espeak sample's English and Amharic transcripts)")
