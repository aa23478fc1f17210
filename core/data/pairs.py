"""Prompt pairs: for each cached clip, prompt clips from the same speaker (never itself).

`build_pairs` writes `pairs.json` in the cache folder: `{target_id: [prompt ids…]}`. Prompts
come from the target's own split when the speaker has other clips there, so validation targets
are prompted by validation clips where possible. Speakers with a single clip cannot be paired;
they are reported, not silently dropped.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.data.cache import SHARED_INDEX_FORMATS
from core.data.feature_cache import open_cache
from core.errors import InputError
from core.fsutil import atomic_write_json
from core.structured import read_json_file

PAIRS_NAME = "pairs.json"


@dataclass
class PairsReport:
    """What `build_pairs` wrote."""

    path: Path
    targets: int
    pairs: int
    per_target: int
    single_clip_speakers: dict[str, str] = field(default_factory=dict)
    short_speakers: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready report."""
        return {**asdict(self), "path": str(self.path)}


def choose_prompts(target: dict[str, Any], candidates: list[dict[str, Any]], count: int, rng: random.Random) -> list[str]:
    """Return up to `count` prompt ids for `target` from `candidates` (same speaker, not itself).

    Same-split candidates come first; the rest fill in when the split has too few.
    """
    others = [c for c in candidates if c["id"] != target["id"]]
    same = [c["id"] for c in others if c["split"] == target["split"]]
    rest = [c["id"] for c in others if c["split"] != target["split"]]
    rng.shuffle(same)
    rng.shuffle(rest)
    return (same + rest)[:count]


def build_pairs(cache_dir: str | os.PathLike[str], per_target: int = 1, seed: int = 0) -> PairsReport:
    """Write pairs.json for the cache at `cache_dir` and return the PairsReport.

    Raises InputError when `per_target` is below 1 or the cache cannot be opened.
    """
    if per_target < 1:
        raise InputError(f"--per-target {per_target}: must be at least 1.")
    index = open_cache(cache_dir, SHARED_INDEX_FORMATS)
    by_speaker: dict[str, list[dict[str, Any]]] = {}
    for entry in index.items:
        by_speaker.setdefault(entry["speaker"], []).append(entry)
    rng = random.Random(seed)
    pairs: dict[str, list[str]] = {}
    single: dict[str, str] = {}
    short: dict[str, int] = {}
    for speaker, entries in sorted(by_speaker.items()):
        if len(entries) == 1:
            single[speaker] = entries[0]["id"]
            continue
        if len(entries) - 1 < per_target:
            short[speaker] = len(entries) - 1
        for entry in entries:
            pairs[entry["id"]] = choose_prompts(entry, entries, per_target, rng)
    path = atomic_write_json(index.path / PAIRS_NAME, pairs)
    return PairsReport(
        path=path,
        targets=len(pairs),
        pairs=sum(len(v) for v in pairs.values()),
        per_target=per_target,
        single_clip_speakers=single,
        short_speakers=short,
    )


def load_pairs(cache_dir: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Return the pairs.json mapping of a cache; raises InputError when it was never built."""
    path = Path(cache_dir) / PAIRS_NAME
    if not path.is_file():
        raise InputError(f"{path}: no prompt pairs. Run `pairs build --cache {cache_dir}` first.")
    return read_json_file(path)


def training_pairs(
    items: list[dict[str, Any]], pairs: dict[str, list[str]], split: str,
    max_text: int, max_codes: int, prompts_per_target: int,
) -> tuple[list[tuple[str, str]], int]:
    """Return the (target id, prompt id) pairs of `split` and how many targets were filtered out.

    `items` are cache index entries (`id`, `split`, `n_text`, `n_codes`); a target longer than
    `max_text` text ids or `max_codes` codes is filtered (it would overflow the position tables).
    Each target takes up to `prompts_per_target` prompts from `pairs`, or itself when it has none.
    """
    chosen: list[tuple[str, str]] = []
    filtered = 0
    for entry in items:
        if entry["split"] != split:
            continue
        if entry["n_text"] > max_text or entry["n_codes"] > max_codes:
            filtered += 1
            continue
        prompts = pairs.get(entry["id"]) or [entry["id"]]
        chosen.extend((entry["id"], prompt) for prompt in prompts[:prompts_per_target])
    return chosen, filtered
