"""Published model folders inside the configured roots: which folders hold a family's release, which
release each holds, and whether it holds every file the family loads with the content the family reads.

A folder is listed for a family when it holds one of the family's `marker_names` (its published
checkpoints, newest first: Chatterbox's `t3_mtl23ls_v3.safetensors` / `…_v2` / `t3_cfg.safetensors`,
Turbo's and Nano's T3, IndexTTS2's `gpt.pth`); the file names come from the family classes
(`published_names`, `speech_files`), never from a list here. A complete folder is then checked by content
(`check_release`: the checkpoint's layout and rows against the tokenizer); a partial one names what is
missing and the `models pull` command of its release.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from core.config import Settings
from core.confine import is_inside
from core.errors import InputError
from core.families.registry import get_model_family
from core.families.releases import release_text

#: how many folder levels below each root are searched (a data root may hold a large corpus)
MAX_DEPTH = 4


@dataclass
class FolderCheck:
    """What a model folder holds for a family: `files` {role: path} when complete, else the `missing`
    names and `problem`, one sentence saying what is missing and where it must go."""

    folder: Path
    files: dict[str, Path] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    problem: str | None = None
    #: the `models pull` name of the release the folder holds (None: none recognised)
    release: str | None = None
    #: one line: the release, the checkpoint chosen (and any other one not used) and what its content holds
    shown: str = ""

    @property
    def ok(self) -> bool:
        """Return True when the folder holds every file the family loads."""
        return self.problem is None


def _shown(settings: Settings, folder: Path) -> str:
    try:
        return folder.relative_to(settings.workspace).as_posix()
    except ValueError:
        return str(folder)


def find_model_folders(settings: Settings, family_name: str) -> list[str]:
    """Return the folders inside the workspace, the data roots and the settings' model folders (up to
    MAX_DEPTH levels down, hidden and symlinked folders not entered) that hold one of the family's
    published checkpoints, workspace-relative where inside it, sorted. Raises InputError for an unknown family."""
    markers = set(get_model_family(family_name).marker_names)
    roots = list(dict.fromkeys(settings.allowed_roots + settings.model_roots))
    found: set[str] = set()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            depth = len(Path(dirpath).relative_to(root).parts)
            dirnames[:] = [] if depth >= MAX_DEPTH else [d for d in dirnames if not d.startswith(".")]
            if markers.intersection(filenames) and is_inside(Path(dirpath), roots):
                found.add(_shown(settings, Path(dirpath)))
    return sorted(found)


def check_model_folder(settings: Settings, family_name: str, folder: str) -> FolderCheck:
    """Return what `folder` (workspace-relative or absolute) holds of the family's published files.

    Raises InputError when the folder lies outside the roots or is not a folder.
    """
    from core.families.releases import RELEASES, family_release, pull_command

    family = get_model_family(family_name)
    path = settings.check_inside_roots(folder, model_folders=True)
    if not path.is_dir():
        raise InputError(f"{folder}: not a folder. Choose a folder that holds the published {family_name} files.")
    release = family.release_of(path)
    pull = pull_command(release or family_release(family_name))
    missing = family.missing_published(path)
    if missing:
        return FolderCheck(path, missing=missing, release=release, problem=(
            f"{_shown(settings, path)} lacks {', '.join(missing)}"
            f"{f' of {RELEASES[release].label}' if release else ''}. {release_text(family_name, release, path)} Fetch it with "
            f"`{pull}` (nothing downloads unless asked), or copy its files into the folder."))
    try:
        files = {**family.published_files(path), **family.speech_files(path, settings)}
        content = family.check_release(files)
    except InputError as exc:
        return FolderCheck(path, release=release, problem=str(exc))
    unused = [name for name in family.marker_names if (path / name).is_file() and path / name not in files.values()]
    label = RELEASES[release].label if release else family_name
    chosen = files.get(family.start_role or "")
    note = f"{chosen.name}" + (f"; {', '.join(unused)} also here, not used" if unused else "") if chosen else ""
    return FolderCheck(path, files=files, release=release, shown=f"{label} ({note}): {content}" if note else f"{label}: {content}")
