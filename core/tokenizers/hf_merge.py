"""Merging a new language into an HF `tokenizers` BPE tokenizer (the Chatterbox "2454 + 81" step, Turbo's GPT-2).

`merge_hf_tokenizer` keeps every base id, merge, normalizer and pre-tokenizer and every added
token (tags, `<|endoftext|>`) at its id: the base's added tokens are pinned in the model vocabulary
at their ids, because `tokenizers` gives an added token that is not in the model vocabulary the
id after the vocabulary's last entry, and appending vocabulary entries would move it. New
entries get ids above every existing id; a new merge is appended only when both parts and their
join are in the vocabulary; the language tag becomes an added special token. A byte-level BPE
(GPT-2's `ByteLevel` pre-tokenizer) learns its merges over the base's byte alphabet, and the
script characters it adds are the byte sequences of each character with the merges that build
them. With a protect corpus, new entries that change how the base encodes those lines — plain
and with each of the base's added tokens — are pruned until none do. A base given as a folder
(`AutoTokenizer`'s, such as Turbo's) is also written as such a folder of the new length.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.fsutil import atomic_write_json, atomic_write_text
from core.structured import loads_json
from core.progress import Progress
from core.tokenizers.hf_folder import byte_level_node, is_tokenizer_folder, write_tokenizer_folder
from core.tokenizers.scripts import AUTO, resolve_scripts, script_characters
from core.tokenizers.tokenizer import HF, HFTokenizer, load_tokenizer
from core.tokenizers.protect import DEFAULT_LANGUAGE, DEFAULT_LEXICON_SIZE, heldout_lines, protection
from core.tokenizers.report import (
    corpus_statistics, encode_many, heldout_drift, lines_containing, lines_without_unk, measure_drift,
)
from core.tokenizers.romanize import base_is_uppercase
from core.tokenizers.train import HF_BPE_KIND, VocabularyTooLarge, check_output_suffix, hf_vocab_size, train_hf_bpe_json

_AFFIXES = ("continuing_subword_prefix", "end_of_word_suffix")
# A language tag as Chatterbox reads it from a tokenizer: `[xx]`, 2 or 3 lower-case letters.
_LANGUAGE_TAG = re.compile(r"([a-z]{2,3})|\[([a-z]{2,3})\]")


@dataclass
class Additions:
    """What the new tokenizer offers: vocabulary entries (best first) and merges (rank order)."""

    tokens: list[str]
    merges: list[tuple[str, str]]


def _load_hf(path: Path, option: str) -> tuple[HFTokenizer, dict[str, Any]]:
    tokenizer = load_tokenizer(path)
    if tokenizer.kind != HF or not isinstance(tokenizer, HFTokenizer):
        raise InputError(
            f"{path}: {option} is a SentencePiece model, but `tokenizer merge` works on HF tokenizer.json "
            "files. Pass a tokenizer.json, or use `tokenizer extend` for .model files."
        )
    spec = loads_json(path.read_text(encoding="utf-8") if path.is_file() else tokenizer.raw.to_str(), str(path))
    if spec["model"].get("type") != "BPE":
        raise InputError(
            f"{path}: {option} holds a {spec['model'].get('type')} model; merge supports BPE tokenizers only."
        )
    return tokenizer, spec


def _merge_pairs(spec: dict[str, Any]) -> list[tuple[str, str]]:
    pairs = []
    for merge in spec["model"].get("merges") or []:
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        pairs.append((a, b))
    return pairs


def _taken(spec: dict[str, Any]) -> set[str]:
    return set(spec["model"]["vocab"]) | {t["content"] for t in spec.get("added_tokens") or []}


def _additions(base: dict[str, Any], new: dict[str, Any]) -> Additions:
    for key in _AFFIXES:
        if (base["model"].get(key) or None) != (new["model"].get(key) or None):
            raise InputError(
                f"the new tokenizer's {key} ({new['model'].get(key)!r}) differs from the base's "
                f"({base['model'].get(key)!r}); its tokens cannot be merged. Train it with the base's settings."
            )
    skip = _taken(base) | {t["content"] for t in new.get("added_tokens") or []}
    ordered = sorted(new["model"]["vocab"].items(), key=lambda item: item[1])
    tokens = [token for token, _ in ordered if token not in skip]
    return Additions(tokens, _merge_pairs(new))


def _join(spec: dict[str, Any], a: str, b: str) -> str:
    prefix = spec["model"].get("continuing_subword_prefix") or ""
    return a + (b[len(prefix):] if prefix and b.startswith(prefix) else b)


def _bare(spec: dict[str, Any], token: str) -> str:
    """Return `token` without the model's continuing-subword prefix and end-of-word suffix (its text in a line)."""
    prefix = spec["model"].get("continuing_subword_prefix") or ""
    suffix = spec["model"].get("end_of_word_suffix") or ""
    if prefix and token.startswith(prefix):
        token = token[len(prefix):]
    if suffix and token.endswith(suffix):
        token = token[: -len(suffix)]
    return token


