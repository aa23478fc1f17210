"""The one reader of structured text (JSON, JSON lines, YAML) from files a user, a dataset, a cache or a
model folder brings: bounded, so that no such file can crash a reader or hold it for long.

Every JSON or YAML text goes through `loads_json` / `loads_yaml` (a file: `read_json_file`,
`read_yaml_file`), which refuse in one line naming the file and the limit:

- a file larger than its reader takes (`MAX_FILE_BYTES`, or the reader's own bound: a tokenizer's);
- nesting deeper than `MAX_DEPTH` (a line of 100,000 `[` made every reader die of a RecursionError);
- a YAML document whose aliases expand to more than `MAX_NODES` values (a "billion laughs" file);
- bytes that are not UTF-8; and, read from a file, text that is not JSON / YAML at all (the text readers
  are drop-ins for `json.loads` / `yaml.safe_load`: a syntax error stays theirs, for the caller to word).

The error, `StructureError`, is an InputError (one line, exit 2 at the edges) and a ValueError: the
tolerant readers, which skip a damaged line or file, skip it as they skip any unreadable one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from core.errors import InputError

MiB = 1024 * 1024
MAX_DEPTH = 100  # nesting of arrays and objects (no file LinguaForge reads nests beyond ~10)
MAX_FILE_BYTES = 256 * MiB  # a JSON or YAML file a reader takes whole
MAX_NODES = 100_000  # values a YAML document may expand to through its aliases
_MARK_BYTES = b'"\\[]{}'  # the bytes that open or close a string or a level
LIMITS = (f"at most {MAX_DEPTH} levels of nesting, {MAX_FILE_BYTES // MiB} MiB, {MAX_NODES:,} values through "
          "YAML aliases")


class StructureError(InputError, ValueError):
    """A JSON or YAML text that is malformed or beyond the reader's limits: one line naming it and the limit."""


def nesting_depth(data: bytes) -> int:
    """Return how deep the arrays and objects of a JSON (or YAML flow) text nest, brackets inside
    double-quoted strings not counted; found without parsing (vectorised over the quotes, backslashes and
    brackets), so any depth is measured safely and fast."""
    import numpy as np  # here, not at import: the CLI's parser loads this module and must stay light

    is_mark = np.zeros(256, dtype=bool)
    is_mark[list(_MARK_BYTES)] = True
    text = np.frombuffer(data, dtype=np.uint8)
    where = np.flatnonzero(is_mark[text])
    marks = text[where]
    backslash = marks == ord("\\")
    adjacent = np.zeros(marks.size, dtype=bool)
    adjacent[1:] = np.diff(where) == 1
    count = np.cumsum(backslash, dtype=np.int64)
    base = np.where(~backslash, count, np.where(adjacent, 0, count - 1))
    run = count - np.maximum.accumulate(base)  # backslashes in a row ending at each mark
    quote = marks == ord('"')
    quote[1:] &= ~(backslash[:-1] & adjacent[1:] & (run[:-1] % 2 == 1))  # after an odd run: escaped
    outside = np.cumsum(quote, dtype=np.int64) % 2 == 0  # an even number of quotes so far: not in a string
    steps = (np.isin(marks, (ord("["), ord("{"))).astype(np.int64) - np.isin(marks, (ord("]"), ord("}")))) * outside
    return int(np.cumsum(steps).max(initial=0))


def _as_bytes(text: str | bytes, what: str) -> bytes:
    if isinstance(text, bytes):
        return text
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StructureError(f"{what}: not UTF-8 text (character {exc.start}). Save it as UTF-8.") from None


def _check_depth(data: bytes, what: str) -> None:
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:  # cannot nest deeper: no need to measure
        return
    depth = nesting_depth(data)
    if depth > MAX_DEPTH:
        raise StructureError(f"{what}: nested {depth:,} levels deep; a file LinguaForge reads may nest at most "
                             f"{MAX_DEPTH}. Fix or replace the file.")


def loads_json(text: str | bytes, what: str) -> Any:
    """Return the value of the JSON `text` (`what` names it in errors: a file, `file line N`): `json.loads`
    with its bounds, a drop-in for it (its JSONDecodeError, a ValueError, is left to the caller's wording).

    Raises StructureError for nesting beyond MAX_DEPTH and for bytes that are not UTF-8.
    """
    data = _as_bytes(text, what)
    _check_depth(data, what)
    try:
        return json.loads(data.decode("utf-8") if isinstance(text, bytes) else text)
    except UnicodeDecodeError as exc:
        raise StructureError(f"{what}: not UTF-8 text (byte {exc.start}). Save it as UTF-8.") from None
    except RecursionError:  # a depth the bracket count cannot see: never a traceback
        raise StructureError(f"{what}: nested too deep to read ({LIMITS}). Fix or replace the file.") from None


def loads_yaml(text: str | bytes, what: str) -> Any:
    """Return the value of the YAML `text`: `yaml.safe_load` with its bounds, a drop-in for it (its YAMLError
    is left to the caller's wording). Raises StructureError for nesting beyond MAX_DEPTH (flow or block),
    aliases expanding beyond MAX_NODES values and bytes that are not UTF-8."""
    data = _as_bytes(text, what)
    _check_depth(data, what)
    try:
        value = yaml.safe_load(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise StructureError(f"{what}: not UTF-8 text (byte {exc.start}). Save it as UTF-8.") from None
    except RecursionError:
        raise StructureError(f"{what}: nested too deep to read ({LIMITS}). Fix or replace the file.") from None
    _check_tree(value, what)
    return value


def _check_tree(value: Any, what: str) -> None:
    """Walk `value` without recursion; raise StructureError beyond MAX_DEPTH levels or MAX_NODES values."""
    stack, seen = [(value, 1)], 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise StructureError(f"{what}: expands to more than {MAX_NODES:,} values (aliases repeating aliases). "
                                 "Fix or replace the file.")
        if depth > MAX_DEPTH:
            raise StructureError(f"{what}: nested more than {MAX_DEPTH} levels deep; a file LinguaForge reads may "
                                 f"nest at most {MAX_DEPTH}. Fix or replace the file.")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children)


def read_bounded(path: str | os.PathLike[str], what: str | None = None, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """Return the bytes of `path` when it holds at most `max_bytes`; raise StructureError (naming `what`, else
    the path, and the bound) before reading a larger one. OSError passes through (the edges word it)."""
    path = Path(path)
    size = path.stat().st_size
    if size > max_bytes:
        raise StructureError(f"{what or path}: {size:,} bytes, over the {max_bytes:,} a file of its kind may hold. "
                             "Fix or replace the file.")
    return path.read_bytes()


def read_json_file(path: str | os.PathLike[str], what: str | None = None, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """Return the JSON value of the file `path` (see `loads_json`, `read_bounded`); text that is not JSON is a
    StructureError too."""
    what = what or str(path)
    try:
        return loads_json(read_bounded(path, what, max_bytes), what)
    except json.JSONDecodeError as exc:
        raise StructureError(f"{what}: not valid JSON ({exc}). Fix the syntax.") from None


def read_yaml_file(path: str | os.PathLike[str], what: str | None = None, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """Return the YAML value of the file `path` (see `loads_yaml`, `read_bounded`); text that is not YAML is a
    StructureError too, naming the line."""
    what = what or str(path)
    try:
        return loads_yaml(read_bounded(path, what, max_bytes), what)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise StructureError(f"{what}{where}: not valid YAML ({' '.join(str(exc).split())}). Fix the syntax.") from None
