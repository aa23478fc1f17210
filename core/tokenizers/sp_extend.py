"""Extending a SentencePiece model with a new language (the IndexTTS "12k -> 24k" step, done right).

`extend_sentencepiece` edits the base ModelProto: every base piece keeps its id, text, type and
score; new pieces are appended as NORMAL, de-duplicated, with scores below the base minimum.
Every character of the new corpus is forced in (so it encodes without `<unk>`), candidate pieces
come from a model of the base's type trained on the corpus, and with a protect corpus a
verify-and-prune loop removes the candidates that change how the base encodes those lines.
"""

from __future__ import annotations

import copy
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.fsutil import atomic_write_json
from core.progress import Progress
from core.tokenizers.scripts import AUTO, resolve_scripts, script_characters
from core.tokenizers.sp_proto import NORMAL, parse_model_proto
from core.tokenizers.tokenizer import SENTENCEPIECE, SentencePieceTokenizer, load_tokenizer
from core.tokenizers.protect import DEFAULT_LANGUAGE, DEFAULT_LEXICON_SIZE, heldout_lines, protection
from core.tokenizers.report import (
    corpus_statistics, encode_many, heldout_drift, lines_containing, lines_without_unk, measure_drift,
)
from core.tokenizers.romanize import base_is_uppercase
from core.tokenizers.train import (
    SENTENCEPIECE_KIND, SentencePieceOptions, check_output_suffix, train_sentencepiece_bytes, write_sentencepiece,
)

WORD_BOUNDARY = "▁"
_BUILTIN_NORMALIZERS = ("nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity")
_MODEL_TYPES = {1: "unigram", 2: "bpe"}
_COPIED_TRAINER_FIELDS = (
    "split_by_unicode_script",
    "split_by_number",
    "split_by_whitespace",
    "split_digits",
    "treat_whitespace_as_suffix",
    "max_sentencepiece_length",
    "allow_whitespace_only_pieces",
)
_COPIED_NORMALIZER_FIELDS = ("add_dummy_prefix", "remove_extra_whitespaces")
# Rounds of verify-and-prune that may refill from the remaining candidates before pruning only.
_REFILL_ROUNDS = 12
_TRAIN_ATTEMPTS = 4


@dataclass
class Candidate:
    """A piece that may be appended, with its score already shifted below the base minimum."""

    piece: str
    score: float


def _load_base(base_path: Path) -> tuple[SentencePieceTokenizer, Any]:
    tokenizer = load_tokenizer(base_path)
    if tokenizer.kind != SENTENCEPIECE or not isinstance(tokenizer, SentencePieceTokenizer):
        raise InputError(
            f"{base_path}: --base is an HF tokenizer JSON, but `tokenizer extend` edits SentencePiece "
            "models. Pass the base .model file, or use `tokenizer merge` for tokenizer.json files."
        )
    return tokenizer, parse_model_proto(base_path.read_bytes(), str(base_path))


def _covered_characters(char_counts: Counter[str], coverage: float) -> list[str]:
    ordered = sorted(char_counts, key=lambda c: (-char_counts[c], c))
    if coverage >= 1.0:
        return ordered
    total = sum(char_counts.values())
    kept, running = [], 0
    for char in ordered:
        if running >= coverage * total:
            break
        kept.append(char)
        running += char_counts[char]
    return kept


def _temp_options(proto: Any, coverage: float) -> SentencePieceOptions:
    spec, norm = proto.trainer_spec, proto.normalizer_spec
    extra = {name: getattr(spec, name) for name in _COPIED_TRAINER_FIELDS}
    extra.update({name: getattr(norm, name) for name in _COPIED_NORMALIZER_FIELDS})
    rule = norm.name if norm.name in _BUILTIN_NORMALIZERS else "identity"
    return SentencePieceOptions(
        model_type=_MODEL_TYPES.get(spec.model_type, "bpe"),
        character_coverage=coverage,
        normalization_rule_name=rule,
        extra=extra,
    )


