"""Manifest layout: an existing manifest.jsonl, re-validated."""

from __future__ import annotations

from pathlib import Path

from core.data.importers import Candidate, ImportOptions
from core.data.manifest import Reject, read_manifest


def collect(source: Path, options: ImportOptions) -> tuple[list[Candidate], list[Reject]]:
    """Return candidates and rejects from a manifest.jsonl (or a folder holding one).

    `--speaker`/`--language` fill rows that lack those fields. Raises InputError when the
    manifest is missing.
    """
    path = source / "manifest.jsonl" if source.is_dir() else source
    defaults = {k: v for k, v in (("speaker", options.speaker), ("language", options.language)) if v}
    rows, rejects = read_manifest(path, defaults=defaults, check_audio=False)
    candidates = [
        Candidate(str(path.resolve()), row.line, row.id, row.path, row.text, row.speaker, row.language, meta=row.meta)
        for row in rows
    ]
    return candidates, rejects
