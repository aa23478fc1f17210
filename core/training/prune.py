"""Prune a training checkpoint to what inference needs: weights and metadata, as safetensors.

The optimiser, scheduler and RNG states are dropped. The tokenizer (and the codec, for tts)
are copied beside the output as `<stem>.tokenizer.<ext>` and `<stem>.codec.pt`, so the pruned
model travels as one folder; inference also finds them by fingerprint without the copies.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from core.checkpoint import CheckpointMeta, load_checkpoint, save_checkpoint
from core.config import Settings
from core.errors import InputError
from core.fsutil import atomic_write
from core.inference import load_for_inference


def _copy(source: Path, target: Path) -> Path:
    with atomic_write(target) as tmp:
        shutil.copyfile(source, tmp)
    return target


def prune_checkpoint(checkpoint: str, output: str, settings: Settings, copy_assets: bool = True) -> dict[str, Any]:
    """Write the pruned checkpoint to `output` (must end in .safetensors) and return a report.

    A checkpoint of a published family (chatterbox, indextts) is exported in its native layout
    instead (`ModelFamily.export` into the output's folder, named after the output's stem).
    Raises InputError when the output is not .safetensors, equals the input, or the checkpoint
    lacks LinguaForge metadata or its tokenizer/codec cannot be resolved.
    """
    target = settings.resolve(output)
    if target.suffix != ".safetensors":
        raise InputError(f"--output {output}: use a .safetensors file (weights and metadata only).")
    family = (load_checkpoint(settings.resolve(checkpoint)).meta or {}).get("family")
    if family not in (None, "linguaforge"):
        from core.families.registry import get_model_family

        written = get_model_family(family).export(settings.resolve(checkpoint), target.parent, target.stem.removeprefix("t3_"), settings)
        return {"output": str(written[0]), "family": family, "files": [str(p) for p in written],
                "input_bytes": settings.resolve(checkpoint).stat().st_size, "output_bytes": written[0].stat().st_size,
                "tensors": None, "step": None, "assets": {"tokenizer": str(written[1]), "note": str(written[2])}}
    inference = load_for_inference(checkpoint, settings)
    source = inference.checkpoint.path
    if target == source:
        raise InputError(f"--output {output}: would overwrite the input checkpoint; choose another path.")
    meta = CheckpointMeta.from_dict(inference.meta)
    save_checkpoint(target, inference.checkpoint.state_dict, meta)
    assets: dict[str, str] = {}
    if copy_assets:
        tok = inference.tokenizer.path
        assets["tokenizer"] = str(_copy(tok, target.with_name(f"{target.stem}.tokenizer{tok.suffix}")))
        if inference.codec is not None:
            codec_path = target.with_name(f"{target.stem}.codec.pt")
            inference.codec.save(codec_path)
            assets["codec"] = str(codec_path)
    return {
        "input": str(source),
        "output": str(target),
        "input_bytes": source.stat().st_size,
        "output_bytes": target.stat().st_size,
        "tensors": len(inference.checkpoint.state_dict),
        "task": meta.task,
        "step": meta.step,
        "tokenizer_fingerprint": meta.tokenizer_fingerprint,
        "codec_fingerprint": meta.codec_fingerprint,
        "assets": assets,
    }