def language_tag_code(tag: str) -> str:
    """Return the language code of a `--language-tag` value (`am` or `[am]` → `am`).

    Raises InputError for anything but 2 or 3 lower-case letters, the form Chatterbox reads as a tag.
    """
    match = _LANGUAGE_TAG.fullmatch(tag)
    if match is None:
        raise InputError(
            f"--language-tag {tag!r}: give a language code of 2 or 3 lower-case letters, such as am "
            "(it becomes the special token [am], the form Chatterbox reads); leave the option out for no tag."
        )
    return match.group(1) or match.group(2)


def _tag_content(tag: str) -> str:
    return f"[{language_tag_code(tag)}]"


def _tag_entry(base: dict[str, Any], content: str, token_id: int) -> dict[str, Any]:
    specials = [t for t in base.get("added_tokens") or [] if t.get("special")]
    entry = dict(specials[-1]) if specials else {
        "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True,
    }
    entry.update({"id": token_id, "content": content, "special": True})
    return entry


def build_merged_spec(
    base: dict[str, Any], tokens: Sequence[str], merges: Sequence[tuple[str, str]], language_tag: str | None
) -> tuple[dict[str, Any], int, int | None]:
    """Return (merged tokenizer.json mapping, merges appended, language tag id or None).

    Base ids, merges, normalizer and pre-tokenizer are kept, and every added token stays at its id
    (pinned in the model vocabulary); `tokens` get ids from one past the highest existing id; a
    merge is appended when both parts and their join are present.
    """
    spec = copy.deepcopy(base)
    vocab: dict[str, int] = spec["model"]["vocab"]
    for added in spec.get("added_tokens") or []:
        vocab.setdefault(added["content"], added["id"])
    next_id = hf_vocab_size(base)
    for token in tokens:
        vocab[token] = next_id
        next_id += 1
    existing = set(_merge_pairs(base))
    as_strings = any(isinstance(m, str) for m in base["model"].get("merges") or [])
    appended = 0
    for a, b in merges:
        if (a, b) in existing or a not in vocab or b not in vocab or _join(spec, a, b) not in vocab:
            continue
        existing.add((a, b))
        spec["model"]["merges"].append(f"{a} {b}" if as_strings else [a, b])
        appended += 1
    tag_id = None
    if language_tag:
        content = _tag_content(language_tag)
        added = spec.setdefault("added_tokens", [])
        present = next((t["id"] for t in added if t["content"] == content), vocab.get(content))
        if present is not None:
            tag_id = present
        else:
            tag_id = next_id
            added.append(_tag_entry(base, content, tag_id))
            vocab[content] = tag_id
    return spec, appended, tag_id


def _as_tokenizer(spec: dict[str, Any], path: Path) -> HFTokenizer:
    return HFTokenizer(path, json.dumps(spec, ensure_ascii=False).encode("utf-8"))


def reachable_additions(base: dict[str, Any], additions: Additions) -> Additions:
    """Return the additions without merges that cannot apply and multi-character tokens no merge builds.

    Single characters are always kept (they are what makes the new text encode without unk).
    """
    tokens, merges = additions.tokens, additions.merges
    base_vocab = base["model"]["vocab"]
    while True:
        vocab = set(base_vocab) | set(tokens)
        usable = [(a, b) for a, b in merges if a in vocab and b in vocab and _join(base, a, b) in vocab]
        built = {_join(base, a, b) for a, b in usable}
        kept = [t for t in tokens if len(t) == 1 or t in built]
        if len(kept) == len(tokens) and len(usable) == len(merges):
            return Additions(kept, usable)
        tokens, merges = kept, usable


