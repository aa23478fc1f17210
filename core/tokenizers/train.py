"""Training tokenizers from corpus lines: SentencePiece (IndexTTS-compatible ids) and HF BPE.

SentencePiece models get `<s>`=0, `</s>`=1, `<unk>`=2 and no pad, like IndexTTS. A vocabulary
size larger than the corpus supports is an InputError that states the maximum.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.fsutil import atomic_write
from core.tokenizers.sp_proto import NORMAL, parse_model_proto

SENTENCEPIECE_KIND = "sentencepiece"
HF_BPE_KIND = "hf-bpe"
KINDS = (SENTENCEPIECE_KIND, HF_BPE_KIND)
MODEL_TYPES = ("bpe", "unigram")
HF_SPECIAL_TOKENS = ("[UNK]", "[START]", "[STOP]", "[PAD]")
#: the file name ending each kind is written under (`load_tokenizer` reads either by content)
OUTPUT_SUFFIXES = {SENTENCEPIECE_KIND: ".model", HF_BPE_KIND: ".json"}
_KIND_NAMES = {SENTENCEPIECE_KIND: "a SentencePiece model", HF_BPE_KIND: "an HF tokenizer JSON"}
_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
# Pieces longer than this many bytes are skipped by the trainer; long corpus lines are split instead.
_MAX_SENTENCE_BYTES = 4192


@dataclass
class SentencePieceOptions:
    """Trainer options for a SentencePiece model; the defaults match IndexTTS."""

    model_type: str = "bpe"
    character_coverage: float = 1.0
    user_defined_symbols: tuple[str, ...] = ()
    normalization_rule_name: str = "nmt_nfkc"
    extra: dict[str, Any] | None = None


class VocabularyTooLarge(InputError):
    """The corpus cannot support the requested vocabulary size; `maximum` is what it supports."""

    def __init__(self, message: str, requested: int, maximum: int) -> None:
        super().__init__(message)
        self.requested = requested
        self.maximum = maximum


def _sentences(lines: Sequence[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        data = line.encode("utf-8")
        if len(data) <= _MAX_SENTENCE_BYTES:
            out.append(line)
            continue
        out.extend(_split_long(line))
    return out


def _split_long(line: str) -> list[str]:
    parts, current = [], ""
    for word in line.split(" "):
        candidate = f"{current} {word}" if current else word
        if len(candidate.encode("utf-8")) > _MAX_SENTENCE_BYTES // 2 and current:
            parts.append(current)
            candidate = word
        current = candidate
    if current:
        parts.append(current[: _MAX_SENTENCE_BYTES // 4])
    return parts


def train_sentencepiece_bytes(
    lines: Sequence[str], vocab_size: int, options: SentencePieceOptions, hard_limit: bool = True
) -> bytes:
    """Return the serialized ModelProto of a SentencePiece model trained on `lines`.

    With `hard_limit` False the trainer may return fewer pieces than `vocab_size`.
    Raises VocabularyTooLarge (an InputError stating the maximum) when `vocab_size` exceeds what
    the corpus supports, and InputError for other trainer refusals.
    """
    import sentencepiece as spm

    if options.model_type not in MODEL_TYPES:
        raise InputError(f"model type {options.model_type!r} is not one of {', '.join(MODEL_TYPES)}.")
    if not 0.9 <= options.character_coverage <= 1.0:
        raise InputError(f"character coverage {options.character_coverage} must lie between 0.9 and 1.0.")
    writer = io.BytesIO()
    kwargs: dict[str, Any] = dict(
        sentence_iterator=iter(_sentences(lines)),
        model_writer=writer,
        vocab_size=vocab_size,
        model_type=options.model_type,
        character_coverage=options.character_coverage,
        normalization_rule_name=options.normalization_rule_name,
        bos_id=0,
        eos_id=1,
        unk_id=2,
        pad_id=-1,
        hard_vocab_limit=hard_limit,
        num_threads=max(1, os.cpu_count() or 1),
        minloglevel=2,
    )
    if options.user_defined_symbols:
        kwargs["user_defined_symbols"] = list(options.user_defined_symbols)
    kwargs.update(options.extra or {})
    try:
        spm.SentencePieceTrainer.train(**kwargs)
    except RuntimeError as exc:
        match = _TOO_HIGH.search(str(exc))
        if match:
            maximum = int(match.group(2))
            raise VocabularyTooLarge(
                f"vocabulary size {vocab_size} is larger than this corpus supports for a "
                f"{options.model_type} model; the maximum is {maximum}. Use --vocab-size {maximum} "
                "or less, or add more text.",
                vocab_size,
                maximum,
            ) from exc
        raise InputError(f"SentencePiece refused to train: {str(exc).strip().splitlines()[-1]}") from exc
    return writer.getvalue()


def write_sentencepiece(model_bytes: bytes, output: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write `model_bytes` to OUTPUT (.model) and its piece list to the matching .vocab, atomically.

    Returns the (model path, vocab path). Raises InputError when the bytes are not a model.
    """
    output = Path(output)
    proto = parse_model_proto(model_bytes, str(output))
    vocab_path = output.with_suffix(".vocab")
    vocab_text = "".join(f"{p.piece}\t{_format_score(p.score)}\n" for p in proto.pieces)
    with atomic_write(vocab_path) as tmp:
        tmp.write_text(vocab_text, encoding="utf-8")
    with atomic_write(output) as tmp:
        tmp.write_bytes(model_bytes)
    return output, vocab_path


