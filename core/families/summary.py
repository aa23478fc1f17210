"""`checkpoint inspect`'s summary of any checkpoint file, with the family its text keys name.

It lives with the families (not in `core.checkpoint`, which loads and saves files and knows no family).
"""

from __future__ import annotations

import os
from typing import Any

from core.checkpoint import load_checkpoint
from core.errors import InputError
from core.families import detect_family


def inspect_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return a JSON-ready summary of a checkpoint: family (None when unknown, with the reason), rows,
    dim, metadata, text tensor shapes, tensor groups by first key part, parameter counts.

    Raises InputError when the file does not load.
    """
    loaded = load_checkpoint(path)
    sd = loaded.state_dict
    family, error = None, None
    try:
        family = detect_family(sd, loaded.meta)
    except InputError as exc:
        error = str(exc)
    groups: dict[str, list[int]] = {}
    for key, tensor in sd.items():
        group = groups.setdefault(key.split(".")[0], [0, 0])
        group[0] += 1
        group[1] += tensor.numel()
    text_keys = [k for k in family.text_keys if k in sd] if family else []
    embedding = sd.get(family.embedding_key) if family else None
    return {
        "path": str(loaded.path),
        "sha256": loaded.sha256,
        "family": family.name if family else None,
        "family_error": error,
        "rows": int(embedding.shape[0]) if embedding is not None else None,
        "dim": int(embedding.shape[1]) if embedding is not None and embedding.dim() > 1 else None,
        "meta": loaded.meta,
        "tensor_count": len(sd),
        "parameters": sum(t.numel() for t in sd.values()),
        "text_tensors": [[k, list(sd[k].shape), str(sd[k].dtype).replace("torch.", "")] for k in text_keys],
        "groups": [[name, n, p] for name, (n, p) in sorted(groups.items())],
        "dropped": loaded.dropped,
        "extra_keys": sorted(map(str, loaded.extra)),
    }
