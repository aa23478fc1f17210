"""Checkpoint files: safe loading of foreign layouts and atomic saving with LinguaForge metadata.

`.pt`/`.pth` files load with `torch.load(weights_only=True)`: a pickle that needs code execution
is refused, never run. Wrapped layouts (`{"model": …}`, `{"state_dict": …}`) are unwrapped and
known alias keys dropped. `.safetensors` files keep the metadata as JSON under `linguaforge`.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import pickle
import shutil
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from core.errors import InputError, InternalError
from core.fsutil import atomic_write, sha256_file
from core.structured import loads_json

META_KEY = "linguaforge"
SAFETENSORS_SUFFIXES = (".safetensors",)
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
WRAPPER_KEYS = ("model", "state_dict", "model_state_dict", "module")
DROPPED_KEYS = ("gpt.wte.weight",)
DROPPED_PREFIXES = ("inference_model.",)
_PLAIN_TYPES = (str, int, float, bool, type(None), torch.Tensor, torch.Size)
_NUMBER = (int, float)
# the type each CheckpointMeta field holds when it is set (None is always allowed)
META_TYPES: dict[str, type | tuple[type, ...]] = {
    "family": str, "task": str, "tokenizer_fingerprint": str, "tokenizer_size": int, "rows": int, "base_size": int,
    "init": str, "init_rows": dict, "parent": str, "codec_fingerprint": str, "model_config": dict, "step": int,
    "layout": dict, "adapter": dict, "length_bounds": list, "release": dict,
}
# the keys an adapter record (`core.training.adapter`) always holds, with their types
ADAPTER_TYPES: dict[str, type | tuple[type, ...]] = {
    "kind": str, "rank": int, "alpha": _NUMBER, "dropout": _NUMBER, "targets": list, "modules": dict,
    "base_checkpoint": str, "base_sha256": str, "frozen_rows": int,
}


@dataclass
class CheckpointMeta:
    """The `linguaforge` record every checkpoint LinguaForge writes carries (docs/concepts/vocabulary.md)."""

    family: str | None = None
    task: str | None = None
    tokenizer_fingerprint: str | None = None
    tokenizer_size: int | None = None
    rows: int | None = None
    base_size: int | None = None
    init: str | None = None
    init_rows: dict[str, int] | None = None
    parent: str | None = None
    codec_fingerprint: str | None = None
    model_config: dict[str, Any] | None = None
    step: int | None = None
    layout: dict[str, Any] | None = None
    #: an adapter checkpoint's record (`core.training.adapter`): LoRA settings, targets, base checkpoint and its sha256
    adapter: dict[str, Any] | None = None
    #: the training data's speech tokens per text character, (low, high): the 1st–99th percentile widened by the
    #: length detector's margin (`core.eval.quality.detectors.length_bounds`); the bounds its evaluation judges by
    length_bounds: list[float] | None = None
    #: the published release the run started from, as `models pull` recorded it in the model folder
    #: (`hub_release.json`: release name, repositories, revisions and file sha256s; `core.hub`)
    release: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the record as a JSON-ready mapping (every field, None where unknown)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CheckpointMeta":
        """Return a CheckpointMeta from a mapping; keys that are not fields are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def check_meta(path: str | os.PathLike[str], meta: Any) -> dict[str, Any] | None:
    """Return a checkpoint's `linguaforge` record when it has the shape LinguaForge writes, None when absent.

    The record comes from the file, so it is checked before anything reads it: an object whose known
    fields hold their types (`META_TYPES`) and whose adapter record, when set, holds every key of
    `ADAPTER_TYPES` with its type. Raises InputError naming the file and the field otherwise.
    """
    if meta is None:
        return None
    fix = "the file was not written by LinguaForge or was altered; use the checkpoint LinguaForge wrote."
    if not isinstance(meta, Mapping):
        raise InputError(f"{path}: its `{META_KEY}` metadata is a {type(meta).__name__}, not a record; {fix}")
    _check_types(path, meta, META_TYPES, META_KEY, fix)
    adapter = meta.get("adapter")
    if adapter is not None:
        missing = [key for key in ADAPTER_TYPES if key not in adapter]
        if missing:
            raise InputError(f"{path}: its adapter record lacks {', '.join(missing)}; {fix}")
        _check_types(path, adapter, ADAPTER_TYPES, f"{META_KEY}.adapter", fix)
        if not all(isinstance(key, str) and kind in ("linear", "conv1d") for key, kind in adapter["modules"].items()):
            raise InputError(f"{path}: its adapter record's modules are not {{module: linear | conv1d}}; {fix}")
    return dict(meta)


