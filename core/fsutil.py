"""Crash-safe file writes, tolerant JSON readers, file hashing and hard-link-or-copy.

The one writer of every file LinguaForge writes: a file is always *created new* — under a fresh
temporary name in the destination folder (`atomic_write`, `replace_bytes`), or, for a side file a reader
follows by name such as a streamed wav's `<output>.part`, by `create_new` (O_CREAT|O_EXCL|O_NOFOLLOW after
removing whatever entry held the name) — and renamed into place. An existing file, hard link or symlink
under the final or a side name is therefore replaced as a directory entry, never opened and written
through: a link to a user's file or to a file outside the roots never receives a byte.

`atomic_write(path)` yields a temporary path in the destination folder; on success the file is
flushed, fsynced and renamed onto `path`, so a crash never leaves a half-written file under the
final name. On error the temporary file is removed and `path` is untouched. The readers return
None / skip lines instead of failing on a file another process is still writing.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO, Iterator

from core.structured import loads_json, read_json_file



def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as handle:
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary Path beside `path`; on success fsync it and os.replace it onto `path`.

    The parent folder is created when missing. Any exception inside the block removes the
    temporary file, leaves `path` as it was, and propagates.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = fresh_temp(target)
    except OSError as exc:
        raise _about(exc, target) from exc
    os.close(fd)
    try:
        yield tmp
        _fsync_file(tmp)
        try:
            os.replace(tmp, target)
        except OSError as exc:
            raise _about(exc, target) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


PARTIAL_SUFFIX = ".part"  # a file that grows under `<output>.part` while a reader follows it (a streamed wav)


def side_names(output: Path) -> list[Path]:
    """Return the side files LinguaForge may write beside `output` by a fixed name (not a fresh temporary
    one): `<output>.part`. The output guard refuses an output whose side file is one of its inputs."""
    return [output.with_name(output.name + PARTIAL_SUFFIX)]


def create_new(path: Path) -> BinaryIO:
    """Open `path` as a new, empty file for binary writing and return it.

    Whatever entry holds the name (a stale file, a hard link, a symlink) is removed first, never opened, and
    the file is created with O_CREAT|O_EXCL|O_NOFOLLOW: no byte can reach another file through a link. Raises
    FileExistsError when another process creates the name in between.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        if path.is_dir() and not path.is_symlink():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    return os.fdopen(fd, "wb")


def open_append(path: str | os.PathLike[str], binary: bool = False, buffering: int = -1) -> IO[Any]:
    """Open `path` for appending (created when missing) — a log, a journal, metrics — never through a link:
    a symlink under the name (O_NOFOLLOW) or a file with other hard links is refused with an OSError naming
    the path, so an append never reaches a file elsewhere."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symlink; LinguaForge appends only to its own files, never through a "
                                       "link (remove it)", str(path)) from None
        raise
    if os.fstat(fd).st_nlink > 1:
        os.close(fd)
        raise OSError(errno.EMLINK, "a hard link to another file; LinguaForge appends only to its own files "
                                    "(remove it)", str(path))
    if binary:
        return os.fdopen(fd, "ab", buffering=buffering)
    return os.fdopen(fd, "a", encoding="utf-8", buffering=buffering)


def fresh_temp(target: Path) -> tuple[int, Path]:
    """Create a new temporary file beside `target` (mkstemp: O_EXCL, a name no one else holds); return (fd, path)."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    return fd, Path(name)


def replace_bytes(path: Path, data: bytes) -> None:
    """Write `data` to a fresh temporary sibling and os.replace it onto `path`: never half a file under its
    name, never written through a link, without waiting on the disk (`fsync_path` syncs a batch of such
    files later)."""
    fd, tmp = fresh_temp(Path(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fsync_path(path: Path) -> None:
    """fsync a file or a folder (after `replace_bytes`); one that is gone is skipped."""
    if Path(path).is_dir():
        _fsync_dir(Path(path))
        return
    try:
        _fsync_file(Path(path))
    except FileNotFoundError:
        pass


def _about(exc: OSError, target: Path) -> OSError:
    """Return `exc` re-addressed to `target`: the user named the file, not its temporary sibling."""
    return type(exc)(exc.errno, exc.strerror, str(target))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically and return the Path written."""
    with atomic_write(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write `obj` as indented UTF-8 JSON to `path` atomically and return the Path written."""
    return atomic_write_text(path, json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n")


def nearest_existing(path: str | os.PathLike[str]) -> Path:
    """Return `path` when it exists, else its nearest existing parent (where a new file there would land)."""
    candidate = Path(path).absolute()
    while not candidate.exists() and candidate != candidate.parent:
        candidate = candidate.parent
    return candidate


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Return the sha256 hex digest of the file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json(path: Path) -> dict[str, Any] | None:
    """Return the JSON object in `path`, or None when it is missing, partial or not an object."""
    try:
        data = read_json_file(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def scan_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Return (the JSON objects of a JSON-lines file, why each other non-blank line was skipped as "line N: …").

    A line that is not UTF-8, not JSON (or not yet complete) or not an object is skipped, never an error; a
    missing or unreadable file holds nothing.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return [], []
    rows, skipped = [], []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = loads_json(line.decode("utf-8"), f"line {number}")
        except UnicodeDecodeError:
            skipped.append(f"line {number}: not UTF-8")
            continue
        except ValueError:
            skipped.append(f"line {number}: not JSON")
            continue
        if isinstance(item, dict):
            rows.append(item)
        else:
            skipped.append(f"line {number}: not a JSON object")
    return rows, skipped


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Return the JSON objects of a JSON-lines file, skipping lines that are not UTF-8 or not (yet) complete
    JSON objects (`scan_jsonl` says which)."""
    return scan_jsonl(path)[0]


def last_json_line(path: Path, max_bytes: int = 1 << 20) -> dict[str, Any] | None:
    """Return the last line of `path` that is a JSON object, or None (reads at most the last `max_bytes`)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                data = loads_json(line, "line")
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    return None


def link_or_copy(source: Path, dest: Path) -> Path:
    """Hard-link `source` (a file, or every file of a folder) at `dest`, copying where linking fails; return `dest`.

    An existing `dest` is replaced, unless it is `source` itself. Raises OSError when neither works.
    """
    if dest.exists() and os.path.samefile(source, dest):
        return dest
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    elif dest.exists() or dest.is_symlink():
        dest.unlink()
    if source.is_dir():
        dest.mkdir(parents=True)
        for child in sorted(source.iterdir()):
            link_or_copy(child, dest / child.name)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)
    return dest
