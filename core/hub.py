"""Published releases from the Hugging Face Hub, by name: `pull_release("chatterbox:v3")` → a model folder.

`huggingface_hub.snapshot_download` fetches only the files the release needs (`allow_patterns`) into the
user's Hub cache (resumable, with its progress bars; `HF_HOME` / `HF_HUB_CACHE` say where); under
`HF_HUB_OFFLINE=1` it resolves from that cache alone. The files are then hard-linked (copied across file
systems) into a model folder inside the workspace, `models/<name>` by default, IndexTTS2's companion
repositories into the sub-folders its loader reads, and the folder is checked by content
(`ModelFamily.check_release`). The repositories, the revisions resolved and every file's sha256 are written
to `hub_release.json` in the folder; a run trained from the folder copies that record into every
checkpoint's metadata (`CheckpointMeta.release`).
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from pathlib import Path
from typing import Any

from core.config import Settings, load_settings
from core.errors import InputError
from core.families.releases import HF_PREFIX, RELEASES, folder_of, HubPart, Release, get_release, parse_hf_id, pull_command, release_for_repo
from core.fsutil import atomic_write_json, sha256_file

RECORD_NAME = "hub_release.json"


def _release_of(name: str) -> tuple[Release, str | None]:
    """Return (release, revision) named by `name`: a release name, or `hf:owner/name[@revision]` of a release's repository."""
    if not name.startswith(HF_PREFIX):
        return get_release(name), None
    repo, revision = parse_hf_id(name)
    release = release_for_repo(repo)
    if release is None:
        known = ", ".join(sorted({r.repo for r in RELEASES.values()}))
        raise InputError(f"{name}: no family reads this repository; pull one of {known} (or a release name: "
                         f"{', '.join(RELEASES)}).")
    return release, revision


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _snapshot(part: HubPart, revision: str | None, pull: str) -> Path:
    """Return the snapshot folder of `part` in the Hub cache, fetching what it lacks unless offline."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(part.repo, revision=revision, allow_patterns=list(part.patterns)))
    except LocalEntryNotFoundError as exc:
        why = "HF_HUB_OFFLINE=1 is set" if _offline() else "the Hub cannot be reached"
        raise InputError(f"{part.repo}{'@' + revision if revision else ''}: not in the Hub cache and {why}: run "
                         f"`{pull}` with the network (the cache: HF_HOME / HF_HUB_CACHE).") from exc
    except HfHubHTTPError as exc:
        raise InputError(f"{part.repo}{'@' + revision if revision else ''}: the Hub refused it "
                         f"({str(exc).splitlines()[0]}); check the name and revision, or log in (`hf auth login`).") from exc


def _link(source: Path, dest: Path) -> None:
    """Put the cached file `source` at `dest`: a hard link to its blob, a copy across file systems."""
    blob = source.resolve()
    if dest.is_file() and os.path.samefile(blob, dest):
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    tmp.unlink(missing_ok=True)
    try:
        os.link(blob, tmp)
    except OSError:
        shutil.copyfile(blob, tmp)
    os.replace(tmp, dest)


def _place(part: HubPart, snapshot: Path, folder: Path, previous: dict[str, str]) -> dict[str, str]:
    """Link the snapshot's files into `folder` (under the part's sub-folder); return {path in folder: sha256}."""
    hashes = {}
    for source in sorted(p for p in snapshot.rglob("*") if p.is_file() or p.is_symlink()):
        inside = source.relative_to(snapshot).as_posix()
        if not source.exists() or not any(fnmatch.fnmatchcase(inside, pattern) for pattern in part.patterns):
            continue  # a dangling link (the content check names a needed file), or a file of another release
        relative = (Path(part.folder) / source.relative_to(snapshot)).as_posix()
        dest = folder / relative
        reused = dest.is_file() and os.path.samefile(source.resolve(), dest) and relative in previous
        _link(source, dest)
        hashes[relative] = previous[relative] if reused else sha256_file(dest)
    return hashes


def default_folder(name: str, settings: Settings) -> Path:
    """Return the workspace folder `models/<name>` a release is pulled into (`:` and `/` as `-`)."""
    return settings.workspace / folder_of(name)


def read_release_record(folder: Path | None) -> dict[str, Any] | None:
    """Return the folder's `hub_release.json` record (None without one, or without a folder)."""
    path = Path(folder) / RECORD_NAME if folder is not None else None
    if path is None or not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not readable JSON ({exc}); pull the release again to rewrite it.") from exc
    if not isinstance(record, dict):
        raise InputError(f"{path}: not a release record; pull the release again to rewrite it.")
    return record


def pull_release(name: str, settings: Settings | None = None, output: str | os.PathLike[str] | None = None,
                 revision: str | None = None) -> Path:
    """Return the model folder holding release `name` (`chatterbox`, `chatterbox:v3`, `chatterbox:english`,
    `chatterbox-turbo`, `chatterbox-nano`, `indextts2`, or `hf:owner/repo[@revision]` of one of their
    repositories), fetched into the Hub cache as needed (only the files the family reads), linked into
    `output` (default `models/<name>` in the workspace), checked by content and recorded in `hub_release.json`.

    `revision` (a branch, tag or commit) applies to the release's own repository; its companions use `main`.
    Raises InputError for an unknown name, an output outside the roots, a repository not in the cache when
    offline (naming the pull command), a missing file or content the family does not read.
    """
    from core.families.registry import get_model_family

    settings = settings or load_settings()
    release, pinned = _release_of(name)
    revision = revision or pinned
    folder = settings.check_inside_roots(output) if output else default_folder(name, settings)
    pull = pull_command(name)
    previous = read_release_record(folder) if folder.is_dir() else None
    known = {f: h for source in (previous or {}).get("sources", []) for f, h in source.get("files", {}).items()}
    sources = []
    for index, part in enumerate(release.parts):
        snapshot = _snapshot(part, revision if index == 0 else None, pull)
        files = _place(part, snapshot, folder, known)
        sources.append({"repo": part.repo, "revision": snapshot.name, "folder": part.folder, "files": files})
    family = get_model_family(release.family)
    missing = family.missing_published(folder)
    if missing:
        raise InputError(f"{folder}: {', '.join(missing)} missing from {release.label} as the cache holds it "
                         f"({release.repo}@{sources[0]['revision'][:12]}); run `{pull}` with the network.")
    files = {**family.published_files(folder), **family.speech_files(folder, settings)}
    content = family.check_release(files)
    record = {"release": release.name, "name": name, "label": release.label, "family": release.family,
              "content": content, "sources": sources}
    atomic_write_json(folder / RECORD_NAME, record)
    return folder


def resolve_model_folder(value: str, settings: Settings) -> Path:
    """Return the model folder a run config's `model_dir:` names: `hf:owner/repo[@revision]` pulled (from the
    cache when offline) by `pull_release`; a path resolved as every path is."""
    if value.startswith(HF_PREFIX):
        return pull_release(value, settings)
    return settings.resolve(value)
