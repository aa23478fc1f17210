"""Confinement rules for names and paths that come from users, configs, manifests or job parameters.

The one name rule and the one inside-the-roots test; everything else that checks a name (a run, a
dataset, a preset, a tokenizer file stem) or a folder boundary calls these.

- A *name* is one path segment: letters, digits, '.', '_', '-', at most `NAME_MAX` characters,
  starting with a letter or digit, no `..`, nothing after it (matched whole: a `$` would let a final
  newline through). A *name path* (`sets/am`) is names joined by '/'. Every value that becomes part of a
  path — names, language codes, shard and device labels, upload names — goes through it, whether it
  arrives as a path option or not.
- A path is *inside* a set of roots when its real location (symlinks followed) is one of them or
  lies below one of them.
- Every path a user or a file names passes `check_path_text` before it is used: a NUL byte, a
  character that is not UTF-8 text (a lone surrogate) or a name longer than a file system takes
  names no file, and is refused in one line instead of failing deep inside the operating system call. `real_path`, `is_inside`,
  `Settings.resolve`, the CLI's path options and the manifest reader all go through it;
  `inside_folder` is the rule for a file that a dataset folder's own metadata names.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

from core.errors import InputError

NAME_MAX = 64
PART_BYTES_MAX = 255  # the longest file name the file systems take (NAME_MAX of Linux, in bytes)
PATH_BYTES_MAX = 4095  # the longest path (PATH_MAX less its NUL)
NAME_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{NAME_MAX - 1}}}")  # whole value: fullmatch, never `$`
NAME_RULE = (f"letters, digits, '.', '_' or '-' (at most {NAME_MAX}, starting with a letter or digit, "
             "no '/' or '..')")


def is_name(value: object) -> bool:
    """Return True when `value` is a string that is one valid name (see the module docstring)."""
    return isinstance(value, str) and bool(NAME_PATTERN.fullmatch(value)) and ".." not in value


def check_name(value: object, what: str) -> str:
    """Return `value` when it is a valid name: one path segment of letters, digits, '.', '_', '-'.

    Raises InputError naming `what` and the value otherwise (separators, `..`, empty, too long).
    """
    if not is_name(value):
        text = "" if value is None else str(value)
        raise InputError(f"{what} {text!r}: not a name. Use one path segment of {NAME_RULE}.")
    return str(value)


def check_name_path(value: object, what: str) -> str:
    """Return `value` when it is names joined by '/' (a dataset in a sub-folder: `sets/am`).

    Raises InputError naming `what` and the value when any part is not a name.
    """
    text = "" if value is None else str(value)
    if not all(is_name(part) for part in text.split("/")):
        raise InputError(f"{what} {text!r}: not a name. Use {NAME_RULE}; '/' separates sub-folders.")
    return text


def path_problem(value: object) -> str | None:
    """Return why `value` cannot name a file (a NUL byte, not UTF-8 text, a name or path longer than the file
    systems take, not a string), or None when it can."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        return f"not a path but {type(value).__name__}"
    if "\x00" in value:
        return f"holds a NUL byte at character {value.index(chr(0))}"
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"not valid UTF-8 text (character {exc.start} is a lone surrogate)"
    if len(encoded) > PATH_BYTES_MAX:
        return f"{len(encoded)} bytes long; a path holds at most {PATH_BYTES_MAX}"
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > PART_BYTES_MAX:
        return f"a part of it is {longest} bytes long; a file or folder name holds at most {PART_BYTES_MAX}"
    return None


def check_path_text(value: object, what: str) -> str:
    """Return `value` as a string when it can name a file: text without a NUL byte or a lone surrogate.

    Raises InputError naming `what`, the value (escaped) and the fix otherwise.
    """
    problem = path_problem(value)
    if problem is not None:
        raise InputError(f"{what} {_shown(value)}: {problem}; a file name cannot. Fix the value.")
    return os.fspath(value)  # type: ignore[arg-type]


def real_path(path: str | os.PathLike[str]) -> Path:
    """Return the absolute location of `path` with every symlink followed (relative: against the cwd).

    Raises InputError when `path` cannot name a file (`check_path_text`).
    """
    return Path(os.path.abspath(check_path_text(path, "path"))).resolve()


def inside_folder(folder: Path, name: object, what: str) -> Path:
    """Return the real location of `name` (relative: against `folder`) when it lies inside `folder`.

    The rule for a file that a folder's own metadata names (an HF `state.json`'s arrow files, a
    `dataset_dict.json`'s splits): symlinks are followed, an absolute path or `../` that leaves the folder
    is refused. Raises InputError naming `what`, the value and the fix.
    """
    text = check_path_text(name, what)
    location = real_path(Path(folder) / text)
    if not is_inside(location, [folder]):
        raise InputError(f"{what} {text!r}: leads outside the folder {real_path(folder)} (to {location}). "
                         "A dataset folder's metadata may only name files inside it; fix or replace the metadata.")
    return location


def _shown(value: object) -> str:
    return ascii(os.fspath(value) if isinstance(value, os.PathLike) else value)


def shown(value: object, limit: int = 200) -> str:
    """Return `value` for a one-line message: as it is when it is printable text, else escaped (`ascii`), cut at `limit`."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        text = text[:limit] + "…"
    return text if text and text.isprintable() and _encodable(text) else ascii(text)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_inside(path: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]]) -> bool:
    """Return True when the real location of `path` is one of `roots` or lies below one of them.

    Symlinks are followed on both sides; a relative `path` resolves against the current directory
    (callers that mean another base make it absolute first).
    """
    resolved = real_path(path)
    for root in roots:
        base = real_path(root)
        if resolved == base or base in resolved.parents:
            return True
    return False
