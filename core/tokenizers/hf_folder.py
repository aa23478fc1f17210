"""Hugging Face tokenizer folders: what `AutoTokenizer.from_pretrained(folder)` loads, read and written.

Chatterbox-Turbo's release ships GPT-2's tokenizer as a folder (`vocab.json`, `merges.txt`,
`added_tokens.json`, `tokenizer_config.json`, no `tokenizer.json`); its `from_local` loads it with
`AutoTokenizer`. `folder_tokenizer_json` returns the folder's own `tokenizer.json`, else the one
transformers builds from GPT-2's files, so the rest of LinguaForge reads a folder like any
tokenizer file. `write_tokenizer_folder` writes a merged tokenizer as a folder that
`AutoTokenizer` loads with the new length: `tokenizer.json` plus a `tokenizer_config.json` naming
the special tokens the published loaders use (GPT-2's `<|endoftext|>` as bos/eos/unk).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.confine import shown
from core.errors import InputError
from core.fsutil import atomic_write_json, atomic_write_text
from core.structured import loads_json, read_bounded, read_json_file

TOKENIZER_JSON = "tokenizer.json"
CONFIG_JSON = "tokenizer_config.json"
SLOW_FILES = ("vocab.json", "merges.txt")
ADDED_JSON = "added_tokens.json"
#: the special tokens `tokenizer_config.json` names, with the pieces looked for in each role
SPECIAL_ROLES = {"bos_token": ("<|endoftext|>", "<s>", "[START]"), "eos_token": ("<|endoftext|>", "</s>", "[STOP]"),
                 "unk_token": ("<|endoftext|>", "<unk>", "[UNK]"), "pad_token": ("<pad>", "[PAD]")}


def is_tokenizer_folder(path: Path) -> bool:
    """Return True when `path` is a folder holding `tokenizer.json` or GPT-2's `vocab.json` + `merges.txt`."""
    return path.is_dir() and ((path / TOKENIZER_JSON).is_file() or all((path / n).is_file() for n in SLOW_FILES))


def _stamp(folder: Path) -> tuple[tuple[str, int, int], ...]:
    return tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir()) if p.is_file())


def _id_map(path: Path) -> dict[str, int]:
    """Return the token → id mapping of a GPT-2 `vocab.json` or `added_tokens.json` (bounded reader); raise
    InputError naming the file when it is not a mapping of text to whole ids."""
    from core.tokenizers.tokenizer import MAX_TOKENIZER_BYTES

    data = read_json_file(path, max_bytes=MAX_TOKENIZER_BYTES)
    if not isinstance(data, dict) or not all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in data.items()):
        raise InputError(f"{path}: must be a JSON object mapping each token to its id (a whole number from 0), as "
                         "published; fix or re-copy it.")
    return data


def _check_slow_files(folder: Path) -> None:
    """Refuse, in one line naming the file and line, a GPT-2 folder AutoTokenizer would fail on deep inside:
    a vocab.json or added_tokens.json that is not token → id, ids beyond the vocabulary's own count, a
    merges.txt line that is not two tokens, a tokenizer_config.json that is not an object."""
    from core.tokenizers.tokenizer import MAX_TOKENIZER_BYTES

    ids = set(_id_map(folder / "vocab.json").values())
    if (folder / ADDED_JSON).is_file():
        ids |= set(_id_map(folder / ADDED_JSON).values())
    if ids and max(ids) >= len(ids):
        raise InputError(f"{folder}: id {max(ids):,} lies beyond the vocabulary's own {len(ids):,} entries (vocab.json "
                         f"and {ADDED_JSON} together); the folder is damaged or forged. Re-copy it.")
    merges = folder / "merges.txt"
    try:
        lines = read_bounded(merges, max_bytes=MAX_TOKENIZER_BYTES).decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise InputError(f"{merges}: not UTF-8 text (byte {exc.start}); re-copy it.") from None
    for number, line in enumerate(lines, start=1):
        if line.strip() and not (number == 1 and line.startswith("#version")) and len(line.split()) != 2:
            raise InputError(f"{merges} line {number}: {shown(line)} is not a merge (two tokens separated by a "
                             "space); fix or re-copy the file.")
    config = folder / CONFIG_JSON
    if config.is_file() and not isinstance(read_json_file(config), dict):
        raise InputError(f"{config}: must be a JSON object; fix or re-copy it.")