def _byte_form(text: str) -> str:
    """Return `text` in the byte alphabet of a byte-level BPE (GPT-2's: each UTF-8 byte one character)."""
    from tokenizers.pre_tokenizers import ByteLevel

    return "".join(piece for piece, _ in ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(text))


def surface_forms(spec: dict[str, Any], base: HFTokenizer, lines: Sequence[str]) -> list[str]:
    """Return each line as the base's BPE sees its text: normalised, and for a byte-level tokenizer in its
    byte alphabet (where its vocabulary entries and merges live)."""
    normalizer = base.raw.normalizer
    forms = [normalizer.normalize_str(line) for line in lines] if normalizer is not None else list(lines)
    return [_byte_form(form) for form in forms] if byte_level_node(spec) is not None else forms


def added_token_contents(spec: dict[str, Any]) -> list[str]:
    """Return the contents of a tokenizer.json mapping's added tokens (tags, special tokens), in id order."""
    return [t["content"] for t in sorted(spec.get("added_tokens") or [], key=lambda t: t["id"])]


def with_added_tokens(lines: Sequence[str], added: Sequence[str]) -> list[str]:
    """Return each line again between two of the base's added tokens (`[laugh] line [sigh]`, the tokens taken
    in turn so every one occurs), then each added token alone: the drift check's lines for the added tokens."""
    if not added:
        return []
    count = len(added)
    return [f"{added[i % count]} {line} {added[(i + 1) % count]}" for i, line in enumerate(lines)] + list(added)


def _protect_loop(
    base_spec: dict[str, Any], base: HFTokenizer, additions: Additions, language_tag: str | None,
    protect: list[str], output: Path, progress: Progress,
) -> tuple[Additions, int, int]:
    """Return (additions kept, merges pruned, rounds) so every `protect` line encodes as with the base.

    Only appended merges can change how base text encodes, so the loop prunes merges whose join
    appears in a changed encoding (or, failing that, occurs in the changed line), then drops the
    tokens no remaining merge builds.
    """
    current = reachable_additions(base_spec, additions)
    texts = [_bare(base_spec, t) for t in current.tokens + [_join(base_spec, a, b) for a, b in current.merges]]
    forms = surface_forms(base_spec, base, protect)
    kept = set(lines_containing(protect, texts + ([_tag_content(language_tag)] if language_tag else []), forms))
    protect, forms = [line for line in protect if line in kept], [form for line, form in zip(protect, forms) if line in kept]
    base_ids = encode_many(base, protect)
    pruned = 0
    rounds = 0
    while True:
        rounds += 1
        spec, _, _ = build_merged_spec(base_spec, current.tokens, current.merges, language_tag)
        merged = _as_tokenizer(spec, output)
        changed = [
            (form, old, ids) for form, old, ids in zip(forms, base_ids, encode_many(merged, protect)) if old != ids
        ]
        progress.update(0, drifting_lines=len(changed), pruned=pruned)
        if not changed:
            return current, pruned, rounds
        joins = {_join(base_spec, a, b): (a, b) for a, b in current.merges}
        culprits: set[tuple[str, str]] = set()
        for form, old, ids in changed:
            appeared = {merged.piece(i) for i in ids} - {merged.piece(i) for i in old}
            found = {joins[t] for t in appeared if t in joins}
            culprits |= found or {pair for join, pair in joins.items() if join in form}
        if not culprits:
            raise InputError(
                f"the protect corpus still drifts in {len(changed)} line(s) with no added merge to blame "
                f"(first: {changed[0][0][:80]!r}). Remove those lines from --protect-corpus."
            )
        pruned += len(culprits)
        current = reachable_additions(
            base_spec, Additions(current.tokens, [m for m in current.merges if m not in culprits])
        )


