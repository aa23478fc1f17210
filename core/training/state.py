"""Training checkpoints: atomic save with rotation and `best`, resume lookup, vocabulary-growth resume.

A training checkpoint is a `.pt` written by `core.checkpoint.save_checkpoint`: the model's state
dict (full text matrices, `linguaforge` family keys), the `linguaforge` metadata record
(`core.checkpoint.CheckpointMeta`), and extras that load with `weights_only=True`: optimiser (with
parameter names), scheduler, scaler, RNG states, step, data position, best validation loss, the
tokenizer path and the frozen-row count and checksum.

When the run's tokenizer grew since the checkpoint (a prefix extension of the checkpoint's
tokenizer), `resume_plan` says so; `remap_optimizer_state` then pads each Adam moment of a grown
tensor with zero rows, so old rows keep their moments and new rows start fresh.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.checkpoint import LoadedCheckpoint, load_checkpoint
from core.config import Settings
from core.errors import InputError
from core.fsutil import atomic_write
from core.runs import BEST_FILE, RunFolder
from core.tokenizers.tokenizer import Tokenizer
from core.tokenizers.vocab import first_difference


def step_checkpoints(run_dir: Path) -> list[Path]:
    """Return the step checkpoints of the run in `run_dir`, oldest first (see `RunFolder.step_checkpoints`)."""
    return RunFolder(run_dir).step_checkpoints()


def rotate(run_dir: Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` step checkpoints; return the deleted paths."""
    old = step_checkpoints(run_dir)[:-keep_last]
    for path in old:
        path.unlink(missing_ok=True)
    return old


def link_as_best(path: Path) -> Path:
    """Make `best.pt` beside the checkpoint `path` hold its bytes, atomically; return the best path.

    `best.pt` is a hard link to `path` where the filesystem allows one (checkpoints are only ever
    replaced by rename, never written in place, so rotating `path` away leaves `best.pt` whole),
    which saves a checkpoint's worth of disk per run; elsewhere it is a copy.
    """
    best = path.parent / BEST_FILE
    with atomic_write(best) as tmp:
        tmp.unlink()
        try:
            os.link(path, tmp)
        except OSError:
            shutil.copyfile(path, tmp)
    return best


def resolve_resume(
    run_dir: Path, resume: str | None, settings: Settings, skipped: list[str] | None = None
) -> Path | None:
    """Return the checkpoint to resume from: None for a fresh run, the newest loadable one for `auto`.

    With `auto`, a step checkpoint that does not load (truncated, corrupt) is skipped for the next
    older one; each skip is appended to `skipped` as "FILE: reason". Raises InputError when an
    explicit path does not exist.
    """
    if resume is None:
        return None
    if resume == "auto":
        for path in reversed(step_checkpoints(run_dir)):
            try:
                load_checkpoint(path)
            except InputError as exc:
                if skipped is not None:
                    skipped.append(f"{path.name}: {exc}")
                continue
            return path
        return None
    path = settings.resolve(resume)
    if not path.is_file():
        raise InputError(f"--resume {resume}: {path} does not exist. Pass `auto` or a checkpoint file.")
    return path


def rng_state() -> dict[str, Any]:
    """Return the torch CPU (and CUDA, when present) RNG states."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Restore RNG states saved by `rng_state`."""
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def check_resume_source(loaded: LoadedCheckpoint, family: str, task: str) -> None:
    """Return None when the checkpoint `loaded` was written by a run of this `family` and `task` (its metadata
    record says so); a checkpoint without a record names neither and is judged by `resume_plan`.

    Raises InputError naming the checkpoint, what it records and what this run is.
    """
    meta = loaded.meta or {}
    recorded = {"family": meta.get("family"), "task": meta.get("task")}
    for key, value in (("family", family), ("task", task)):
        if recorded[key] is not None and recorded[key] != value:
            raise InputError(f"{loaded.path} is a checkpoint of a {key} {recorded[key]} run; this run's {key} is {value}. "
                             f"Resume from a checkpoint of this run (or of a {key} {value} run), or start --fresh.")