def _train_candidates(
    lines: Sequence[str], proto: Any, coverage: float, exclude: set[str], needed: int, alphabet: int
) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """Return (multi-character candidates best first, all temp piece scores) from models trained on `lines`."""
    options = _temp_options(proto, coverage)
    vocab_size = needed + alphabet + 3 + needed // 4 + 32
    for _ in range(_TRAIN_ATTEMPTS):
        temp = parse_model_proto(train_sentencepiece_bytes(lines, vocab_size, options, hard_limit=False))
        scores = {p.piece: p.score for p in temp.pieces if p.type == NORMAL}
        found = [(piece, score) for piece, score in scores.items() if len(piece) > 1 and piece not in exclude]
        found.sort(key=lambda item: -item[1])
        exhausted = len(temp.pieces) < vocab_size
        if len(found) >= needed or exhausted:
            return found, scores
        vocab_size += int((needed - len(found)) * 1.5) + 32
    return found, scores


def _scored_candidates(
    forced: list[str], found: list[tuple[str, float]], temp_scores: dict[str, float], base_min: float
) -> tuple[list[Candidate], list[Candidate]]:
    top = max([s for _, s in found] + [temp_scores[c] for c in forced if c in temp_scores] + [0.0])
    shift = base_min - 1.0 - top
    multi = [Candidate(piece, score + shift) for piece, score in found]
    floor = min([c.score for c in multi] + [temp_scores.get(c, top) + shift for c in forced] + [base_min - 1.0])
    chars = [Candidate(c, temp_scores[c] + shift if c in temp_scores else floor - 1.0) for c in forced]
    return chars, multi


def build_extended_proto(base_proto: Any, additions: Sequence[Candidate]) -> Any:
    """Return a copy of `base_proto` with `additions` appended as NORMAL pieces.

    Base pieces keep their ids, text, type and score; the trainer's vocab_size is updated.
    """
    proto = copy.deepcopy(base_proto)
    for candidate in additions:
        piece = proto.pieces.add()
        piece.piece = candidate.piece
        piece.score = candidate.score
        piece.type = NORMAL
    proto.trainer_spec.vocab_size = len(proto.pieces)
    return proto


def _as_tokenizer(proto: Any, path: Path) -> SentencePieceTokenizer:
    return SentencePieceTokenizer(path, proto.SerializeToString())


def _drift_culprits(
    changed: list[tuple[str, list[int]]], model: SentencePieceTokenizer, base: SentencePieceTokenizer,
    base_size: int, selected: set[str],
) -> set[str]:
    culprits: set[str] = set()
    for line, new_ids in changed:
        used = {model.piece(i) for i in new_ids if i >= base_size} & selected
        if not used:
            normalized = base.processor.normalize(line)
            used = {piece for piece in selected if piece in normalized}
        culprits |= used
    return culprits


def _protect_loop(
    base_proto: Any, base: SentencePieceTokenizer, chars: list[Candidate], multi: list[Candidate],
    needed: int, protect: list[str], output: Path, progress: Progress,
) -> tuple[list[Candidate], int, int]:
    """Return (multi-character pieces kept, pieces pruned, rounds) so `protect` encodes as with the base."""
    base_size = len(base_proto.pieces)
    selected = multi[:needed]
    next_index = len(selected)
    pruned: set[str] = set()
    additions = [c.piece for c in chars + multi]
    protect = lines_containing(protect, additions, [base.processor.normalize(line) for line in protect])
    base_ids = encode_many(base, protect)
    rounds = 0
    while True:
        rounds += 1
        model = _as_tokenizer(build_extended_proto(base_proto, chars + selected), output)
        changed = [
            (line, new_ids)
            for line, old_ids, new_ids in zip(protect, base_ids, encode_many(model, protect))
            if old_ids != new_ids
        ]
        progress.update(0, drifting_lines=len(changed), pruned=len(pruned), kept=len(selected))
        if not changed:
            return selected, len(pruned), rounds
        culprits = _drift_culprits(changed, model, base, base_size, {c.piece for c in selected})
        if not culprits:
            raise InputError(
                f"the protect corpus still drifts in {len(changed)} line(s) with no added piece to blame "
                f"(first: {changed[0][0][:80]!r}). Remove those lines from --protect-corpus."
            )
        pruned |= culprits
        selected = [c for c in selected if c.piece not in culprits]
        if rounds <= _REFILL_ROUNDS:
            while len(selected) < needed and next_index < len(multi):
                candidate = multi[next_index]
                next_index += 1
                if candidate.piece not in pruned:
                    selected.append(candidate)


