"""Confinement rules for names and paths that come from users, configs, manifests or job parameters.

- A *name* (a run, a dataset) is one path segment: no separators, no `..`, nothing hidden.
- A path is *inside* a set of roots when its real location (symlinks followed) lies in one of them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_name(value: object, what: str) -> str:
    """Return `value` when it is a valid name: one path segment of letters, digits, '.', '_', '-'.

    Raises InputError naming `what` and the value otherwise (separators, `..`, empty, too long).
    """
    from core.errors import InputError

    text = str(value) if value is not None else ""
    if not NAME_PATTERN.match(text) or ".." in text:
        raise InputError(
            f"{what} {text!r}: not a name. Use one path segment of letters, digits, '.', '_' or '-' "
            "(at most 128, starting with a letter or digit, no '/' or '..')."
        )
    return text


def real_path(path: str | os.PathLike[str]) -> Path:
    """Return the absolute location of `path` with every symlink followed."""
    return Path(os.path.abspath(os.fspath(path))).resolve()


def is_inside(path: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]]) -> bool:
    """Return True when the real location of `path` is one of `roots` or lies below one of them."""
    resolved = real_path(path)
    for root in roots:
        base = real_path(root)
        if resolved == base or base in resolved.parents:
            return True
    return False