@lru_cache(maxsize=8)
def _converted(folder: str, stamp: tuple[tuple[str, int, int], ...]) -> str:
    from transformers import AutoTokenizer

    _check_slow_files(Path(folder))
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as exc:  # transformers and tokenizers raise plain Exception subclasses too
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(f"{folder}: AutoTokenizer cannot load this folder ({shown(reason)}); "
                         "it must hold tokenizer.json or vocab.json + merges.txt (+ added_tokens.json) as published.") from exc
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise InputError(f"{folder}: AutoTokenizer loads it as a Python-only tokenizer ({type(tokenizer).__name__}); "
                         "LinguaForge reads HF tokenizers with a tokenizer.json.")
    return backend.to_str()


def folder_tokenizer_json(folder: str | os.PathLike[str]) -> str:
    """Return the `tokenizer.json` text of the tokenizer `AutoTokenizer.from_pretrained(folder)` loads: the
    folder's tokenizer.json as it is, else the one transformers builds from vocab.json + merges.txt
    (+ added_tokens.json), converted once per folder state. Raises InputError when the folder holds no
    loadable HF tokenizer."""
    folder = Path(folder)
    if not is_tokenizer_folder(folder):
        raise InputError(f"{folder}: not a tokenizer folder; it must hold tokenizer.json or vocab.json + merges.txt.")
    if (folder / TOKENIZER_JSON).is_file():
        from core.tokenizers.tokenizer import MAX_TOKENIZER_BYTES

        data = read_bounded(folder / TOKENIZER_JSON, max_bytes=MAX_TOKENIZER_BYTES)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{folder / TOKENIZER_JSON}: not UTF-8 text (byte {exc.start}); re-copy it.") from None
    return _converted(str(folder.resolve()), _stamp(folder))


def _special_tokens(spec: dict[str, Any]) -> dict[str, str]:
    present = set(spec["model"]["vocab"]) | {t["content"] for t in spec.get("added_tokens") or []}
    found = {}
    for role, names in SPECIAL_ROLES.items():
        name = next((n for n in names if n in present), None)
        if name is not None:
            found[role] = name
    if "pad_token" not in found and "eos_token" in found:
        found["pad_token"] = found["eos_token"]  # what ChatterboxTurboTTS.from_local sets when the folder names none
    return found


def write_tokenizer_folder(tokenizer_json: str, folder: str | os.PathLike[str]) -> Path:
    """Write the tokenizer.json text `tokenizer_json` (kept byte for byte, so its fingerprint stays) as an
    `AutoTokenizer` folder (tokenizer.json, tokenizer_config.json) into `folder`; return the folder.
    Byte-level tokenizers keep `add_prefix_space` from their pre-tokenizer."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    spec = loads_json(tokenizer_json, f"{folder}: tokenizer")
    atomic_write_text(folder / TOKENIZER_JSON, tokenizer_json)
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", **_special_tokens(spec)}
    byte_level = byte_level_node(spec)
    if byte_level is not None:
        config["add_prefix_space"] = bool(byte_level.get("add_prefix_space"))
    atomic_write_json(folder / CONFIG_JSON, config)
    return folder


def byte_level_node(spec: dict[str, Any]) -> dict[str, Any] | None:
    """Return the ByteLevel pre-tokenizer of a tokenizer.json mapping (alone or inside a Sequence), or None:
    a tokenizer that pre-tokenises to bytes, as GPT-2 does."""

    def find(node: dict[str, Any] | None) -> dict[str, Any] | None:
        if not node:
            return None
        if node.get("type") == "ByteLevel":
            return node
        return next((found for inner in node.get("pretokenizers") or [] if (found := find(inner))), None)

    return find(spec.get("pre_tokenizer"))
