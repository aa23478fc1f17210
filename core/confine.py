"""Confinement rules for names and paths that come from users, configs, manifests or job parameters.

The one name rule and the one inside-the-roots test; everything else that checks a name (a run, a
dataset, a preset, a tokenizer file stem) or a folder boundary calls these.

- A *name* is one path segment: letters, digits, '.', '_', '-', at most `NAME_MAX` characters,
  starting with a letter or digit, no `..`. A *name path* (`sets/am`) is names joined by '/'.
- A path is *inside* a set of roots when its real location (symlinks followed) is one of them or
  lies below one of them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

from core.errors import InputError

NAME_MAX = 64
NAME_PATTERN = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{NAME_MAX - 1}}}$")
NAME_RULE = (f"letters, digits, '.', '_' or '-' (at most {NAME_MAX}, starting with a letter or digit, "
             "no '/' or '..')")


def is_name(value: object) -> bool:
    """Return True when `value` is a string that is one valid name (see the module docstring)."""
    return isinstance(value, str) and bool(NAME_PATTERN.match(value)) and ".." not in value


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


def real_path(path: str | os.PathLike[str]) -> Path:
    """Return the absolute location of `path` with every symlink followed (relative: against the cwd)."""
    return Path(os.path.abspath(os.fspath(path))).resolve()


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
