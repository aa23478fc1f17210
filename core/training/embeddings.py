"""Embedding surgery: resize a checkpoint's text rows from a base tokenizer to its extension.

Base rows are copied bit for bit; rows of new pieces are made by `fvt` (mean of the base rows of
the pieces the base tokenizer splits the new piece into, falling back to `mean` when the base
cannot spell it), `translit` (`fvt`, and for a piece the base cannot spell, FVT over its
romanization), `mean` (mean of the base rows) or `normal` (N(mean, per-dimension std)). The
report and the checkpoint metadata (`init_rows`) count the rows each method actually made.
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
from core.families import Family, FamilyDecision, explain_family, get_family
from core.families.rows import RowChange, plan_row_change, text_rows
from core.families.target_config import read_target_config, write_corrected_config
from core.tokenizers.tokenizer import SENTENCEPIECE, Tokenizer, load_tokenizer
from core.tokenizers.vocab import INIT_METHODS

WORD_BOUNDARY = "▁"


@dataclass
class RowPlan:
    """How the new text rows are laid out: the row change (base rows kept, rows before and after) and
    the per-row FVT sources."""

    change: RowChange
    sources: list[list[int] | None]
    methods: list[str]

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


def _spelling(base: Tokenizer, text: str, skip: set[int | None]) -> list[int]:
    ids = base.spell_piece(text)
    if base.unk_id is not None and base.unk_id in ids:
        return []
    ignored = skip if text.strip() else {base.unk_id}
    return [i for i in ids if i not in ignored]


def fvt_sources(base: Tokenizer, pieces: list[str], translit: bool = False) -> list[tuple[list[int], str]]:
    """Return, for each piece, (the base ids whose rows are averaged, the method that found them).

    `fvt`: the pieces the base splits it into. A piece the base cannot spell (its encoding holds
    the unk id) gets, with `translit`, the pieces of its romanization (`translit`), else nothing
    (`mean`: the caller uses the mean of all base rows). A bare word-boundary piece added in front
    of other content is left out.
    """
    from core.tokenizers.romanize import base_is_uppercase, romanize

    sentencepiece = base.kind == SENTENCEPIECE
    skip = {base.unk_id}
    if sentencepiece:
        skip.update(i for i, p in enumerate(base.pieces()) if p == WORD_BOUNDARY)
    uppercase = translit and base_is_uppercase(base)
    result = []
    for piece in pieces:
        text = piece.replace(WORD_BOUNDARY, " ") if sentencepiece else piece
        ids = _spelling(base, text, skip)
        if ids:
            result.append((ids, "fvt"))
            continue
        ids = _spelling(base, romanize(text, uppercase), skip) if translit else []
        result.append((ids, "translit") if ids else ([], "mean"))
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
    if init in ("fvt", "translit"):
        found = fvt_sources(base, new_pieces, translit=init == "translit")
        sources: list[list[int] | None] = [ids for ids, _ in found]
        methods = [method for _, method in found]
    else:
        sources, methods = [None] * len(new_pieces), [init] * len(new_pieces)
    return RowPlan(change, sources, methods)


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
    after, `init` (rows made per method: `fvt`, `translit`, `mean`, `normal`, zeros included) and
    the shape change of each text tensor.
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
    methods = Counter(plan.methods)
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


def init_record(report: Mapping[str, Any]) -> tuple[str | None, dict[str, int] | None]:
    """Return (init, init_rows) for checkpoint metadata from an extension report: the methods that
    made rows joined by `+` (e.g. `fvt+mean`) and the rows each made (e.g. `{"fvt": 457, "mean": 43}`);
    (None, None) when no row was made."""
    made = {m: n for m, n in report["init"].items() if n}
    return ("+".join(made), made) if made else (None, None)


def extend_checkpoint(
    checkpoint_path: str | os.PathLike[str],
    base_tokenizer_path: str | os.PathLike[str],
    tokenizer_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    family: str = "auto",
    init: str = "fvt",
    allow_truncate: bool = False,
    seed: int = 0,
    target_config: str | os.PathLike[str] | None = None,
    write_config: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Write a copy of the checkpoint resized for the extended tokenizer and return the report.

    The output (atomic, `.safetensors` or `.pt`) carries LinguaForge metadata: family, tokenizer
    fingerprint and size, base_size, init (the methods that made rows, joined by `+`), init_rows
    (rows per method), parent (sha256 of the input). The family comes from the metadata, keys and
    rows against the base tokenizer (`family="auto"`); the report says why (`family_reason`).
    With `write_config`, a copy of the foreign `target_config` with its vocab size set to the new
    tokenizer's is written too (report `config`). Optimizer state of a wrapped input is not
    carried over (its shapes no longer fit).
    Raises InputError on unreadable inputs, an undecidable family, a non-extension tokenizer, or
    an output equal to an input.
    """
    output = Path(output_path)
    if output.suffix.lower() not in SAFETENSORS_SUFFIXES + TORCH_SUFFIXES:
        raise InputError(f"{output}: unsupported output suffix {output.suffix!r}; use .safetensors, .pt or .pth.")
    if output.resolve() == Path(checkpoint_path).resolve():
        raise InputError(f"{output}: the output would overwrite the input checkpoint; choose another --output.")
    base = load_tokenizer(base_tokenizer_path)
    new = load_tokenizer(tokenizer_path)
    loaded = load_checkpoint(checkpoint_path)
    if family == "auto":
        decision = explain_family(loaded.state_dict, loaded.meta, base.size)
    else:
        decision = FamilyDecision(get_family(family), "given with --family")
    fam = decision.family
    if write_config is not None:
        if target_config is None:
            raise InputError("--write-config needs --target-config IN (the foreign config to correct).")
        inputs = (checkpoint_path, base_tokenizer_path, tokenizer_path, output)
        if Path(write_config).resolve() in {Path(p).resolve() for p in inputs}:
            raise InputError(f"{write_config}: --write-config would overwrite an input or the output; choose another path.")
        read_target_config(target_config)  # refuse a bad config before any file is written
    state_dict, report = extend_state_dict(loaded.state_dict, fam, base, new, init, allow_truncate, seed)
    init_name, init_rows = init_record(report)
    old = loaded.meta or {}
    meta = CheckpointMeta(
        family=fam.name,
        task=old.get("task") or fam.task,
        tokenizer_fingerprint=new.fingerprint,
        tokenizer_size=new.size,
        rows=report["rows_after"],
        base_size=report["base_rows_copied"],
        init=init_name,
        init_rows=init_rows,
        parent=loaded.sha256,
        codec_fingerprint=old.get("codec_fingerprint"),
        model_config=old.get("model_config"),
        step=old.get("step"),
    )
    save_checkpoint(output, state_dict, meta)
    report.update({"output": str(output), "parent": loaded.sha256, "dropped_keys": loaded.dropped,
                   "family_reason": decision.reason, "config": None})
    if write_config is not None:
        before = read_target_config(target_config)
        after = write_corrected_config(target_config, write_config, new.size, inputs=(checkpoint_path, output))
        report["config"] = {"output": str(after.path), "key": after.key, "before": before.vocab, "after": after.vocab}
    return report
