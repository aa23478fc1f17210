"""`eval tts`: objective evaluation of a TTS checkpoint on held-out sentences."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.paths import CLI_PATH, PathType
from core.cli.common import LANGUAGE_ARG, SEED_ARG, Result, add_command, add_group, float_in
from core.numbers import MAX_TEMPERATURE
from core.cli.infer import add_family_options, run_model_dir
from core.runs import eval_file_beside
from core.tables import render_table

EPILOG = """\
SENTENCES is a text file with one sentence per line, or a manifest.jsonl (its clips are then
the references unless --references says otherwise). --references DIR holds <n>.wav for line n.
Rows: model = synthesized speech; codec = references through the codec (the ceiling; own models
only); references = the references themselves (the judges' own accuracy). Chance is 1/N.
The quality report (failure flags, speaker similarity, MOS estimate, CER from --asr) is described
in docs/concepts/quality.md.
A Chatterbox or IndexTTS2 checkpoint speaks through its family's speech models: --model-dir,
else the run's model_dir:, else settings families.<family>.model_dir. The family comes from the
checkpoint's metadata; --family (and --tokenizer) are needed only for a file without it (a
published one, e.g. to measure the released model before fine-tuning).
--base-sentences measures what the base language kept: the same rows and quality report on held-out
sentences of the language the model spoke before its fine-tune (clips in eval_audio/<stem>/<language>/);
the eval.json entry keeps the new language's numbers at the top and both under `sections`.
"""

METRICS = ("mcd_db", "log_f0_ratio", "duration_ratio", "dtw_identification", "sphinx_identification", "wer")


def _format(value: Any) -> str:
    return "-" if value is None else str(value)


def _tts(args: argparse.Namespace) -> Result:
    """Synthesize held-out sentences and measure MCD, F0/duration ratios and intelligibility."""
    from core.config import load_settings
    from core.eval.tts import ESPEAK, evaluate_checkpoint, evaluate_with_base_language, read_sentences

    if args.base_references and not args.base_sentences:
        raise InputError("--base-references names the clips of --base-sentences; pass --base-sentences too.")
    settings = load_settings()
    sentences, clips = read_sentences(args.sentences)
    references = args.references or (clips if clips is not None else ESPEAK)
    base = read_sentences(args.base_sentences) if args.base_sentences else None
    model_dir = args.model_dir or run_model_dir(settings.resolve(args.checkpoint), settings)
    options = {
        "wer": not args.no_wer, "seed": args.seed, "device": args.device, "model_dir": model_dir,
        "options": {} if args.temperature is None else {"temperature": args.temperature},
        "family": args.family, "tokenizer": args.tokenizer, "asr": args.asr, "mos": not args.no_mos}
    if base is None:
        result = evaluate_checkpoint(args.checkpoint, sentences, references, args.language, settings, **options)
        sections = [result]
    else:
        base_sentences, base_clips = base
        base_references = args.base_references or (base_clips if base_clips is not None else ESPEAK)
        result = evaluate_with_base_language(args.checkpoint, sentences, references, args.language, base_sentences,
                                             base_references, args.base_language, settings, **options)
        sections = [result, {**result["sections"]["base_language"], "sentences": len(base_sentences)}]
    text = "\n".join([
        f"checkpoint {result['checkpoint']} ({result['family']}, step {result['step']}), "
        f"references {result['references_source']}",
        *(line for section in sections for line in _section_lines(section)),
        *(f"no {name} row: {why}" for name, why in result["absent_rows"].items()),
        f"written to {eval_file_beside(Path(result['checkpoint']))} in {result['seconds']} s",
    ])
    return Result(result, text)


def _section_lines(result: dict[str, Any]) -> list[str]:
    """Return the text lines of one language's evaluation: its rows, flags and quality numbers."""
    quality = result["quality"]
    rows = [[name, *(_format(row[m]) for m in METRICS)] for name, row in result["rows"].items()]
    return [
        f"{result['language']}: {result['sentences']} sentences, chance {result['chance']}",
        render_table(["row", *METRICS], rows),
        *(f"{'FLAG' if flag['flagged'] else 'ok  '} {name}: {flag['words']}" for name, flag in quality["flags"].items()),
        f"speaker similarity {_format(quality['speaker_similarity'])}, MOS estimate {_format(quality['mos_estimate'])}, "
        f"CER {_format(quality['cer'])}",
    ]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Register the `eval` group and its `tts` command."""
    group = add_group(subparsers, "eval", "objective evaluation of checkpoints")
    parser = add_command(group, "tts", _tts)
    parser.epilog = EPILOG
    parser.add_argument("--checkpoint", required=True, type=CLI_PATH,
                        help="TTS checkpoint (.safetensors or .pt): LinguaForge's own, or a chatterbox/indextts run's")
    add_family_options(parser)
    parser.add_argument("--tokenizer", default=None, type=CLI_PATH,
                        help="tokenizer of a checkpoint whose metadata names none (a published one); "
                             "otherwise it must match the checkpoint's fingerprint")
    parser.add_argument("--sentences", required=True, type=CLI_PATH, help="held-out sentences: text file, one per line, or manifest.jsonl")
    parser.add_argument("--references", type=PathType(keywords=("espeak",)), help="folder of <n>.wav reference clips, or `espeak` to render them")
    parser.add_argument("--language", default="en", type=LANGUAGE_ARG, help="language code (espeak voice; PocketSphinx only for en)")
    parser.add_argument("--base-sentences", default=None, type=CLI_PATH,
                        help="held-out sentences of the base language (the one the model spoke before its fine-tune), "
                             "measured the same way; eval.json's entry then carries a section per language")
    parser.add_argument("--base-references", type=PathType(keywords=("espeak",)),
                        help="reference clips of --base-sentences: folder of <n>.wav, or `espeak` (default: the "
                             "manifest's clips, else espeak)")
    parser.add_argument("--base-language", default="en", type=LANGUAGE_ARG, help="language code of --base-sentences (default en)")
    parser.add_argument("--no-wer", action="store_true", help="skip free decoding and its word error rate (slow on CPU)")
    parser.add_argument("--asr", default=None, metavar="NAME",
                        help="ASR hook for CER: pocketsphinx, or a hook the settings file declares under eval.asr_hooks "
                             "(python:<module>:<function> or command:'<program … {wav} …>')")
    parser.add_argument("--no-mos", action="store_true", help="skip the DNSMOS naturalness estimate")
    parser.add_argument("--seed", type=SEED_ARG, default=0, help="sampling seed for synthesis")
    parser.add_argument("--temperature", type=float_in(0.0, MAX_TEMPERATURE), default=None,
                        help="sampling temperature of synthesis; 0 = greedy (default: the model's own, 0.8 for "
                             "LinguaForge's model)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="where synthesis runs: auto = CUDA when present (default), cpu, or cuda")