def _character_entries(spec: dict[str, Any], char: str, taken: set[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Return (vocabulary entries, merges) that make `char` one token: the character itself, or for a byte-level
    BPE its byte sequence with the merges that join the bytes left to right (entries already `taken` skipped)."""
    if byte_level_node(spec) is None:
        return ([char] if char not in taken else []), []
    form = _byte_form(char)
    if form in taken or len(form) < 2:
        return [], []
    tokens = [form[:k] for k in range(2, len(form) + 1) if form[:k] not in taken]
    return tokens, [(form[: k - 1], form[k - 1]) for k in range(2, len(form) + 1)]


def _single_characters(spec: dict[str, Any], tokens: Sequence[str]) -> int:
    """Return how many of `tokens` stand for exactly one character (for a byte-level BPE: whose bytes decode to one)."""
    if byte_level_node(spec) is None:
        return sum(1 for t in tokens if len(t) == 1)
    from tokenizers.decoders import ByteLevel

    decoder = ByteLevel()
    return sum(1 for t in tokens if len(text := decoder.decode([t])) == 1 and text != "\ufffd")


def _tokens_per_character(base: HFTokenizer, merged: HFTokenizer, lines: Sequence[str]) -> dict[str, float]:
    """Return the tokens per character of `lines` with the base and with the merged tokenizer."""
    characters = sum(len(line) for line in lines) or 1
    return {name: round(sum(len(ids) for ids in encode_many(tok, lines)) / characters, 4)
            for name, tok in (("base", base), ("merged", merged))}


def _with_scripts(
    base_spec: dict[str, Any], additions: Additions, choice: str | None, lines: Sequence[str]
) -> tuple[Additions, dict[str, int]]:
    """Return the additions with every missing character of the chosen scripts appended (for a byte-level BPE,
    its byte sequence and the merges that build it), and the number of characters added per script."""
    added: dict[str, int] = {}
    tokens, merges = list(additions.tokens), list(additions.merges)
    taken = _taken(base_spec) | set(tokens)
    for script in resolve_scripts(choice, lines):
        count = 0
        for char in script_characters(script):
            extra, joins = _character_entries(base_spec, char, taken)
            if extra or joins:
                tokens += extra
                merges += joins
                taken.update(extra)
                count += 1
        added[script] = count
    return Additions(tokens, merges), added


def _new_spec(
    base_spec: dict[str, Any], add_path: Path | None, corpus_lines: Sequence[str] | None, vocab_size: int | None
) -> dict[str, Any]:
    if (add_path is None) == (corpus_lines is None):
        raise InputError("pass either --add NEW.json or --corpus FILE… with --vocab-size N, not both and not neither.")
    if add_path is not None:
        return _load_hf(add_path, "--add")[1]
    if not vocab_size or vocab_size < 2:
        raise InputError(f"--vocab-size {vocab_size} is missing or too small; with --corpus pass --vocab-size N (N >= 2).")
    unk = base_spec["model"].get("unk_token") or "[UNK]"
    new = train_hf_bpe_json(corpus_lines, vocab_size, special_tokens=(unk,), template=base_spec)
    if hf_vocab_size(new) < vocab_size:
        size = hf_vocab_size(new)
        raise VocabularyTooLarge(
            f"--vocab-size {vocab_size} is larger than this corpus supports; the maximum is {size}. "
            f"Use --vocab-size {size} or less, or add more text.",
            vocab_size,
            size,
        )
    return new


def merge_hf_tokenizer(
    base_path: str | os.PathLike[str],
    output: str | os.PathLike[str],
    add_path: str | os.PathLike[str] | None = None,
    corpus_lines: Sequence[str] | None = None,
    vocab_size: int | None = None,
    language_tag: str | None = None,
    protect_lines: Sequence[str] | None = None,
    add_script: str | None = AUTO,
    protect_language: str | None = DEFAULT_LANGUAGE,
    lexicon_size: int = DEFAULT_LEXICON_SIZE,
    heldout: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Merge a new-language tokenizer (`add_path`, or one trained on `corpus_lines`) into the base.

    Writes OUTPUT (tokenizer.json) and OUTPUT's .report.json atomically; returns the report:
    base_size, new_size, pieces_added, merges_added, language_tag and its id, characters_forced,
    candidates_available, candidates_pruned, corpus statistics and unk_rate (corpus mode),
    added_pieces_used, base_drift (None when nothing is protected or held out: every line of the
    protect corpus plus the built-in lexicon of `protect_language` encode as with the base;
    `heldout` is the drift on unprotected lines: `heldout`, else the lexicon's held-out slice),
    scripts_added, tokens_per_character (corpus mode: base and merged on the corpus), added_tokens_moved
    (the base's added tokens whose id changed: none) and ids_without_token (none). The drift
    lines include each protected line between two of the base's added tokens (`added_tokens` in
    base_drift). A base given as a tokenizer folder is also written as an `AutoTokenizer` folder
    (`tokenizer_folder`: OUTPUT without its suffix). `add_script`
    (`auto`: the dominant script of the corpus or of the addition's vocabulary; `none`;
    `ethiopic`) adds every assigned character of that script as a vocabulary entry. Raises InputError for a base
    or addition that is not an HF BPE tokenizer, a bad option combination, or a vocabulary
    size the corpus cannot support; an output not named .json, a bad language tag and a
    `protect_language` without a word list are refused before any training.
    """
    base_path, output = Path(base_path), Path(output)
    check_output_suffix(output, HF_BPE_KIND)
    if language_tag is not None:
        language_tag = language_tag_code(language_tag)
    base, base_spec = _load_hf(base_path, "--base")
    uppercase = base_is_uppercase(base)
    wanted, protection_summary = protection(protect_lines, protect_language, uppercase, lexicon_size)
    unseen, unseen_source = heldout_lines(heldout, protect_language, uppercase, wanted, lexicon_size)
    base_size = hf_vocab_size(base_spec)
    new_spec = _new_spec(base_spec, Path(add_path) if add_path else None, corpus_lines, vocab_size)
    additions = _additions(base_spec, new_spec)
    additions, scripts_added = _with_scripts(base_spec, additions, add_script, corpus_lines or additions.tokens)
    progress = Progress("tokenizer merge", total=2, interval=0.0)
    progress.update(1, candidates=len(additions.tokens))
    drift: dict[str, Any] | None = None
    kept = reachable_additions(base_spec, additions)
    pruned = rounds = 0
    protect = lines_without_unk(base, wanted)
    added = added_token_contents(base_spec)
    tagged = with_added_tokens(protect, added)
    if wanted:
        kept, pruned, rounds = _protect_loop(base_spec, base, additions, language_tag, protect + tagged, output, progress)
    if wanted or unseen:
        drift = {"lines_checked": len(protect), "lines_skipped_unk": len(wanted) - len(protect),
                 "rounds": rounds, "protected": protection_summary}
    spec, merges_added, tag_id = build_merged_spec(base_spec, kept.tokens, kept.merges, language_tag)
    merged = _as_tokenizer(spec, output)
    stats = corpus_statistics(merged, corpus_lines, base_size) if corpus_lines else None
    if drift is not None:
        drift["lines_changed"] = measure_drift(base, merged, protect).lines_changed
        drift["added_tokens"] = {"tokens": len(added), "lines_checked": len(tagged),
                                 "lines_changed": measure_drift(base, merged, tagged).lines_changed}
        drift["heldout"] = heldout_drift(base, merged, unseen, unseen_source)
    text = json.dumps(spec, ensure_ascii=False, indent=2) + "\n"
    atomic_write_text(output, text)
    folder = write_tokenizer_folder(text, output.with_suffix("")) if is_tokenizer_folder(base_path) else None
    progress.update(1)
    report = {
        "base": str(base_path),
        "output": str(output),
        "base_size": base_size,
        "new_size": merged.size,
        "pieces_added": len(kept.tokens),
        "merges_added": merges_added,
        "language_tag": _tag_content(language_tag) if language_tag else None,
        "language_tag_id": tag_id,
        "characters_forced": _single_characters(base_spec, kept.tokens),
        "candidates_available": len(additions.tokens),
        "candidates_pruned": len(additions.tokens) - len(kept.tokens),
        "merges_pruned": pruned,
        "unk_rate": stats["unk_rate"] if stats else None,
        "added_pieces_used": stats["added_pieces_used"] if stats else None,
        "corpus": stats,
        "base_drift": drift,
        "scripts_added": scripts_added,
        "tokens_per_character": _tokens_per_character(base, merged, corpus_lines) if corpus_lines else None,
        "added_tokens_moved": [c for c in added if merged.raw.token_to_id(c) != base.raw.token_to_id(c)],
        "ids_without_token": sum(1 for i in range(merged.size) if not merged.piece(i)),
        "tokenizer_folder": str(folder) if folder else None,
    }
    report_path = output.with_suffix(".report.json")
    atomic_write_json(report_path, report)
    report["report_path"] = str(report_path)
    return report
