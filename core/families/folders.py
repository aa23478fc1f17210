"""Published model folders inside the configured roots: which folders hold a family's release, and
whether one holds every file the family loads.

A folder is listed for a family when it holds one of the family's `marker_names` (its published
checkpoint: Chatterbox's `t3_mtl23ls_v2.safetensors` / `t3_cfg.safetensors`, IndexTTS2's `gpt.pth`);
the file names come from the family classes (`published_names`, `speech_files`), never from a list here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from core.config import Settings
from core.confine import is_inside
from core.errors import InputError
from core.families.registry import get_model_family
from core.families.releases import release_of, release_text

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
    family = get_model_family(family_name)
    path = settings.check_inside_roots(folder, model_folders=True)
    if not path.is_dir():
        raise InputError(f"{folder}: not a folder. Choose a folder that holds the published {family_name} files.")
    missing = family.missing_published(path)
    if missing:
        release = release_of(family_name)
        return FolderCheck(path, missing=missing, problem=(
            f"{_shown(settings, path)} lacks {', '.join(missing)}. {release_text(family_name)} Fetch it with "
            f"`{release.command()}` (nothing downloads unless asked), or copy its files into the folder."))
    try:
        files = {**family.published_files(path), **family.speech_files(path, settings)}
    except InputError as exc:
        return FolderCheck(path, problem=str(exc))
    return FolderCheck(path, files=files)
