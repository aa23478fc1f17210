"""The path rule: where a relative path resolves depends on where it was written.

- Typed on the command line: against the current directory, as every CLI user expects. Every CLI
  path option takes `CLI_PATH` (or another `PathType`) as its argparse `type`, so command
  handlers receive absolute paths.
- Inside run configs, job parameters and dashboard fields: against the workspace
  (`Settings.resolve`).
- Jobs receive absolute paths: `absolute_path_params` turns the relative path parameters of a
  job into absolute workspace paths before it is queued, so a job's command never depends on the
  folder it runs in.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from core.confine import check_path_text
from core.errors import InputError


@dataclass(frozen=True)
class PathType:
    """An argparse `type` for a path option: returns the value as an absolute Path (cwd-relative).

    `keywords` are words that are not paths (`auto`, `espeak`) and pass unchanged, as do values starting with
    one of `prefixes` (a Hub id, `hf:owner/name`); with `suffixes`, only values ending in one of them are paths
    (a preset name passes unchanged).
    """

    keywords: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()

    def is_path(self, value: str) -> bool:
        """Return True when `value` names a file or folder (not a keyword, not a bare name)."""
        if value in self.keywords or not value or value.startswith(self.prefixes):
            return False
        return not self.suffixes or value.endswith(self.suffixes)

    def absolute(self, value: str, base: Path) -> Path | str:
        """Return `value` as an absolute path against `base` (`~` expanded), or unchanged when not a path.

        Raises InputError when `value` cannot name a file (a NUL byte, not UTF-8 text: `check_path_text`).
        """
        if not self.is_path(value):
            return value
        path = Path(os.path.expanduser(check_path_text(value, "path")))
        return (path if path.is_absolute() else Path(base) / path).resolve()

    def __call__(self, value: str) -> Path | str:
        """Return `value` resolved against the current directory (what argparse calls); raises
        argparse.ArgumentTypeError when it is empty or cannot name a file."""
        if not value.strip():
            raise argparse.ArgumentTypeError("an empty path; give a file or folder")
        try:
            return self.absolute(value, Path.cwd())
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None


CLI_PATH = PathType()


def path_options(actions: Iterable[argparse.Action]) -> dict[str, PathType]:
    """Return, of a parser's `actions`, the destination names whose type is a PathType, with that type."""
    return {a.dest: a.type for a in actions if isinstance(a.type, PathType)}


def absolute_path_params(actions: Iterable[argparse.Action], params: dict[str, Any], workspace: Path) -> dict[str, Any]:
    """Return a copy of job `params` whose path parameters are absolute, relative ones resolved against `workspace`.

    Only parameters of path options (a PathType in `actions`) change; a list changes item by item;
    keywords and values that are not strings pass unchanged.
    """
    types = path_options(actions)
    result = dict(params)
    for name, kind in types.items():
        if name not in result:
            continue
        value = result[name]
        if isinstance(value, (list, tuple)):
            result[name] = [_absolute(kind, item, workspace) for item in value]
        else:
            result[name] = _absolute(kind, value, workspace)
    return result


def _absolute(kind: PathType, value: Any, workspace: Path) -> Any:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return str(kind.absolute(value, workspace)) if isinstance(value, str) else value
