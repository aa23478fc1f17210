"""Uploads into the workspace: files a person hands the dashboard, copied into the folder of their kind
with the configured roots, the names and the size limit enforced.

Each `UploadKind` names its workspace folder, the file suffixes it takes and whether it lands in a
named sub-folder (a dataset's files, a model folder) and may come as a `.zip` (unpacked, its folders
kept). Every file and zip member must have a plain name (no hidden file, no `..`, no absolute path,
no separator in a file name, no control character), every destination must lie inside the workspace after
symlinks are followed, nothing that exists is overwritten, and the upload — a zip by what it unpacks to —
must stay within `ui.upload_limit_mb` of the settings and `MAX_MEMBERS` files. An upload is a transaction:
checked whole before anything is written, extracted in one pass into a fresh temporary folder, then linked
into place; a refused or failed upload leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterable, Sequence

from core.config import Settings
from core.confine import check_name, is_inside, path_problem, shown
from core.errors import InputError

DEFAULT_LIMIT_MB = 200
MB = 1024 * 1024
AUDIO = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a")
TABLES = (".csv", ".tsv", ".txt", ".json", ".jsonl", ".srt", ".parquet")
MODEL_FILES = (".safetensors", ".pt", ".pth", ".bin", ".json", ".yaml", ".yml", ".model", ".txt")
ZIP = ".zip"
MAX_MEMBERS = 10_000  # files one upload may bring (the members of its zips together)
SEGMENT = re.compile(r"[\w][\w .()+,=@-]{0,254}")  # matched whole (fullmatch)


@dataclass(frozen=True)
class UploadKind:
    """Uploads of one kind: their workspace `folder`, the `suffixes` taken, whether they go into a named
    sub-folder (`named`) and whether a `.zip` of them is unpacked (`unzip`); `what` says what they are."""

    what: str
    folder: str
    suffixes: tuple[str, ...]
    named: bool = False
    unzip: bool = False


DATASET = UploadKind("dataset files (clips and their table, or a zip of them)", "uploads", AUDIO + TABLES, named=True,
                     unzip=True)
CORPUS = UploadKind("text corpus (plain text, one sentence per line)", "corpora", (".txt",))
VOICE = UploadKind("reference voice clip", "voices", AUDIO)
MODEL = UploadKind("published model folder (its files, or a zip of them)", "models", MODEL_FILES, named=True, unzip=True)


def upload_limit_bytes(settings: Settings) -> int:
    """Return the most bytes one upload may bring (`ui.upload_limit_mb`, default DEFAULT_LIMIT_MB)."""
    value = settings.get("ui.upload_limit_mb", DEFAULT_LIMIT_MB)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InputError(f"ui.upload_limit_mb {value!r} in the settings: give the largest upload in MB, a number above 0.")
    return int(value * MB)


def _megabytes(size: int) -> str:
    return f"{size / MB:.1f} MB"


def check_member(name: str, what: str) -> PurePosixPath:
    """Return the relative path an uploaded file or zip member `name` is written to; raise InputError for an
    absolute path, `..`, a hidden file or a name with characters a file name should not have."""
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or not path.parts or any(not SEGMENT.fullmatch(part) for part in path.parts):
        raise InputError(f"{what} {name!r}: not a plain file name (no '..', no leading '/' or '.', letters, digits, "
                         "spaces and . _ - only). Rename it and upload again.")
    return path


def _destination(settings: Settings, kind: UploadKind, name: str | None) -> Path:
    if kind.named:
        folder = settings.workspace / kind.folder / check_name(name, f"Name for the {kind.what}")
    else:
        folder = settings.workspace / kind.folder
    resolved = folder.resolve()
    if not is_inside(resolved, [settings.workspace]):
        raise InputError(f"{folder} leads outside the workspace ({resolved}); uploads are written only inside "
                         f"{settings.workspace}. Remove that link.")
    return resolved


@dataclass(frozen=True)
class Planned:
    """One file of an upload: where it goes (`target`, relative to the destination), the `source` file it comes
    from, the zip `member` inside it (None: the file itself) and its size in bytes."""

    target: PurePosixPath
    source: Path
    member: zipfile.ZipInfo | None
    size: int


def _zip_members(source: Path) -> list[Planned]:
    """Return the planned files of one zip, read from its central directory once. Raises InputError for an
    unreadable zip, more than MAX_MEMBERS members, an encrypted member or a member name `check_member` refuses."""
    try:
        with zipfile.ZipFile(source) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        raise InputError(f"{source.name}: not a readable zip file. Zip the files again or upload them one by one.") from None
    if len(infos) > MAX_MEMBERS:
        raise InputError(f"{source.name}: {len(infos):,} members, over the {MAX_MEMBERS:,} an upload may hold. Split it "
                         "into several zips, or copy large data into a data root.")
    planned = []
    for info in infos:
        if info.is_dir():
            continue
        if info.flag_bits & 0x1:
            raise InputError(f"{source.name}: member {shown(info.filename)} is encrypted; zip the files without a password.")
        planned.append(Planned(check_member(info.filename, f"{source.name}: member"), source, info, info.file_size))
    return planned


def _plan(kind: UploadKind, files: Sequence[str | Path]) -> list[Planned]:
    """Return every file of the upload, each zip read once."""
    planned: list[Planned] = []
    for item in files:
        source = Path(item)
        if kind.unzip and source.suffix.lower() == ZIP:
            planned += _zip_members(source)
        else:
            planned.append(Planned(check_member(source.name, "File"), source, None, source.stat().st_size))
        if len(planned) > MAX_MEMBERS:
            raise InputError(f"The upload holds over {MAX_MEMBERS:,} files; upload fewer at a time.")
    return planned


def _check_plan(settings: Settings, kind: UploadKind, folder: Path, planned: list[Planned]) -> None:
    """Refuse, before anything is written: an upload over the size limit, a suffix `kind` does not take, a path
    too long for the file system, two files of one name, a file that is also a folder of another (`x.wav` and
    `x.wav/y.wav`), or a target that exists already."""
    limit = upload_limit_bytes(settings)
    total = sum(item.size for item in planned)
    if total > limit:
        raise InputError(f"The upload is {_megabytes(total)} (unpacked), over the {_megabytes(limit)} limit "
                         "(ui.upload_limit_mb in the settings). Upload fewer files, or copy large data into a data root.")
    targets = [item.target for item in planned]
    if len(set(targets)) != len(targets):
        raise InputError("Two uploaded files have the same name; rename one of them.")
    folders = {parent for target in targets for parent in target.parents}
    for item in planned:
        what = item.member.filename if item.member else item.source.name
        if item.target.suffix.lower() not in kind.suffixes:
            raise InputError(f"{shown(what)}: a {kind.what} takes {', '.join(kind.suffixes)} files"
                             + (" or a .zip of them" if kind.unzip else "") + ".")
        if item.target in folders:
            raise InputError(f"{shown(what)}: a file of the upload and a folder of others at once; rename one of them.")
        problem = path_problem(str(folder / item.target))
        if problem is not None:
            raise InputError(f"{shown(what)}: its path in the workspace is {problem}. Shorten its name or folders.")
        if (folder / item.target).exists() or (folder / item.target).is_symlink():
            raise InputError(f"{folder / item.target} exists already; nothing was overwritten. Rename the file, or "
                             "delete the old one first.")


def _extract(planned: list[Planned], staging: Path) -> None:
    """Write every planned file into `staging`, each zip opened once (its members in order): one pass."""
    by_source: dict[Path, list[Planned]] = {}
    for item in planned:
        by_source.setdefault(item.source, []).append(item)
    for folder in sorted({staging / item.target.parent for item in planned} - {staging}):
        folder.mkdir(parents=True, exist_ok=True)
    for source, items in by_source.items():
        if items[0].member is None:
            for item in items:
                _copy_new(item.source.open("rb"), staging / item.target)
            continue
        with zipfile.ZipFile(source) as archive:
            for item in items:
                _copy_new(archive.open(item.member), staging / item.target)


def _copy_new(data: BinaryIO, path: Path) -> None:
    with data, open(path, "xb") as out:  # "x": O_EXCL, a new file in the fresh staging folder
        shutil.copyfileobj(data, out)


def _move_in(staging: Path, planned: list[Planned], folder: Path, workspace: Path) -> list[Path]:
    """Link every staged file to its place under `folder` (never replacing a file: a link fails where a name is
    taken); on any failure remove what this upload placed, and raise."""
    placed: list[Path] = []
    made: list[Path] = []
    checked: set[Path] = set()
    try:
        for item in planned:
            path = folder / item.target
            if path.parent not in checked:
                for depth in range(len(item.target.parts)):  # the destination, then each folder down to the file's
                    parent = folder.joinpath(*item.target.parts[:depth])
                    if not parent.exists():
                        parent.mkdir()
                        made.append(parent)
                if not is_inside(path.parent, [workspace]):
                    raise InputError(f"{path.parent} leads outside the workspace; remove that link.")
                checked.add(path.parent)
            os.link(staging / item.target, path)
            placed.append(path)
    except BaseException:
        for path in placed:
            path.unlink(missing_ok=True)
        for parent in reversed(made):
            shutil.rmtree(parent, ignore_errors=True)
        raise
    return placed


def store_upload(settings: Settings, kind: UploadKind, files: Iterable[str | Path], name: str | None = None) -> list[Path]:
    """Write the uploaded `files` (paths of the server's copies, their names as the person chose them) into the
    workspace folder of `kind` (in the sub-folder `name` for a named kind); return the written paths.

    A transaction: everything is checked before anything is written (`_check_plan`: names, suffixes, the member
    count, sizes, path lengths, conflicts), the files are extracted in one pass into a fresh temporary folder
    beside the destination and only then linked into place; any failure — a damaged zip (bad CRC, corrupt
    data), a full disk — removes everything this upload wrote and raises InputError in one line.
    """
    files = [f for f in files if f]
    if not files:
        raise InputError(f"No file to upload: choose the {kind.what} first.")
    folder = _destination(settings, kind, name)
    planned = _plan(kind, files)
    _check_plan(settings, kind, folder, planned)
    base = settings.workspace / kind.folder
    made_base = not base.exists()
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".upload-", dir=base))
    try:
        _extract(planned, staging)
        return _move_in(staging, planned, folder, settings.workspace)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        raise InputError(f"The upload is damaged ({shown(str(exc) or type(exc).__name__)}); nothing was kept. Zip the "
                         "files again or upload them one by one.") from None
    except OSError as exc:
        raise InputError(f"The upload could not be written ({exc.strerror or exc}); nothing was kept. Free space or "
                         "fix the workspace folder, then upload again.") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if made_base:
            with contextlib.suppress(OSError):  # removed only when empty: a failed upload leaves no folder either
                base.rmdir()
