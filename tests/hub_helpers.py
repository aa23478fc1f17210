"""A Hugging Face Hub cache built by the tests in the real layout, offline: `hub/models--owner--name/` with
`blobs/<sha256>`, `snapshots/<commit>/<path>` as relative links to the blobs, and `refs/main` naming the commit;
and a cached Hub dataset in the layout `datasets.load_dataset` reads it from (`cache_hub_dataset`)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any


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


def cache_hub_dataset(hf_home: Path, repo: str, config: str, split: str, rows: dict[str, list[Any]]) -> Path:
    """Write `rows` (an `audio` bytes/path struct, `text` and `speaker` columns) as the cached Hub dataset `repo`
    (config, split) under `hf_home` and return its folder.

    Built with `datasets` itself (its parquet builder), moved into the layout `load_dataset` reads a Hub dataset
    from offline: `datasets/owner___name/<config>/0.0.0/<hash>/`.
    """
    import datasets
    from datasets.packaged_modules.parquet.parquet import Parquet

    stage = hf_home.parent / "stage"
    stage.mkdir(parents=True)
    # the Audio feature's storage (its bytes/path struct): encoding through datasets.Audio needs torchcodec
    features = datasets.Features({"audio": {"bytes": datasets.Value("binary"), "path": datasets.Value("string")},
                                  "text": datasets.Value("string"), "speaker": datasets.Value("string")})
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(stage / f"{split}.parquet"))
    builder = Parquet(dataset_name=repo.split("/")[1], config_name=config, hash="0123456789abcdef",
                      data_files={split: str(stage / f"{split}.parquet")}, cache_dir=str(stage / "built"))
    builder.download_and_prepare()
    target = hf_home / "datasets" / repo.replace("/", "___") / config / "0.0.0"
    target.mkdir(parents=True)
    return Path(shutil.move(builder.cache_dir, target / "0123456789abcdef"))
