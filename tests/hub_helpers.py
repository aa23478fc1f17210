"""A Hugging Face Hub cache built by the tests in the real layout, offline: `hub/models--owner--name/` with
`blobs/<sha256>`, `snapshots/<commit>/<path>` as relative links to the blobs, and `refs/main` naming the commit."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def cache_repo(hf_home: Path, repo: str, files: dict[str, Path], commit: str | None = None) -> str:
    """Put `files` ({path in the repository: local file}) into the Hub cache under `hf_home` as repository `repo`
    at `commit` (default: a hash of the files), `refs/main` pointing at it; return the commit."""
    root = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    digests = {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in sorted(files.items())}
    commit = commit or hashlib.sha1("".join(f"{n}{d}" for n, d in digests.items()).encode()).hexdigest()
    for name, path in files.items():
        blob = root / "blobs" / digests[name]
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.exists():
            shutil.copyfile(path, blob)
        link = root / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit, encoding="ascii")
    return commit


def folder_files(folder: Path) -> dict[str, Path]:
    """Return {relative path: path} of every file below `folder`."""
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}