@dataclass
class ResumePlan:
    """How a checkpoint relates to the run's tokenizer: `same`, or `extension` with the old tokenizer."""

    kind: str
    old_tokenizer: Tokenizer | None
    old_size: int
    new_size: int


def resume_plan(loaded: LoadedCheckpoint, tokenizer: Tokenizer, settings: Settings) -> ResumePlan:
    """Return how to resume `loaded` with `tokenizer`.

    Raises InputError when the checkpoint lacks metadata, or when `tokenizer` is not a prefix
    extension of the checkpoint's tokenizer (the message names the first differing id; there is
    no override, since those rows would not mean the same tokens).
    """
    meta = loaded.meta or {}
    if not meta.get("tokenizer_fingerprint") or meta.get("rows") is None:
        raise InputError(f"{loaded.path}: no LinguaForge metadata (tokenizer fingerprint, rows); cannot resume from it.")
    if meta["tokenizer_fingerprint"] == tokenizer.fingerprint:
        return ResumePlan("same", None, int(meta["rows"]), tokenizer.size)
    from core.inference import resolve_tokenizer

    old = resolve_tokenizer(loaded, settings)
    diff = first_difference(old, tokenizer)
    if diff is not None:
        if diff >= tokenizer.size:
            detail = f"it has only {tokenizer.size} ids where the checkpoint's has {old.size}"
        else:
            detail = f"id {diff} is {tokenizer.piece(diff)!r} here but {old.piece(diff)!r} in the checkpoint's tokenizer"
        raise InputError(
            f"{tokenizer.path} is not a prefix extension of the tokenizer of {loaded.path} ({old.path}): {detail}. "
            "Its rows would not mean the same tokens, so resuming is refused. Use the checkpoint's tokenizer, "
            "or one built from it with `tokenizer extend`."
        )
    return ResumePlan("extension", old, old.size, tokenizer.size)


def remap_optimizer_state(
    saved: dict[str, Any], saved_names: list[str], names: list[str], shapes: dict[str, torch.Size]
) -> tuple[dict[str, Any], dict[str, int]]:
    """Return (optimizer state dict for the current parameters, {name: old row count} of grown ones).

    State is matched by parameter name. A tensor whose first dimension grew keeps its old rows'
    moments and gets zero moments for the appended rows. A saved parameter that never stepped (no
    state: it got no gradient, like a module a family now freezes as `unused_in_training`) is
    dropped. Raises InputError when names differ otherwise (another freeze mode or model) or a
    shape changed other than by appended rows.
    """
    index = {name: i for i, name in enumerate(saved_names)}
    gone = set(saved_names) - set(names)
    if set(names) - set(saved_names) or any(saved["state"].get(index[name]) is not None for name in gone):
        missing = sorted(set(names) - set(saved_names))[:5]
        extra = sorted(gone)[:5]
        raise InputError(
            "the checkpoint's optimiser covers other parameters than this run trains "
            f"(new: {missing}, gone: {extra}); the freeze mode or model changed. Keep them, or pass "
            "--reset-optimizer to start a fresh optimiser deliberately."
        )
    state: dict[int, dict[str, Any]] = {}
    grown: dict[str, int] = {}
    for new_i, name in enumerate(names):
        entry = saved["state"].get(index[name])
        if entry is None:
            continue
        entry = dict(entry)
        shape = shapes[name]
        for key in ("exp_avg", "exp_avg_sq"):
            moment = entry[key]
            if moment.shape == shape:
                continue
            if moment.shape[1:] != shape[1:] or moment.shape[0] > shape[0]:
                raise InputError(f"optimiser state of {name}: {tuple(moment.shape)} cannot become {tuple(shape)}.")
            grown[name] = moment.shape[0]
            pad = moment.new_zeros((shape[0] - moment.shape[0], *shape[1:]))
            entry[key] = torch.cat([moment, pad])
        state[new_i] = entry
    position = {name: i for i, name in enumerate(names)}
    groups = [{**group, "params": [position[saved_names[i]] for i in group["params"] if saved_names[i] in position]}
              for group in saved["param_groups"]]
    return {"state": state, "param_groups": groups}, grown
