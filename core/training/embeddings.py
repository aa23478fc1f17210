"""Embedding surgery: resize a checkpoint's text rows from a base tokenizer to its extension.

Base rows are copied bit for bit; rows of new pieces are made by `fvt` (mean of the base rows of
the pieces the base tokenizer splits the new piece into, falling back to `mean` when the base
knows none of them), `mean` (mean of the base rows) or `normal` (N(mean, per-dimension std)).
A family's extra rows (IndexTTS's never-indexed row) move to the new end. New head-bias entries
start at the base mean.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from core.checkpoint import SAFETENSORS_SUFFIXES, TORCH_SUFFIXES, CheckpointMeta, load_checkpoint, save_checkpoint
from core.errors import InputError
from core.families import Family, detect_family, get_family
from core.families.rows import RowChange, plan_row_change, text_rows
from core.tokenizers.tokenizer import SENTENCEPIECE, Tokenizer, load_tokenizer
from core.tokenizers.vocab import INIT_METHODS

WORD_BOUNDARY = "▁"


@dataclass
class RowPlan:
    """How the new text rows are laid out: the row change (base rows kept, rows before and after) and
    the per-row FVT sources."""

    change: RowChange
    sources: list[list[int] | None]

    @property
    def keep(self) -> int:
        """Return how many base rows are copied bit for bit."""
        return self.change.kept

    @property
    def source_rows(self) -> int:
        """Return the checkpoint's text rows before."""
        return self.change.rows_before

    @property
    def target_rows(self) -> int:
        """Return the text rows after."""
        return self.change.rows_after

    @property
    def offset(self) -> int:
        """Return the family's trailing extra rows."""
        return self.change.family.row_offset

    def methods(self, init: str) -> list[str]:
        """Return the init method actually used for each new row (`fvt` falls back to `mean`)."""
        if init != "fvt":
            return [init] * len(self.sources)
        return ["fvt" if s else "mean" for s in self.sources]


def fvt_sources(base: Tokenizer, pieces: list[str]) -> list[list[int]]:
    """Return, for each piece, the base ids whose rows FVT averages: the known pieces the base splits it into.

    Unknown ids and a bare word-boundary piece added in front of other content are left out, so a
    piece the base cannot spell yields an empty list.
    """
    sentencepiece = base.kind == SENTENCEPIECE
    skip = {base.unk_id}
    if sentencepiece:
        skip.update(i for i, p in enumerate(base.pieces()) if p == WORD_BOUNDARY)
    result = []
    for piece in pieces:
        text = piece.replace(WORD_BOUNDARY, " ") if sentencepiece else piece
        ignored = skip if text.strip() else {base.unk_id}
        result.append([i for i in base.encode(text) if i not in ignored])
    return result


def plan_rows(
    base: Tokenizer, new: Tokenizer, family: Family, source_rows: int, init: str, allow_truncate: bool
) -> RowPlan:
    """Return the row plan for moving a checkpoint of `source_rows` rows from `base` to `new`.

    Raises InputError for an unknown `init` and for everything `core.families.rows.plan_row_change`
    refuses (not a prefix extension, fewer rows than `base` needs, a shrink without `allow_truncate`).
    """
    if init not in INIT_METHODS:
        raise InputError(f"init {init!r} is not one of {', '.join(INIT_METHODS)}.")
    change = plan_row_change(family, base, new, source_rows, allow_truncate)
    new_pieces = [new.piece(i) for i in range(change.kept, new.size)]
    sources = fvt_sources(base, new_pieces) if init == "fvt" else [None] * len(new_pieces)
    return RowPlan(change, sources)


def _new_rows(base_rows: torch.Tensor, plan: RowPlan, init: str, generator: torch.Generator) -> torch.Tensor:
    base64 = base_rows.double()
    mean = base64.mean(dim=0)
    count = len(plan.sources)
    if init == "normal":
        std = base64.std(dim=0, unbiased=False) if base64.shape[0] > 1 else torch.zeros_like(mean)
        noise = torch.randn((count, *mean.shape), generator=generator, dtype=torch.float64)
        return (mean + noise * std).to(base_rows.dtype)
    segments = [i for i, src in enumerate(plan.sources) if src for _ in src]
    flat = [j for src in plan.sources if src for j in src]
    sums = torch.zeros((count, *mean.shape), dtype=torch.float64)
    sums.index_add_(0, torch.tensor(segments, dtype=torch.long), base64[torch.tensor(flat, dtype=torch.long)])
    counts = torch.bincount(torch.tensor(segments, dtype=torch.long), minlength=count).double()
    counts = counts.reshape(count, *([1] * mean.dim()))
    rows = torch.where(counts > 0, sums / counts.clamp_min(1), mean)
    return rows.to(base_rows.dtype)


