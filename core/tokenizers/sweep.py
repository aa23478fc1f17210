"""Choosing a vocabulary size: train one tokenizer per size and compare compression and vocabulary use.

Each size is trained on nine tenths of the corpus and its compression measured on the held-out
tenth (all lines when the corpus has fewer than 20); the unused share is measured on the whole
corpus. The recommendation is the largest size that leaves at most `MAX_UNUSED_SHARE` of the
vocabulary unused and still improves compression by at least `MIN_GAIN` over the size before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.progress import Progress
from core.tokenizers.tokenizer import HFTokenizer, SentencePieceTokenizer, Tokenizer
from core.tokenizers.report import corpus_statistics
from core.tokenizers.train import (
    HF_BPE_KIND,
    KINDS,
    SENTENCEPIECE_KIND,
    SentencePieceOptions,
    VocabularyTooLarge,
    hf_vocab_size,
    train_hf_bpe_json,
    train_sentencepiece_bytes,
)

MAX_UNUSED_SHARE = 0.10
MIN_GAIN = 0.02
_HOLDOUT_EVERY = 10
_MIN_LINES_FOR_HOLDOUT = 20


def split_holdout(lines: Sequence[str]) -> tuple[list[str], list[str]]:
    """Return (training lines, held-out lines): every tenth line is held out when there are 20 or more."""
    if len(lines) < _MIN_LINES_FOR_HOLDOUT:
        return list(lines), list(lines)
    held = [line for i, line in enumerate(lines) if i % _HOLDOUT_EVERY == _HOLDOUT_EVERY - 1]
    train = [line for i, line in enumerate(lines) if i % _HOLDOUT_EVERY != _HOLDOUT_EVERY - 1]
    return train, held


def _train_in_memory(lines: Sequence[str], size: int, kind: str, options: SentencePieceOptions) -> Tokenizer:
    label = Path(f"<sweep {kind} {size}>")
    if kind == SENTENCEPIECE_KIND:
        return SentencePieceTokenizer(label, train_sentencepiece_bytes(lines, size, options))
    spec = train_hf_bpe_json(lines, size)
    if hf_vocab_size(spec) < size:
        maximum = hf_vocab_size(spec)
        raise VocabularyTooLarge(f"the corpus supports at most {maximum}", size, maximum)
    return HFTokenizer(label, json.dumps(spec).encode("utf-8"))


def recommend(rows: Sequence[dict[str, Any]]) -> tuple[int | None, str]:
    """Return (recommended size or None, the reason) for sweep rows sorted by size."""
    trained = [r for r in rows if r.get("error") is None]
    if not trained:
        return None, "no size could be trained on this corpus; add more text or try smaller sizes."
    fitting = [r for r in trained if r["unused_share"] <= MAX_UNUSED_SHARE]
    if not fitting:
        smallest = trained[0]
        return smallest["size"], (
            f"every size leaves more than {MAX_UNUSED_SHARE:.0%} of its vocabulary unused on this corpus "
            f"(smallest: {smallest['unused_share']:.0%} at {smallest['size']}); the corpus is too small for "
            "these sizes, so the smallest is the least wasteful. Collect more text before going larger."
        )
    chosen = fitting[0]
    reason = f"{chosen['size']} is the smallest size with at most {MAX_UNUSED_SHARE:.0%} of the vocabulary unused."
    for row in fitting[1:]:
        gain = row["chars_per_token"] / chosen["chars_per_token"] - 1.0
        if gain < MIN_GAIN:
            reason = (
                f"{chosen['size']}: going to {row['size']} improves compression by only {gain:.1%} "
                f"(less than {MIN_GAIN:.0%}) while adding {row['size'] - chosen['size']} rows to train."
            )
            break
        chosen = row
        reason = (
            f"{chosen['size']} is the largest size that leaves at most {MAX_UNUSED_SHARE:.0%} of its "
            f"vocabulary unused ({chosen['unused_share']:.1%}) and still improves compression by at least "
            f"{MIN_GAIN:.0%} ({chosen['chars_per_token']:.2f} characters per token on held-out text)."
        )
    return chosen["size"], reason


def sweep_vocabulary_sizes(
    lines: Sequence[str], sizes: Sequence[int], kind: str = SENTENCEPIECE_KIND,
    options: SentencePieceOptions | None = None,
) -> dict[str, Any]:
    """Train a tokenizer of `kind` at each size and return the comparison.

    Returns {"kind", "lines_train", "lines_heldout", "rows": [{size, chars_per_token,
    bytes_per_token, unk_rate, unused_share, ids_used, error}], "recommended", "reason"}.
    Raises InputError for an unknown kind or an empty or non-positive size list.
    """
    if kind not in KINDS:
        raise InputError(f"tokenizer kind {kind!r} is not one of {', '.join(KINDS)}.")
    if not sizes or any(s < 8 for s in sizes):
        raise InputError(f"--sizes {','.join(map(str, sizes))}: give one or more sizes, each at least 8.")
    options = options or SentencePieceOptions()
    train, held = split_holdout(lines)
    progress = Progress("tokenizer sweep", total=len(sizes), interval=0.0)
    rows: list[dict[str, Any]] = []
    for size in sorted(set(sizes)):
        try:
            tokenizer = _train_in_memory(train, size, kind, options)
        except VocabularyTooLarge as exc:
            rows.append({"size": size, "error": f"too large: the corpus supports at most {exc.maximum}"})
            progress.update(1)
            continue
        held_stats = corpus_statistics(tokenizer, held)
        all_stats = corpus_statistics(tokenizer, lines)
        rows.append({
            "size": size,
            "chars_per_token": held_stats["chars_per_token"],
            "bytes_per_token": held_stats["bytes_per_token"],
            "unk_rate": held_stats["unk_rate"],
            "unused_share": all_stats["unused_share"],
            "ids_used": all_stats["ids_used"],
            "error": None,
        })
        progress.update(1, size=size, chars_per_token=round(held_stats["chars_per_token"], 3))
    size, reason = recommend(rows)
    kind_name = kind if kind == HF_BPE_KIND else f"{kind} {options.model_type}"
    return {"kind": kind_name, "lines_train": len(train), "lines_heldout": len(held), "rows": rows,
            "recommended": size, "reason": reason}
