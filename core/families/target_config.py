"""Foreign trainers' configs: the text vocabulary size they build models with, checked and corrected.

IndexTTS2's `config.yaml` sizes the GPT from `gpt.number_text_tokens` (rows = that + 1); a
Chatterbox T3 config (JSON or YAML, top level or nested) from `text_tokens_dict_size` (rows =
that). Both must equal the tokenizer size, or the foreign trainer builds too few rows and dies
on a CUDA device-side assert. LinguaForge's own trainer never reads these numbers.

This module is the ONE gate for them: `read_target_config` + `target_config_mismatch` decide
whether a config fits a tokenizer, for the doctor's `config.target` (`--target-config`) and
`indextts.config` checks alike, and every corrected copy LinguaForge writes (`--write-config`,
the doctor's IndexTTS2 copy, `export`'s config.yaml) is re-read through the same gate.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from core.errors import InputError, InternalError
from core.families import get_family, rows_for
from core.fsutil import atomic_write_text
from core.structured import loads_json, loads_yaml, read_json_file

# family -> the key holding the text vocabulary size (IndexTTS2's sits under `gpt:`).
VOCAB_KEYS = {"indextts": "number_text_tokens", "chatterbox": "text_tokens_dict_size"}
_JSON_SUFFIXES = (".json",)


@dataclass(frozen=True)
class TargetConfig:
    """A foreign config: its file, family, the dotted key of its vocab size, that size and the parsed data."""

    path: Path
    family: str
    key: str
    vocab: int
    data: Any


def _find_keys(data: Any, name: str, prefix: str = "") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            dotted = f"{prefix}{key}"
            if key == name:
                found.append((dotted, value))
            found.extend(_find_keys(value, name, dotted + "."))
    return found


def _parse(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the target config ({exc.strerror}).") from exc
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text; a trainer config is a YAML or JSON file.") from None
    try:
        return loads_json(text, str(path)) if path.suffix.lower() in _JSON_SUFFIXES else loads_yaml(text, str(path))
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: not valid {'JSON' if path.suffix.lower() in _JSON_SUFFIXES else 'YAML'} ({_where(exc)}); "
                         "fix the file or point at the right one.") from None


def _where(exc: Exception) -> str:
    """Return a one-line account of a parse error: its line and problem where the parser gives them."""
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno}: {exc.msg}"
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"line {mark.line + 1}: {problem}" if mark is not None else problem


def read_target_config(path: str | os.PathLike[str]) -> TargetConfig:
    """Return the foreign config at `path` with the vocab size it declares.

    Raises InputError when the file does not parse, declares no known vocab key
    (`gpt.number_text_tokens`, `text_tokens_dict_size`), declares several, or the value is not
    a positive integer.
    """
    path = Path(path)
    data = _parse(path)
    hits = [(family, key, value) for family, name in VOCAB_KEYS.items() for key, value in _find_keys(data, name)]
    if not hits:
        raise InputError(
            f"{path}: no text vocabulary size found: expected `gpt.number_text_tokens` (IndexTTS2 config.yaml) or "
            "`text_tokens_dict_size` (Chatterbox T3 config)."
        )
    if len(hits) > 1:
        keys = ", ".join(key for _, key, _ in hits)
        raise InputError(f"{path}: declares the text vocabulary size more than once ({keys}); keep one.")
    family, key, value = hits[0]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{path}: `{key}` is {value!r}; it must be a positive integer (the tokenizer size).")
    return TargetConfig(path, family, key, value, data)


def target_config_mismatch(config: TargetConfig, tokenizer_size: int) -> str | None:
    """Return a one-line description of how the config's vocab size disagrees with the tokenizer, or None."""
    if config.vocab == tokenizer_size:
        return None
    rows = rows_for(get_family(config.family), config.vocab)
    return (
        f"{config.path}: `{config.key}` is {config.vocab}, but the tokenizer has {tokenizer_size} ids: the "
        f"{config.family} trainer builds {rows} text rows from it and fails (CUDA device-side assert) on the first "
        f"id at or above {config.vocab}"
        if config.vocab < tokenizer_size else
        f"{config.path}: `{config.key}` is {config.vocab}, but the tokenizer has {tokenizer_size} ids: the "
        f"{config.family} loader expects {rows} text rows and a checkpoint sized for the tokenizer will not load strictly"
    )