def check_target_size(base_path: str | os.PathLike[str], corpus_lines: Sequence[str], target_size: int,
                      character_coverage: float = 1.0, add_script: str | None = AUTO) -> None:
    """Raise InputError, as `extend_sentencepiece` would before any training, when `target_size` is not above the
    base's size or cannot hold every character of `corpus_lines` the base lacks: a form's check before it queues a job."""
    base, base_proto = _load_base(Path(base_path))
    _target_room(Path(base_path), base, base_proto, corpus_lines, target_size, character_coverage, add_script)


def _target_room(base_path: Path, base: Any, base_proto: Any, corpus_lines: Sequence[str], target_size: int,
                 character_coverage: float, add_script: str | None
                 ) -> tuple[list[str], dict[str, int], list[str], Counter[str]]:
    """Return the characters an extension must add (corpus and script letters the base lacks), the letters added per
    script, the normalised corpus and its character counts; raise InputError when `target_size` has no room."""
    base_size = len(base_proto.pieces)
    if target_size <= base_size:
        raise InputError(
            f"--target-size {target_size} is not above the base size {base_size} of {base_path}. "
            f"Pass a target larger than {base_size} (for example {base_size * 2})."
        )
    base_pieces = {p.piece for p in base_proto.pieces}
    normalized = [base.processor.normalize(line) for line in corpus_lines]
    char_counts = Counter(c for line in normalized for c in line)
    forced = [c for c in _covered_characters(char_counts, character_coverage) if c not in base_pieces]
    scripts_added: dict[str, int] = {}
    for script in resolve_scripts(add_script, normalized):
        taken = base_pieces | set(forced)
        extra = [c for c in script_characters(script)
                 if c not in taken and base.processor.normalize(c).lstrip(WORD_BOUNDARY) == c]
        forced += extra
        scripts_added[script] = len(extra)
    needed = target_size - base_size - len(forced)
    if needed < 0:
        raise InputError(
            f"--target-size {target_size} cannot hold the {len(forced)} characters of the corpus that "
            f"{base_path} lacks{' (with every letter of ' + ', '.join(scripts_added) + ')' if scripts_added else ''}. "
            f"Pass --target-size {base_size + len(forced)} or more."
        )
    return forced, scripts_added, normalized, char_counts


