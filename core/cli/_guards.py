"""Checks `python -m core` applies to every command before and around its handler.

- Text arguments must be valid UTF-8 (the shell hands undecodable bytes over as surrogates).
- No command may write over one of its own inputs: an output path (or the sidecar files written
  beside it — `.vocab`, `.report.json` and every side file of `core.fsutil.side_names` such as a streamed
  wav's `<output>.part` —, or the files its `writes` default names: `dataset split --write`'s manifests)
  that is the same file as any other path argument (a hard link or symlink to it included) is refused.
- A command with a `--force` flag never replaces an existing file it would write without it.
- An operating-system error about a user's path (missing, a folder where a file was expected, not
  writable) becomes one line naming the path and the fix, exit 2.
"""

from __future__ import annotations

import argparse
import errno
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from core.errors import InputError
from core.fsutil import nearest_existing, side_names

OUTPUT_DESTS = ("output",)
SIDECAR_SUFFIXES = (".vocab", ".report.json")
WRITES_DEST = "writes"  # set_defaults(writes=f): f(args) -> the files the command writes besides --output
FORCE_DEST = "force"
INTERNAL_DESTS = ("handler", "json", "group", "command", WRITES_DEST)
FOLDER_OUTPUTS = {("dataset", "import"), ("dataset", "filter"), ("dataset", "sample"), ("preprocess", None), ("export", None)}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _values(value: Any) -> Iterator[Any]:
    if isinstance(value, (list, tuple)):
        yield from value
    else:
        yield value


def _check_text(dest: str, value: Any) -> None:
    if not isinstance(value, (str, Path)):
        return
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start:exc.end].encode("utf-8", "surrogateescape")
        raise InputError(
            f"{_flag(dest)}: not valid UTF-8 (byte {bad[:1].hex(' ')} at character {exc.start}). "
            "Pass UTF-8 text (convert it with `iconv -t UTF-8`)."
        ) from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def written_files(args: argparse.Namespace) -> list[Path]:
    """Return the files a command will write: its `--output` (not a folder output's contents) and whatever
    its `writes` default names (not the sidecars written beside `--output`)."""
    files: list[Path] = []
    output = getattr(args, "output", None)
    if isinstance(output, (str, Path)) and str(output).strip():
        files.append(Path(str(output)).expanduser())
    writes = getattr(args, WRITES_DEST, None)
    if callable(writes):
        files += [Path(path) for path in writes(args)]
    return files


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse non-UTF-8 text, an `--output` of the wrong kind (folder/file) or in an unwritable
    folder, outputs that would overwrite one of the command's inputs, and — for a command with
    `--force` — an existing file it would replace without `--force`.

    Raises InputError naming the option and the value.
    """
    items = {k: v for k, v in vars(args).items() if k not in INTERNAL_DESTS and v is not None}
    for dest, value in items.items():
        for item in _values(value):
            _check_text(dest, item)
    _check_output_location(args)
    files = written_files(args)
    output = items.get("output")
    sidecars = ([Path(str(output)).expanduser().with_suffix(suffix) for suffix in SIDECAR_SUFFIXES]
                + side_names(Path(str(output)).expanduser()) if output else [])
    targets = files + sidecars
    for dest, value in items.items():
        if dest in OUTPUT_DESTS:
            continue
        for item in _values(value):
            if not isinstance(item, (str, Path)) or not str(item).strip():
                continue
            source = Path(str(item)).expanduser()
            for target in targets:
                if _same_file(target, source):
                    raise InputError(
                        f"{_target_flag(args, target)} {target}: it would overwrite the input {_flag(dest)} {source}. "
                        f"Choose another output; a command never writes over its own input."
                    )
    if hasattr(args, FORCE_DEST) and not getattr(args, FORCE_DEST):
        for target in files:
            if target.is_file():
                raise InputError(f"{_target_flag(args, target)} {target}: the file exists already. Pass --force to "
                                 "replace it, or choose another output.")


def _target_flag(args: argparse.Namespace, target: Path) -> str:
    output = getattr(args, "output", None)
    return "--output" if output is not None and Path(str(output)).expanduser() == target else "output"


def _check_output_location(args: argparse.Namespace) -> None:
    value = getattr(args, "output", None)
    if not isinstance(value, (str, Path)) or not str(value).strip():
        return
    output = Path(str(value)).expanduser()
    wants_folder = (getattr(args, "group", None), getattr(args, "command", None)) in FOLDER_OUTPUTS
    if output.is_dir() and not wants_folder:
        raise InputError(f"--output {output}: a folder, not a file. Give a file path, e.g. {output / 'name'}.")
    if output.exists() and not output.is_dir() and wants_folder:
        raise InputError(f"--output {output}: a file, not a folder. Give a folder (it is created).")
    if wants_folder:
        _check_folder_writable(output, output)
    else:
        check_output_file(output)


def _check_folder_writable(output: Path, target: Path) -> None:
    """Refuse when no new file can be created where `target` (or the folders leading to it) would go.

    The check creates and removes one empty temporary file: only a real attempt knows a read-only
    mount, an immutable folder or a pseudo file system such as /proc, whatever the permission bits say.
    """
    parent = nearest_existing(target if target.is_dir() else target.absolute().parent)
    if not parent.is_dir():
        raise InputError(f"--output {output}: {parent} is a file, not a folder. Fix the path.")
    try:
        fd, probe = tempfile.mkstemp(prefix=".linguaforge-write-check.", dir=parent)
    except OSError as exc:
        raise InputError(f"--output {output}: the folder {parent} is not writable ({exc.strerror or exc}). "
                         "Choose a writable place.") from None
    os.close(fd)
    os.unlink(probe)


def check_output_file(output: Path, target: Path | None = None) -> None:
    """Refuse, before any work, an `--output` file (or `target`, a file written beside it such as its
    `.vocab`) that could not be written: a folder or a device in its place, an existing file that is
    read-only or immutable, or a folder where no file can be created.

    Raises InputError naming `--output`, the file at fault and the fix.
    """
    target = Path(target or output)
    about = f"--output {output}:" if target == output else f"--output {output}: the file written beside it, {target},"
    if target.is_dir():
        raise InputError(f"{about} is a folder. Move it away or choose another --output.")
    if target.exists() and not target.is_file():
        raise InputError(f"{about} is not a regular file (a device, pipe or socket). Give a file path.")
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(f"{about} exists and is not writable (read-only or immutable). "
                         "Make it writable or choose another --output.")
    _check_folder_writable(output, target)


def os_error_message(exc: OSError) -> str | None:
    """Return a one-line message for an OSError about a user's path, or None when it is not one."""
    name = exc.filename or ""
    if not name:
        return None
    reason = exc.strerror or str(exc)
    fixes = {
        errno.EISDIR: "it is a folder; give a file path",
        errno.ENOTDIR: "a part of the path is a file, not a folder; fix the path",
        errno.ENOENT: "check the path (relative paths start at the current folder or the workspace)",
        errno.EACCES: "make it (or its folder) readable/writable, or choose another path",
        errno.EPERM: "make it (or its folder) readable/writable, or choose another path",
        errno.EROFS: "the file system is read-only; choose a writable path",
        errno.ENOSPC: "free space on that disk or choose another path",
        errno.EEXIST: "remove it or choose another path",
        errno.ENAMETOOLONG: "shorten the path",
        errno.ELOOP: "the path's symlinks loop; fix them or choose another path",
    }
    fix = fixes.get(exc.errno or 0)
    if fix is None:
        return None
    return f"{name}: {reason}; {fix}."
