"""Measuring a tokenizer on a corpus: unk rate, compression, vocabulary use, and drift from a base.

These numbers back `tokenizer inspect`, the reports of `extend` and `merge`, and the sweep.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.errors import InputError
from core.tokenizers.tokenizer import HFTokenizer, SentencePieceTokenizer, Tokenizer, load_tokenizer

UNKNOWN_CHARACTERS_LISTED = 50


def encode_many(tokenizer: Tokenizer, lines: Sequence[str]) -> list[list[int]]:
    """Return the ids of every line, using the tokenizer's batch encoder when it has one."""
    if not lines:
        return []
    if isinstance(tokenizer, SentencePieceTokenizer):
        return [list(ids) for ids in tokenizer.processor.encode(list(lines), num_threads=os.cpu_count() or 1)]
    if isinstance(tokenizer, HFTokenizer):
        return [list(e.ids) for e in tokenizer.raw.encode_batch(list(lines), add_special_tokens=False)]
    return [tokenizer.encode(line) for line in lines]


def unknown_characters(tokenizer: Tokenizer, lines: Sequence[str]) -> list[dict[str, Any]]:
    """Return the characters of `lines` that encode to the unk id, most frequent first.

    Each entry is `{"char", "codepoint", "count"}`; at most UNKNOWN_CHARACTERS_LISTED entries.
    """
    if tokenizer.unk_id is None:
        return []
    counts = Counter(c for line in lines for c in line if not c.isspace())
    chars = sorted(counts)
    unknown = [c for c, ids in zip(chars, encode_many(tokenizer, chars)) if tokenizer.unk_id in ids]
    unknown.sort(key=lambda c: (-counts[c], c))
    return [
        {"char": c, "codepoint": f"U+{ord(c):04X}", "count": counts[c]}
        for c in unknown[:UNKNOWN_CHARACTERS_LISTED]
    ]


def corpus_statistics(tokenizer: Tokenizer, lines: Sequence[str], base_size: int | None = None) -> dict[str, Any]:
    """Return how `tokenizer` encodes `lines`.

    Keys: lines, tokens, characters, bytes, unk_tokens, unk_rate, unknown_characters,
    chars_per_token, bytes_per_token, ids_used, unused_share (share of the vocabulary never
    used), and with `base_size`: tokens_at_or_above_base, share_at_or_above_base,
    added_pieces, added_pieces_used.
    """
    encoded = encode_many(tokenizer, lines)
    tokens = sum(len(ids) for ids in encoded)
    characters = sum(len(line) for line in lines)
    data_bytes = sum(len(line.encode("utf-8")) for line in lines)
    counts: Counter[int] = Counter(i for ids in encoded for i in ids)
    unk = counts.get(tokenizer.unk_id, 0) if tokenizer.unk_id is not None else 0
    stats: dict[str, Any] = {
        "lines": len(lines),
        "tokens": tokens,
        "characters": characters,
        "bytes": data_bytes,
        "unk_tokens": unk,
        "unk_rate": unk / tokens if tokens else 0.0,
        "unknown_characters": unknown_characters(tokenizer, lines) if unk else [],
        "chars_per_token": characters / tokens if tokens else 0.0,
        "bytes_per_token": data_bytes / tokens if tokens else 0.0,
        "ids_used": len(counts),
        "unused_share": 1.0 - len(counts) / tokenizer.size,
    }
    if base_size is not None:
        above = sum(n for i, n in counts.items() if i >= base_size)
        stats["tokens_at_or_above_base"] = above
        stats["share_at_or_above_base"] = above / tokens if tokens else 0.0
        stats["added_pieces"] = max(0, tokenizer.size - base_size)
        stats["added_pieces_used"] = sum(1 for i in counts if i >= base_size)
    return stats


def lines_containing(lines: Sequence[str], pieces: Sequence[str], forms: Sequence[str] | None = None) -> list[str]:
    """Return the lines whose text (`forms[i]`, e.g. the normalised line, else the line) contains one of `pieces`.

    A tokenizer extension can only change how a line encodes if some added piece occurs in it,
    so protect loops verify just these lines.
    """
    wanted = sorted({p for p in pieces if p})
    if not wanted:
        return []
    pattern = re.compile("|".join(map(re.escape, wanted)))  # one scan of each text for every piece at once
    texts = forms if forms is not None else lines
    return [line for line, text in zip(lines, texts) if pattern.search(text)]


def lines_without_unk(tokenizer: Tokenizer, lines: Sequence[str]) -> list[str]:
    """Return the lines `tokenizer` encodes without its unk id (all lines when it has none)."""
    if tokenizer.unk_id is None:
        return list(lines)
    return [line for line, ids in zip(lines, encode_many(tokenizer, lines)) if tokenizer.unk_id not in ids]


@dataclass
class Drift:
    """How many reference lines encode differently with a new tokenizer than with its base."""

    lines_checked: int
    lines_changed: int
    changed: list[tuple[str, list[int], list[int]]] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Return the share of checked lines whose encoding changed."""
        return self.lines_changed / self.lines_checked if self.lines_checked else 0.0

    def as_dict(self, examples: int = 3) -> dict[str, Any]:
        """Return the drift as a JSON-ready mapping with up to `examples` changed lines."""
        return {
            "lines_checked": self.lines_checked,
            "lines_changed": self.lines_changed,
            "rate": self.rate,
            "examples": [line for line, _, _ in self.changed[:examples]],
        }


def measure_drift(base: Tokenizer, new: Tokenizer, lines: Sequence[str]) -> Drift:
    """Return the Drift of `new` against `base` on `lines` (each line compared id for id)."""
    changed = [
        (line, old_ids, new_ids)
        for line, old_ids, new_ids in zip(lines, encode_many(base, lines), encode_many(new, lines))
        if old_ids != new_ids
    ]
    return Drift(len(lines), len(changed), changed)


def heldout_drift(base: Tokenizer, new: Tokenizer, lines: Sequence[str], source: str | None = None) -> dict[str, Any] | None:
    """Return the drift on held-out base-language lines the base encodes without unk, with `source`
    (where the lines come from) and `lines_skipped_unk`; None when no line is usable."""
    usable = lines_without_unk(base, list(lines))
    if not usable:
        return None
    return {**measure_drift(base, new, usable).as_dict(), "source": source, "lines_skipped_unk": len(lines) - len(usable)}


def inspect_tokenizer(
    path: str | os.PathLike[str], lines: Sequence[str] | None = None, base_size: int | None = None
) -> dict[str, Any]:
    """Return the description of the tokenizer at `path`, with corpus statistics when `lines` is given.

    Raises InputError when the file is not a tokenizer or `base_size` lies outside its ids.
    """
    tokenizer = load_tokenizer(path)
    report: dict[str, Any] = {
        "path": str(path),
        "kind": tokenizer.kind,
        "size": tokenizer.size,
        "fingerprint": tokenizer.fingerprint,
        "special_ids": tokenizer.special_ids(),
    }
    if base_size is not None:
        if not 0 <= base_size <= tokenizer.size:
            raise InputError(
                f"--base-size {base_size}: outside this tokenizer's 0…{tokenizer.size} ids. "
                f"Give the base tokenizer's size (at most {tokenizer.size})."
            )
        report["base_size"] = base_size
    if lines is not None:
        report["corpus"] = corpus_statistics(tokenizer, lines, base_size)
    return report