def _format_score(score: float) -> str:
    return str(int(score)) if float(score).is_integer() else f"{score:.6g}"


def train_sentencepiece(
    lines: Sequence[str], vocab_size: int, output: str | os.PathLike[str], options: SentencePieceOptions
) -> dict[str, Any]:
    """Train a SentencePiece model on `lines` and write OUTPUT plus OUTPUT.vocab.

    Returns a summary mapping (kind, path, vocab_path, size, model_type, special ids).
    Raises VocabularyTooLarge or InputError as `train_sentencepiece_bytes` does.
    """
    model_bytes = train_sentencepiece_bytes(lines, vocab_size, options)
    model_path, vocab_path = write_sentencepiece(model_bytes, output)
    proto = parse_model_proto(model_bytes)
    return {
        "kind": SENTENCEPIECE_KIND,
        "path": str(model_path),
        "vocab_path": str(vocab_path),
        "size": len(proto.pieces),
        "model_type": options.model_type,
        "normal_pieces": sum(1 for p in proto.pieces if p.type == NORMAL),
        "special_ids": {"bos": 0, "eos": 1, "unk": 2, "pad": None},
    }


def train_hf_bpe_json(
    lines: Sequence[str],
    vocab_size: int,
    special_tokens: Sequence[str] = HF_SPECIAL_TOKENS,
    template: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Return the tokenizer.json mapping of an HF BPE tokenizer trained on `lines`.

    `template` (another tokenizer.json mapping) supplies the normalizer, pre-tokenizer and BPE
    affix settings so the result splits text the same way; without it, Whitespace
    pre-tokenisation and no normalizer are used. The first special token is the unk token.
    Every corpus character is kept (no alphabet limit). The result may hold fewer than
    `vocab_size` entries when the corpus supports no more; callers check the size.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    model_spec = (template or {}).get("model") or {}
    unk = special_tokens[0]
    affixes = {k: model_spec[k] for k in ("continuing_subword_prefix", "end_of_word_suffix") if model_spec.get(k)}
    tokenizer = Tokenizer(models.BPE(unk_token=unk, **affixes))
    if template is not None:
        shell = json.loads(tokenizer.to_str())
        shell["normalizer"] = template.get("normalizer")
        shell["pre_tokenizer"] = template.get("pre_tokenizer")
        tokenizer = Tokenizer.from_str(json.dumps(shell))
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer_kwargs: dict[str, Any] = dict(
        vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False, min_frequency=1
    )
    trainer_kwargs.update(affixes)
    tokenizer.train_from_iterator(list(lines), trainer=trainers.BpeTrainer(**trainer_kwargs))
    return json.loads(tokenizer.to_str())


def hf_vocab_size(spec: dict[str, Any]) -> int:
    """Return one past the highest id in a tokenizer.json mapping (added tokens included)."""
    ids = list(spec["model"]["vocab"].values()) + [t["id"] for t in spec.get("added_tokens") or []]
    return max(ids) + 1


def train_hf_bpe(lines: Sequence[str], vocab_size: int, output: str | os.PathLike[str]) -> dict[str, Any]:
    """Train an HF BPE tokenizer on `lines` and write it atomically to OUTPUT (tokenizer.json).

    Returns a summary mapping (kind, path, size, special ids). Raises VocabularyTooLarge (with
    the maximum the corpus supports) when fewer than `vocab_size` entries could be learnt, and
    InputError when the corpus's characters and special tokens alone exceed `vocab_size`.
    """
    spec = train_hf_bpe_json(lines, vocab_size)
    size = hf_vocab_size(spec)
    if size < vocab_size:
        raise VocabularyTooLarge(
            f"vocabulary size {vocab_size} is larger than this corpus supports for an HF BPE tokenizer; "
            f"the maximum is {size}. Use --vocab-size {size} or less, or add more text.",
            vocab_size,
            size,
        )
    if size > vocab_size:
        raise InputError(
            f"--vocab-size {vocab_size} is below the {size} entries this corpus needs for an HF BPE tokenizer "
            f"(every character plus the special tokens). Use --vocab-size {size} or more."
        )
    output = Path(output)
    with atomic_write(output) as tmp:
        tmp.write_text(json.dumps(spec, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    vocab = spec["model"]["vocab"]
    return {
        "kind": HF_BPE_KIND,
        "path": str(output),
        "size": size,
        "merges": len(spec["model"]["merges"]),
        "special_ids": {name: vocab.get(token) for name, token in zip(("unk", "bos", "eos", "pad"), HF_SPECIAL_TOKENS)},
    }


def check_output_suffix(output: str | os.PathLike[str], kind: str) -> None:
    """Refuse an output whose name says another format than the `kind` written there (a tokenizer
    JSON under `x.model`, a SentencePiece model under `x.json`).

    Raises InputError naming `--output` and the name to use.
    """
    output = Path(output)
    wanted, suffix = OUTPUT_SUFFIXES[kind], output.suffix.lower()
    if suffix != wanted:
        other = next((k for k, v in OUTPUT_SUFFIXES.items() if v == suffix), None)
        hint = f" ({_KIND_NAMES[other]} ends {suffix})" if other else ""
        raise InputError(
            f"--output {output}: {_KIND_NAMES[kind]} is written here, so its name must end {wanted}{hint}. "
            f"Use --output {output.with_suffix(wanted)}."
        )


def train_tokenizer(
    lines: Sequence[str],
    kind: str,
    vocab_size: int,
    output: str | os.PathLike[str],
    options: SentencePieceOptions | None = None,
) -> dict[str, Any]:
    """Train a tokenizer of `kind` (sentencepiece | hf-bpe) on `lines` and write it to `output`.

    Returns the summary of `train_sentencepiece` or `train_hf_bpe`. Raises InputError for an
    unknown kind, an output not named for the kind (`.model`, `.json`), a vocabulary size below 8,
    or one the corpus cannot support.
    """
    if kind not in KINDS:
        raise InputError(f"tokenizer kind {kind!r} is not one of {', '.join(KINDS)}.")
    check_output_suffix(output, kind)
    if vocab_size < 8:
        raise InputError(f"vocabulary size {vocab_size} is too small; use at least 8.")
    if kind == SENTENCEPIECE_KIND:
        return train_sentencepiece(lines, vocab_size, output, options or SentencePieceOptions())
    return train_hf_bpe(lines, vocab_size, output)
