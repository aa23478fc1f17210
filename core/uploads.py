"""Uploads into the workspace: files a person hands the dashboard, copied into the folder of their kind
with the configured roots, the names and the size limit enforced.

Each `UploadKind` names its workspace folder, the file suffixes it takes and whether it lands in a
named sub-folder (a dataset's files, a model folder) and may come as a `.zip` (unpacked, its folders
kept). Every file and zip member must have a plain name (no hidden file, no `..`, no absolute path,
no separator in a file name), every destination must lie inside the workspace after symlinks are
followed, nothing that exists is overwritten, and the upload — a zip by what it unpacks to — must stay
within `ui.upload_limit_mb` of the settings. A refused upload writes nothing.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Sequence

from core.config import Settings
from core.confine import check_name, is_inside
from core.errors import InputError

DEFAULT_LIMIT_MB = 200
MB = 1024 * 1024
AUDIO = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a")
TABLES = (".csv", ".tsv", ".txt", ".json", ".jsonl", ".srt", ".parquet")
MODEL_FILES = (".safetensors", ".pt", ".pth", ".bin", ".json", ".yaml", ".yml", ".model", ".txt")
ZIP = ".zip"
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


def _plan(kind: UploadKind, files: Sequence[str | Path]) -> list[tuple[PurePosixPath, Path, str | None, int]]:
    """Return (relative target, source file, zip member or None, bytes) for every file of the upload."""
    planned = []
    for item in files:
        source = Path(item)
        if kind.unzip and source.suffix.lower() == ZIP:
            try:
                with zipfile.ZipFile(source) as archive:
                    for info in archive.infolist():
                        if info.is_dir():
                            continue
                        target = check_member(info.filename, f"{source.name}: member")
                        planned.append((target, source, info.filename, info.file_size))
            except zipfile.BadZipFile:
                raise InputError(f"{source.name}: not a readable zip file. Zip the files again or upload them one by one.") from None
        else:
            planned.append((check_member(source.name, "File"), source, None, source.stat().st_size))
    return planned


def store_upload(settings: Settings, kind: UploadKind, files: Iterable[str | Path], name: str | None = None) -> list[Path]:
    """Write the uploaded `files` (paths of the server's copies, their names as the person chose them) into the
    workspace folder of `kind` (in the sub-folder `name` for a named kind); return the written paths.

    Raises InputError, before writing anything, when there is no file, a name is not plain (see
    `check_member`), a suffix is not one `kind` takes, a target exists already, the destination leads
    outside the workspace, or the upload (a zip: what it unpacks to) is over `upload_limit_bytes`.
    """
    files = [f for f in files if f]
    if not files:
        raise InputError(f"No file to upload: choose the {kind.what} first.")
    folder = _destination(settings, kind, name)
    planned = _plan(kind, files)
    limit = upload_limit_bytes(settings)
    total = sum(size for *_, size in planned)
    if total > limit:
        raise InputError(f"The upload is {_megabytes(total)} (unpacked), over the {_megabytes(limit)} limit "
                         "(ui.upload_limit_mb in the settings). Upload fewer files, or copy large data into a data root.")
    for target, source, member, _ in planned:
        if target.suffix.lower() not in kind.suffixes:
            raise InputError(f"{member or source.name}: a {kind.what} takes {', '.join(kind.suffixes)} files"
                             + (" or a .zip of them" if kind.unzip else "") + ".")
        if (folder / target).exists():
            raise InputError(f"{folder / target} exists already; nothing was overwritten. Rename the file, or delete "
                             "the old one first.")
    if len({target for target, *_ in planned}) != len(planned):
        raise InputError("Two uploaded files have the same name; rename one of them.")
    written = []
    for target, source, member, _ in planned:
        path = folder / target
        path.parent.mkdir(parents=True, exist_ok=True)
        if not is_inside(path.parent.resolve(), [settings.workspace]):
            raise InputError(f"{path.parent} leads outside the workspace; remove that link.")
        if member is None:
            shutil.copyfile(source, path)
        else:
            with zipfile.ZipFile(source) as archive, archive.open(member) as data, open(path, "wb") as out:
                shutil.copyfileobj(data, out)
        written.append(path)
    return written