def _check_types(path: str | os.PathLike[str], record: Mapping[str, Any], types: Mapping[str, Any], where: str,
                 fix: str) -> None:
    for key, kind in types.items():
        value = record.get(key)
        if value is not None and (not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)):
            raise InputError(f"{path}: its `{where}.{key}` is {type(value).__name__} {value!r:.60}; {fix}")


def adapter_checkpoint_error(path: str | os.PathLike[str]) -> InputError:
    """Return the InputError for an adapter checkpoint handed where full weights are needed (with the merge fix)."""
    return InputError(f"{path} is a LoRA adapter checkpoint (adapter weights and trained rows only); merge it into its "
                      "base first: `export --checkpoint … --output DIR --merge`, then use DIR/merged.safetensors.")


@dataclass
class LoadedCheckpoint:
    """A loaded checkpoint: its tensors, metadata (None for foreign files) and the rest of the file."""

    state_dict: dict[str, torch.Tensor]
    meta: dict[str, Any] | None
    extra: dict[str, Any]
    path: Path
    sha256: str
    dropped: list[str] = field(default_factory=list)


def _meta_dict(meta: CheckpointMeta | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if meta is None:
        return None
    if isinstance(meta, CheckpointMeta):
        return meta.to_dict()
    return dict(meta)


def _check_plain(value: Any, where: str) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_plain(key, where)
            _check_plain(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
    elif not isinstance(value, _PLAIN_TYPES):
        raise InternalError(
            f"checkpoint extra {where} is a {type(value).__name__}; only tensors, containers and "
            "plain values load with weights_only=True."
        )


def _unshare(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Return contiguous tensors, cloning any that share storage with an earlier one (safetensors needs this)."""
    seen: set[int] = set()
    result = {}
    for key, tensor in state_dict.items():
        tensor = tensor.detach().contiguous()
        ptr = tensor.untyped_storage().data_ptr() if tensor.numel() else None
        if ptr is not None and ptr in seen:
            tensor = tensor.clone()
        elif ptr is not None:
            seen.add(ptr)
        result[key] = tensor
    return result


# Free bytes below which a failed write is taken as the disk running out (torch.save reports it as a
# RuntimeError "unexpected pos", safetensors as an OSError or a RuntimeError, not always ENOSPC).
DISK_FULL_BYTES = 16 * 1024**2


@contextmanager
def _disk_full_as_input_error(path: Path, tmp: Path) -> Iterator[None]:
    """Turn a write of `tmp` (for `path`) that failed because its disk is full into a one-line InputError.

    Other failures propagate unchanged. atomic_write then removes `tmp`, so `path` stays as it was.
    """
    try:
        yield
    except (OSError, RuntimeError) as exc:
        free = shutil.disk_usage(tmp.parent).free
        out_of_space = isinstance(exc, OSError) and exc.errno == errno.ENOSPC
        if not (out_of_space or free < DISK_FULL_BYTES):
            raise
        written = tmp.stat().st_size if tmp.exists() else 0
        raise InputError(
            f"{path}: the disk ran out of space while writing this checkpoint ({written / 1024**2:.1f} MiB written, "
            f"{free / 1024**2:.1f} MiB free); the file was not changed. Free space on that disk, lower "
            "schedule.keep_last, or move the workspace to a larger disk."
        ) from exc


def save_checkpoint(
    path: str | os.PathLike[str],
    state_dict: Mapping[str, torch.Tensor],
    meta: CheckpointMeta | Mapping[str, Any] | None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write `state_dict` and its metadata to `path` atomically and return the Path written.

    `.safetensors`: tensors plus metadata JSON under `linguaforge` (no `extra` allowed).
    `.pt`/`.pth`: `{"model": state_dict, "linguaforge": meta, **extra}`.
    Raises InputError for an unsupported suffix or when the disk runs out of space (the file at
    `path` is then left as it was), InternalError for extras that would not load with
    weights_only=True or that use the reserved keys.
    """
    path = Path(path)
    meta_dict = _meta_dict(meta)
    suffix = path.suffix.lower()
    if suffix in SAFETENSORS_SUFFIXES:
        if extra:
            raise InternalError(f"{path}: safetensors files hold tensors only; save extras in a .pt file.")
        from safetensors.torch import save_file

        metadata = {META_KEY: json.dumps(meta_dict)} if meta_dict is not None else None
        tensors = _unshare(state_dict)
        with atomic_write(path) as tmp, _disk_full_as_input_error(path, tmp):
            save_file(tensors, str(tmp), metadata=metadata)
        return path
    if suffix in TORCH_SUFFIXES:
        extra = dict(extra or {})
        reserved = {"model", META_KEY} & set(extra)
        if reserved:
            raise InternalError(f"checkpoint extra uses reserved key(s) {', '.join(sorted(reserved))}.")
        _check_plain(extra, "extra")
        payload = {"model": dict(state_dict), META_KEY: meta_dict, **extra}
        with atomic_write(path) as tmp, _disk_full_as_input_error(path, tmp), open(tmp, "wb") as handle:
            torch.save(payload, handle)   # our handle: closed on a failed write, so removing tmp frees its space
        return path
    raise InputError(
        f"{path}: unsupported checkpoint suffix {path.suffix!r}; use .safetensors, .pt or .pth."
    )


def remove_orphaned_saves(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files of checkpoint saves that never finished in `folder`; return them.

    A save writes `.<name>.<random>.tmp` beside `<name>` and renames it when complete
    (`core.fsutil.atomic_write`), so a process killed mid-save leaves that file, a checkpoint's
    worth of disk, behind. Only temporaries of checkpoint names (`.pt`, `.safetensors`, …) are
    removed; call this when no save into `folder` can be running (the trainer, at its start).
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for path in folder.iterdir():
        name = path.name
        if not (name.startswith(".") and name.endswith(".tmp") and path.is_file()):
            continue
        target = name[1:-len(".tmp")].rsplit(".", 1)[0]
        if Path(target).suffix.lower() in SAFETENSORS_SUFFIXES + TORCH_SUFFIXES:
            path.unlink(missing_ok=True)
            removed.append(path)
    return sorted(removed)


def _is_safetensors(path: Path) -> bool:
    with open(path, "rb") as handle:
        head = handle.read(9)
    if len(head) < 9:
        return False
    (header_len,) = struct.unpack("<Q", head[:8])
    if head[8:9] != b"{":
        return False
    size = path.stat().st_size
    if not 0 < header_len < size:
        raise InputError(
            f"{path}: a safetensors file whose header claims {header_len} bytes but the file has {size}. "
            "It is truncated or corrupt; re-copy or re-save it."
        )
    return True


def _load_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            header = handle.metadata() or {}
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except Exception as exc:  # noqa: BLE001 - the Rust reader raises SafetensorError or bare Exceptions
        raise InputError(
            f"{path}: not a readable safetensors file ({exc}). The file may be truncated; re-copy or re-save it."
        ) from exc
    meta = None
    if META_KEY in header:
        try:
            meta = loads_json(header[META_KEY], f"{path}: the `{META_KEY}` metadata")
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: the `{META_KEY}` metadata is not valid JSON ({exc}).") from exc
    return tensors, meta


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _torch_load(path: Path, map_location: str) -> Any:
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = str(exc).strip().splitlines()
        detail = next((line for line in lines if "GLOBAL" in line), None)
        if detail is None:  # not a code payload: bytes that are no pickle at all
            operand = next((line.strip() for line in lines if line.strip().startswith("Unsupported operand")), "")
            raise InputError(
                f"{path}: not a readable PyTorch checkpoint (not a pickle{': ' + operand if operand else ''}). "
                "The file may be truncated or of another format; re-copy or re-save it."
            ) from exc
        raise InputError(
            f"{path}: refused to load: the file needs code execution to unpickle ({detail.strip()}). "
            "It was not executed. Only load checkpoints from sources you trust, converted to "
            "safetensors or a plain state dict."
        ) from exc
    except Exception as exc:  # noqa: BLE001 - any other failure of an untrusted file: it is not a checkpoint
        raise InputError(
            f"{path}: not a readable PyTorch checkpoint ({_first_line(exc)}). "
            "The file may be truncated or of another format; re-copy or re-save it."
        ) from exc


def _is_state_dict(obj: Any) -> bool:
    return isinstance(obj, Mapping) and bool(obj) and any(isinstance(v, torch.Tensor) for v in obj.values())


def _unwrap(path: Path, obj: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None, dict[str, Any]]:
    if not isinstance(obj, Mapping):
        raise InputError(f"{path}: holds a {type(obj).__name__}, not a state dict. Save model.state_dict().")
    meta = obj.get(META_KEY) if isinstance(obj.get(META_KEY), Mapping) else None
    for key in WRAPPER_KEYS:
        if _is_state_dict(obj.get(key)):
            extra = {k: v for k, v in obj.items() if k not in (key, META_KEY)}
            return dict(obj[key]), meta, extra
    if _is_state_dict(obj):
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        return tensors, meta, {k: v for k, v in obj.items() if k not in tensors and k != META_KEY}
    raise InputError(
        f"{path}: no state dict found (top-level keys: {', '.join(map(str, list(obj)[:20])) or 'none'}). "
        "Expected tensors at the top level or under `model` / `state_dict`."
    )


def _clean_keys(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], list[str]]:
    tensors = {k: v for k, v in state_dict.items() if isinstance(v, torch.Tensor)}
    if tensors and all(k.startswith("module.") for k in tensors):
        tensors = {k[len("module."):]: v for k, v in tensors.items()}
    dropped = sorted(k for k in tensors if k in DROPPED_KEYS or k.startswith(DROPPED_PREFIXES))
    return {k: v for k, v in tensors.items() if k not in dropped}, dropped


def load_checkpoint(path: str | os.PathLike[str], map_location: str = "cpu") -> LoadedCheckpoint:
    """Return the checkpoint at `path` with its state dict, metadata, extras and sha256.

    Recognises safetensors by content; everything else loads with torch.load(weights_only=True).
    Raises InputError when the file is missing, truncated, not a checkpoint, needs code execution to
    load (the payload is never run), or carries a `linguaforge` record of the wrong shape (`check_meta`).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: checkpoint file not found. Check the path.")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the checkpoint file is empty. Re-copy or re-save it.")
    if _is_safetensors(path):
        raw, meta = _load_safetensors(path)
        extra: dict[str, Any] = {}
    else:
        raw, meta, extra = _unwrap(path, _torch_load(path, map_location))
    state_dict, dropped = _clean_keys(raw)
    if not state_dict:
        raise InputError(f"{path}: the checkpoint holds no tensors.")
    return LoadedCheckpoint(state_dict, check_meta(path, meta), extra, path, sha256_file(path), dropped)


def tensor_shapes(path: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    """Return {key: shape} of the checkpoint at `path` without reading its weights where the format allows:
    a safetensors header only; a PyTorch file memory-mapped (`weights_only`), unwrapped like `load_checkpoint`.

    Raises InputError like `load_checkpoint` for a file that is not a readable checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: checkpoint not found.")
    if _is_safetensors(path):
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as handle:
                return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
        except Exception as exc:  # noqa: BLE001 - the Rust reader raises SafetensorError or bare Exceptions
            raise InputError(f"{path}: not a readable safetensors file ({exc}); re-copy or pull it again.") from exc
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - not mappable (an old zip layout or no zip at all): the safe full load names why
        obj = _torch_load(path, "cpu")
    state_dict, _, _ = _unwrap(path, obj)
    return {key: tuple(value.shape) for key, value in state_dict.items() if isinstance(value, torch.Tensor)}