def extend_sentencepiece(
    base_path: str | os.PathLike[str],
    corpus_lines: Sequence[str],
    target_size: int,
    output: str | os.PathLike[str],
    protect_lines: Sequence[str] | None = None,
    character_coverage: float = 1.0,
    add_script: str | None = AUTO,
    protect_language: str | None = DEFAULT_LANGUAGE,
    lexicon_size: int = DEFAULT_LEXICON_SIZE,
    heldout: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Extend the SentencePiece model at `base_path` to `target_size` pieces for `corpus_lines`.

    Writes OUTPUT (.model), the matching .vocab and a .report.json, all atomically, and returns
    the report: base_size, new_size, target_size, reached_target, pieces_added,
    characters_forced (count and list), candidates_available, candidates_pruned, corpus
    statistics (unk_rate, added_pieces_used, …) and base_drift (None when nothing is protected or
    held out): the protected lines — every one of `protect_lines` plus the built-in lexicon of
    `protect_language` (`core.tokenizers.protect`, cased like the base) — encode exactly as with
    the base (lines the base itself encodes with unk are skipped and counted), and `heldout` is the
    drift on lines that were not protected: `heldout`, else the lexicon's held-out slice.
    `add_script` (`auto`: the corpus's dominant script; `none`; `ethiopic`) forces in every
    assigned character of that script too (`scripts_added`: characters each added).
    Raises InputError for an output not named .model, a base that is not a SentencePiece model, a
    target not above the base size, a target too small to hold every new character, or a
    `protect_language` without a built-in word list — all before any training.
    """
    base_path, output = Path(base_path), Path(output)
    check_output_suffix(output, SENTENCEPIECE_KIND)
    base, base_proto = _load_base(base_path)
    uppercase = base_is_uppercase(base)
    wanted, protection_summary = protection(protect_lines, protect_language, uppercase, lexicon_size)
    unseen, unseen_source = heldout_lines(heldout, protect_language, uppercase, wanted, lexicon_size)
    base_size = len(base_proto.pieces)
    forced, scripts_added, normalized, char_counts = _target_room(
        base_path, base, base_proto, corpus_lines, target_size, character_coverage, add_script)
    base_pieces = {p.piece for p in base_proto.pieces}
    base_min = min(p.score for p in base_proto.pieces)
    needed = target_size - base_size - len(forced)
    progress = Progress("tokenizer extend", total=3, interval=0.0)
    found, temp_scores = _train_candidates(
        corpus_lines, base_proto, character_coverage, base_pieces | set(forced), needed, len(char_counts)
    )
    progress.update(1, candidates=len(found))
    chars, multi = _scored_candidates(forced, found, temp_scores, base_min)
    protect = lines_without_unk(base, wanted)
    drift: dict[str, Any] | None = None
    pruned_count = 0
    rounds = 0
    if wanted:
        selected, pruned_count, rounds = _protect_loop(
            base_proto, base, chars, multi, needed, protect, output, progress
        )
    else:
        selected = multi[:needed]
    if wanted or unseen:
        drift = {
            "lines_checked": len(protect),
            "lines_skipped_unk": len(wanted) - len(protect),
            "rounds": rounds,
            "protected": protection_summary,
        }
    progress.update(1)
    proto = build_extended_proto(base_proto, chars + selected)
    model_bytes = proto.SerializeToString()
    extended = SentencePieceTokenizer(output, model_bytes)
    stats = corpus_statistics(extended, corpus_lines, base_size)
    if drift is not None:
        drift["lines_changed"] = measure_drift(base, extended, protect).lines_changed
        drift["heldout"] = heldout_drift(base, extended, unseen, unseen_source)
    model_path, vocab_path = write_sentencepiece(model_bytes, output)
    progress.update(1)
    new_size = len(proto.pieces)
    report = {
        "base": str(base_path),
        "output": str(model_path),
        "vocab_path": str(vocab_path),
        "base_size": base_size,
        "new_size": new_size,
        "target_size": target_size,
        "reached_target": new_size == target_size,
        "pieces_added": new_size - base_size,
        "characters_forced": len(chars),
        "forced_characters": "".join(c.piece for c in chars),
        "scripts_added": scripts_added,
        "candidates_available": len(found),
        "candidates_pruned": pruned_count,
        "unk_rate": stats["unk_rate"],
        "added_pieces_used": stats["added_pieces_used"],
        "corpus": stats,
        "base_drift": drift,
        "base_score_min": base_min,
        "new_score_max": max((c.score for c in chars + selected), default=None),
    }
    report_path = model_path.with_suffix(".report.json")
    atomic_write_json(report_path, report)
    report["report_path"] = str(report_path)
    return report