def corrected_config_text(config: TargetConfig, tokenizer_size: int) -> str:
    """Return the config's text with its vocab size set to `tokenizer_size`, everything else as written.

    YAML is edited on the one line that holds the key (comments and layout kept); JSON is re-dumped.
    Raises InputError when the YAML line cannot be found unambiguously.
    """
    if config.path.suffix.lower() in _JSON_SUFFIXES:
        data = read_json_file(config.path)
        node = data
        *parents, last = config.key.split(".")
        for part in parents:
            node = node[part]
        node[last] = tokenizer_size
        return json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    text = config.path.read_text(encoding="utf-8")
    name = config.key.split(".")[-1]
    pattern = re.compile(rf"^(\s*{re.escape(name)}\s*:\s*){config.vocab}(\s*(#.*)?)$", re.MULTILINE)
    corrected, count = pattern.subn(rf"\g<1>{tokenizer_size}\g<2>", text)
    if count != 1 or _vocab_in_yaml(corrected, config) != tokenizer_size:
        raise InputError(f"{config.path}: could not find the line `{name}: {config.vocab}` to correct; edit it by hand.")
    return corrected


def _vocab_in_yaml(text: str, config: TargetConfig) -> int | None:
    """Return the value at `config.key` in YAML `text` (None when absent)."""
    node: Any = loads_yaml(text, "the target config")
    for part in config.key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def write_corrected_config(
    source: str | os.PathLike[str], output: str | os.PathLike[str], tokenizer_size: int,
    inputs: tuple[str | os.PathLike[str], ...] = (),
) -> TargetConfig:
    """Write a copy of the foreign config at `source` with its vocab size set to `tokenizer_size` and return it re-read.

    The write is atomic and never replaces `source` or any of `inputs`.
    Raises InputError for an unreadable config or an output that is one of the inputs.
    """
    output = Path(output)
    protected = {Path(p).resolve() for p in (source, *inputs)}
    if output.resolve() in protected:
        raise InputError(f"{output}: --write-config would overwrite an input; choose another path.")
    config = read_target_config(source)
    atomic_write_text(output, corrected_config_text(config, tokenizer_size))
    return read_target_config(output)


def corrected_indextts_config(config: Mapping[str, Any], tokenizer_size: int, bpe_name: str, gpt_name: str) -> dict[str, Any]:
    """Return a copy of an IndexTTS2 config.yaml's data with `gpt.number_text_tokens`, `dataset.bpe_model` and `gpt_checkpoint` set."""
    fixed = copy.deepcopy(dict(config))
    fixed["gpt"]["number_text_tokens"] = int(tokenizer_size)
    fixed.setdefault("dataset", {})["bpe_model"] = bpe_name
    fixed["gpt_checkpoint"] = gpt_name
    return fixed


def write_indextts_config(
    path: str | os.PathLike[str], config: Mapping[str, Any], tokenizer_size: int, bpe_name: str, gpt_name: str
) -> TargetConfig:
    """Write IndexTTS2's config.yaml corrected for a tokenizer (`corrected_indextts_config`) atomically to `path`.

    Returns the written file re-read through the gate. Raises InternalError when it does not pass
    (the corrected number would not be what IndexTTS2 reads).
    """
    data = corrected_indextts_config(config, tokenizer_size, bpe_name, gpt_name)
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    written = read_target_config(path)
    problem = target_config_mismatch(written, tokenizer_size)
    if problem is not None or written.family != "indextts":
        raise InternalError(f"the corrected IndexTTS2 config does not pass the config gate: {problem or written.key}")
    return written
