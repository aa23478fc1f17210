"""`python -m core tokenizer …`: train, extend, merge, inspect, sweep and encode tokenizers."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from core.paths import CLI_PATH
from core.cli._guards import check_output_file
from core.cli.common import Result, add_command, add_group, csv_list, float_in, int_in, int_list
from core.numbers import MAX_VOCAB
from core.tokenizers.corpus import read_corpus_lines
from core.errors import InputError
from core.tokenizers.hf_merge import merge_hf_tokenizer
from core.tokenizers.sp_extend import extend_sentencepiece
from core.tokenizers.protect import DEFAULT_LANGUAGE, HELDOUT_WORDS
from core.tokenizers.scripts import AUTO, SCRIPT_CHOICES
from core.tokenizers.tokenizer import load_tokenizer
from core.tokenizers.report import inspect_tokenizer
from core.tokenizers.sweep import sweep_vocabulary_sizes
from core.tokenizers.train import KINDS, MODEL_TYPES, SENTENCEPIECE_KIND, SentencePieceOptions, train_tokenizer
from core.tables import render_mapping, render_table

MAX_SWEEP_SIZES = 32
COVERAGE = float_in(0.9, 1.0)


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def _drift_text(drift: dict[str, Any] | None) -> str:
    if drift is None:
        return "not measured (nothing protected or held out: pass --protect-language, --protect-corpus or --heldout-corpus)"
    text = (f"{drift['lines_changed']} of {drift['lines_checked']} protected lines changed "
            f"({drift['lines_skipped_unk']} skipped: the base encodes them with unk)")
    heldout = drift.get("heldout")
    if heldout:
        text += (f"; unseen (not protected, from {heldout['source']}): {heldout['lines_changed']} of "
                 f"{heldout['lines_checked']} changed ({heldout['rate']:.2%})")
    else:
        text += "; drift on unseen text not measured (pass --heldout-corpus)"
    return text


def _lines(files: list[Path] | None) -> list[str] | None:
    return read_corpus_lines(files, check_variety=False) if files else None


def _grow_text(report: dict[str, Any], action: str) -> str:
    summary = {
        "output": report["output"],
        "base size": report["base_size"],
        "new size": report["new_size"],
        f"pieces {action}": report["pieces_added"],
        "characters forced in": report["characters_forced"],
        "whole scripts added": ", ".join(f"{k} (+{n})" for k, n in report["scripts_added"].items()) or "none",
        "candidates available": report["candidates_available"],
        "candidates pruned": report["candidates_pruned"],
        "unk rate on corpus": _percent(report["unk_rate"]),
        "added pieces the corpus uses": report["added_pieces_used"],
        "base drift": _drift_text(report["base_drift"]),
    }
    return render_mapping(summary)


def _train(args: argparse.Namespace) -> Result:
    """Train a SentencePiece or HF BPE tokenizer on a corpus.

    Train a tokenizer. SentencePiece ids follow IndexTTS: <s>=0, </s>=1, <unk>=2, no pad.
    A vocabulary size larger than the corpus supports is refused with the maximum.
    """
    if args.kind == SENTENCEPIECE_KIND:
        check_output_file(args.output, args.output.with_suffix(".vocab"))
    lines = read_corpus_lines(args.corpus)
    options = SentencePieceOptions(
        model_type=args.model_type,
        character_coverage=args.character_coverage,
        user_defined_symbols=tuple(args.user_defined_symbols),
    )
    if args.kind != SENTENCEPIECE_KIND and (args.user_defined_symbols or args.model_type != "bpe"):
        raise InputError("--model-type and --user-defined-symbols apply to --kind sentencepiece only.")
    summary = train_tokenizer(lines, args.kind, args.vocab_size, args.output, options)
    return Result(summary, render_mapping({k: v for k, v in summary.items() if k != "special_ids"})
                  + f"\nspecial ids  {summary['special_ids']}")


def _extend(args: argparse.Namespace) -> Result:
    """Extend a SentencePiece model with a new language.

    Append new-language pieces to a SentencePiece model. Base ids are unchanged; every
    corpus character is added (every Ethiopic letter for an Ethiopic corpus); the base
    language's common words, digit strings and every --protect-corpus line keep their
    exact base encoding. Drift on unseen text is measured on --heldout-corpus (default: a
    held-out slice of the built-in lexicon), never on the protected lines.
    """
    for suffix in (".vocab", ".report.json"):
        check_output_file(args.output, args.output.with_suffix(suffix))
    lines = read_corpus_lines(args.corpus)
    report = extend_sentencepiece(args.base, lines, args.target_size, args.output, _lines(args.protect_corpus),
                                  args.character_coverage, args.add_script, args.protect_language,
                                  heldout=_lines(args.heldout_corpus))
    text = _grow_text(report, "added")
    if not report["reached_target"]:
        text += (f"\nstopped short of --target-size {report['target_size']}: this corpus offered "
                 f"{report['candidates_available']} candidate pieces (plus {report['characters_forced']} "
                 f"characters) and {report['candidates_pruned']} were pruned to protect the base. "
                 "Add more text to reach the target.")
    return Result(report, text)


def _merge(args: argparse.Namespace) -> Result:
    """Merge a new language into an HF BPE tokenizer.json.

    Merge new-language tokens into an HF tokenizer (a byte-level BPE such as GPT-2's included). Base
    ids, merges and added tokens are unchanged; new ids sit above every existing id; the language
    tag becomes one special token. Protection and drift measurement work as for `tokenizer extend`,
    the drift lines also carrying the base's added tokens.
    """
    check_output_file(args.output, args.output.with_suffix(".report.json"))
    lines = read_corpus_lines(args.corpus) if args.corpus else None
    report = merge_hf_tokenizer(args.base, args.output, args.add, lines, args.vocab_size, args.language_tag,
                                _lines(args.protect_corpus), args.add_script, args.protect_language,
                                heldout=_lines(args.heldout_corpus))
    text = _grow_text(report, "added") + f"\nmerges added  {report['merges_added']}"
    if report["language_tag"]:
        text += f"\nlanguage tag  {report['language_tag']} = id {report['language_tag_id']}"
    if report["tokens_per_character"]:
        per = report["tokens_per_character"]
        text += f"\ntokens/char   {per['base']} -> {per['merged']} (the corpus, base -> merged)"
    if report["tokenizer_folder"]:
        text += f"\nAutoTokenizer folder  {report['tokenizer_folder']}"
    return Result(report, text)


def _inspect(args: argparse.Namespace) -> Result:
    """Describe a tokenizer and how it encodes a corpus."""
    lines = read_corpus_lines(args.corpus, check_variety=False) if args.corpus else None
    report = inspect_tokenizer(args.tokenizer, lines, args.base_size)
    head = {k: report[k] for k in ("path", "kind", "size", "fingerprint", "special_ids")}
    text = render_mapping(head)
    stats = report.get("corpus")
    if stats:
        rows = {
            "lines / tokens": f"{stats['lines']} / {stats['tokens']}",
            "unk rate": _percent(stats["unk_rate"]),
            "unknown characters": " ".join(f"{u['char']}({u['codepoint']})×{u['count']}"
                                           for u in stats["unknown_characters"]) or "none",
            "characters per token": f"{stats['chars_per_token']:.3f}",
            "bytes per token": f"{stats['bytes_per_token']:.3f}",
            "vocabulary never used": f"{_percent(stats['unused_share'])} "
                                     f"({report['size'] - stats['ids_used']} of {report['size']} ids)",
        }
        if args.base_size is not None:
            rows[f"tokens with id >= {args.base_size}"] = (
                f"{stats['tokens_at_or_above_base']} ({_percent(stats['share_at_or_above_base'])}); "
                f"{stats['added_pieces_used']} of {stats['added_pieces']} added ids used")
        text += "\n\n" + render_mapping(rows)
    return Result(report, text)


def _sweep(args: argparse.Namespace) -> Result:
    """Train several vocabulary sizes and recommend one."""
    lines = read_corpus_lines(args.corpus)
    options = SentencePieceOptions(model_type=args.model_type)
    result = sweep_vocabulary_sizes(lines, args.sizes, args.kind, options)
    table = render_table(
        ("size", "chars/token", "bytes/token", "unused", "note"),
        [(r["size"], f"{r['chars_per_token']:.3f}", f"{r['bytes_per_token']:.3f}", _percent(r["unused_share"]), "")
         if r["error"] is None else (r["size"], "-", "-", "-", r["error"]) for r in result["rows"]],
    )
    text = f"{table}\n\nrecommended: {result['recommended']}\nreason: {result['reason']}"
    return Result(result, text)


def _encode(args: argparse.Namespace) -> Result:
    """Show the ids and pieces of a text."""
    tokenizer = load_tokenizer(args.tokenizer)
    ids = tokenizer.encode(args.text)
    pieces = [tokenizer.piece(i) for i in ids]
    unk = sum(1 for i in ids if i == tokenizer.unk_id)
    data = {"tokenizer": str(args.tokenizer), "text": args.text, "ids": ids, "pieces": pieces,
            "count": len(ids), "unk_count": unk}
    text = f"ids     {' '.join(map(str, ids))}\npieces  {' '.join(pieces)}\ncount   {len(ids)} ({unk} unk)"
    return Result(data, text)


def _add_train(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "train", _train)
    parser.add_argument("--corpus", nargs="+", type=CLI_PATH, required=True, metavar="FILE", help="UTF-8 text files")
    parser.add_argument("--kind", choices=KINDS, default=SENTENCEPIECE_KIND)
    parser.add_argument("--vocab-size", type=int_in(1, MAX_VOCAB), required=True, metavar="N")
    parser.add_argument("--output", type=CLI_PATH, required=True, metavar="PATH",
                        help="NAME.model (sentencepiece) or NAME.json (hf-bpe)")
    parser.add_argument("--model-type", choices=MODEL_TYPES, default="bpe", help="SentencePiece model type")
    parser.add_argument("--character-coverage", type=COVERAGE, default=1.0, metavar="F")
    parser.add_argument("--user-defined-symbols", type=csv_list, default=[], metavar="A,B,…",
                        help='pieces kept whole, e.g. "፡,።,፣"')


def _add_vocabulary_guards(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--protect-corpus", nargs="+", type=CLI_PATH, metavar="FILE",
                        help="base-language lines whose encoding must not change: every line keeps its exact "
                             "base encoding (lines the base encodes with unk are skipped and counted)")
    parser.add_argument("--heldout-corpus", nargs="+", type=CLI_PATH, metavar="FILE",
                        help="base-language lines never protected, to measure drift on unseen text (default: the "
                             f"{HELDOUT_WORDS:,} --protect-language words ranked after the protected ones)")
    parser.add_argument("--add-script", choices=SCRIPT_CHOICES, default=AUTO,
                        help="add every letter of a script (auto: the corpus's script when most of its letters are "
                             "Ethiopic; none: corpus characters only)")
    parser.add_argument("--protect-language", default=DEFAULT_LANGUAGE, metavar="LANG",
                        help="protect the base language's 20,000 most frequent words (wordfreq, cased like the base) "
                             "and the digit strings 0-9999 (default: en; none: only --protect-corpus)")


def _add_extend(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "extend", _extend)
    parser.add_argument("--base", type=CLI_PATH, required=True, metavar="BASE.model")
    parser.add_argument("--corpus", nargs="+", type=CLI_PATH, required=True, metavar="FILE")
    parser.add_argument("--target-size", type=int_in(1, MAX_VOCAB), required=True, metavar="N")
    parser.add_argument("--output", type=CLI_PATH, required=True, metavar="OUT.model")
    parser.add_argument("--character-coverage", type=COVERAGE, default=1.0, metavar="F")
    _add_vocabulary_guards(parser)


def _add_merge(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "merge", _merge)
    parser.add_argument("--base", type=CLI_PATH, required=True, metavar="BASE.json",
                        help="the base tokenizer.json, or a folder AutoTokenizer loads (Chatterbox-Turbo's GPT-2 files); "
                             "a folder base is also written as an AutoTokenizer folder: OUT without .json")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--add", type=CLI_PATH, metavar="NEW.json", help="tokenizer.json to merge in")
    source.add_argument("--corpus", nargs="+", type=CLI_PATH, metavar="FILE", help="train the addition on these")
    parser.add_argument("--vocab-size", type=int_in(1, MAX_VOCAB), metavar="N", help="size of the addition trained on --corpus")
    parser.add_argument("--output", type=CLI_PATH, required=True, metavar="OUT.json")
    parser.add_argument("--language-tag", metavar="TAG",
                        help="2 or 3 lower-case letters, e.g. am, added as the special token [am]")
    _add_vocabulary_guards(parser)


def _add_inspect(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "inspect", _inspect)
    parser.add_argument("--tokenizer", type=CLI_PATH, required=True, metavar="PATH")
    parser.add_argument("--corpus", nargs="+", type=CLI_PATH, metavar="FILE")
    parser.add_argument("--base-size", type=int_in(0, MAX_VOCAB), metavar="N", help="count tokens with ids at or above N")


def _add_sweep(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "sweep", _sweep)
    parser.add_argument("--corpus", nargs="+", type=CLI_PATH, required=True, metavar="FILE")
    parser.add_argument("--sizes", type=int_list(1, MAX_VOCAB, MAX_SWEEP_SIZES), required=True, metavar="N,N,…")
    parser.add_argument("--kind", choices=KINDS, default=SENTENCEPIECE_KIND)
    parser.add_argument("--model-type", choices=MODEL_TYPES, default="bpe")


def _add_encode(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "encode", _encode)
    parser.add_argument("--tokenizer", type=CLI_PATH, required=True, metavar="PATH")
    parser.add_argument("--text", required=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Register the `tokenizer` group and its commands."""
    commands = add_group(subparsers, "tokenizer", "train, extend, merge and inspect tokenizers")
    for add in (_add_train, _add_extend, _add_merge, _add_inspect, _add_sweep, _add_encode):
        add(commands)