def resize_text_tensor(
    tensor: torch.Tensor, plan: RowPlan, init: str, generator: torch.Generator, is_bias: bool = False
) -> torch.Tensor:
    """Return `tensor` with its first dimension resized by `plan`.

    Rows below `plan.keep` are copied bit for bit, new rows are initialised by `init` (bias entries by
    the base mean), and the family's trailing extra rows are moved to the new end.
    """
    if tensor.shape[0] != plan.source_rows:
        raise InputError(
            f"a text tensor has {tensor.shape[0]} rows where the embedding has {plan.source_rows}; the checkpoint is inconsistent."
        )
    out = torch.empty((plan.target_rows, *tensor.shape[1:]), dtype=tensor.dtype)
    out[: plan.keep] = tensor[: plan.keep]
    made = plan.target_rows - plan.offset - plan.keep
    if made:
        base_rows = tensor[: plan.keep]
        if is_bias:
            out[plan.keep : plan.keep + made] = base_rows.double().mean().to(tensor.dtype)
        else:
            out[plan.keep : plan.keep + made] = _new_rows(base_rows, plan, init, generator)
    if plan.offset:
        out[plan.target_rows - plan.offset :] = tensor[plan.source_rows - plan.offset :]
    return out


def extend_state_dict(
    state_dict: Mapping[str, torch.Tensor],
    family: Family,
    base: Tokenizer,
    new: Tokenizer,
    init: str = "fvt",
    allow_truncate: bool = False,
    seed: int = 0,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Return (new state dict, report) with the family's text tensors resized from `base` to `new`.

    Other tensors are passed through untouched. The report holds base/new sizes, rows before and
    after, `init` counts per method and the shape change of each text tensor.
    Raises InputError on a missing key, a non-extension tokenizer, too few rows or an unallowed shrink.
    """
    source_rows = text_rows(family, state_dict)
    plan = plan_rows(base, new, family, source_rows, init, allow_truncate)
    generator = torch.Generator().manual_seed(seed)
    result = dict(state_dict)
    shapes = {}
    for key in family.text_keys:
        result[key] = resize_text_tensor(state_dict[key], plan, init, generator, is_bias=key == family.head_bias_key)
        shapes[key] = {"before": list(state_dict[key].shape), "after": list(result[key].shape)}
    methods = Counter(plan.methods(init))
    report = {
        "family": family.name,
        "base_size": base.size,
        "size": new.size,
        "rows_before": source_rows,
        "rows_after": plan.target_rows,
        "base_rows_copied": plan.keep,
        "rows_discarded": source_rows - family.row_offset - plan.keep,
        "extra_rows_moved": plan.change.extra_rows_moved,
        "init": {m: methods.get(m, 0) for m in INIT_METHODS},
        "tensors": shapes,
    }
    return result, report


def extend_checkpoint(
    checkpoint_path: str | os.PathLike[str],
    base_tokenizer_path: str | os.PathLike[str],
    tokenizer_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    family: str = "auto",
    init: str = "fvt",
    allow_truncate: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Write a copy of the checkpoint resized for the extended tokenizer and return the report.

    The output (atomic, `.safetensors` or `.pt`) carries LinguaForge metadata: family, tokenizer
    fingerprint and size, base_size, init, parent (sha256 of the input). Optimizer state of a
    wrapped input is not carried over (its shapes no longer fit).
    Raises InputError on unreadable inputs, a non-extension tokenizer, or the output equal to the input.
    """
    output = Path(output_path)
    if output.suffix.lower() not in SAFETENSORS_SUFFIXES + TORCH_SUFFIXES:
        raise InputError(f"{output}: unsupported output suffix {output.suffix!r}; use .safetensors, .pt or .pth.")
    if output.resolve() == Path(checkpoint_path).resolve():
        raise InputError(f"{output}: the output would overwrite the input checkpoint; choose another --output.")
    base = load_tokenizer(base_tokenizer_path)
    new = load_tokenizer(tokenizer_path)
    loaded = load_checkpoint(checkpoint_path)
    fam = detect_family(loaded.state_dict, loaded.meta) if family == "auto" else get_family(family)
    state_dict, report = extend_state_dict(loaded.state_dict, fam, base, new, init, allow_truncate, seed)
    old = loaded.meta or {}
    meta = CheckpointMeta(
        family=fam.name,
        task=old.get("task") or fam.task,
        tokenizer_fingerprint=new.fingerprint,
        tokenizer_size=new.size,
        rows=report["rows_after"],
        base_size=report["base_rows_copied"],
        init=init,
        parent=loaded.sha256,
        codec_fingerprint=old.get("codec_fingerprint"),
        model_config=old.get("model_config"),
        step=old.get("step"),
    )
    save_checkpoint(output, state_dict, meta)
    report.update({"output": str(output), "parent": loaded.sha256, "dropped_keys": loaded.dropped})
    return report
