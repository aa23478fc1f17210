"""LoRA adapters through peft: inject, what trains, adapter checkpoints, merge, peft export.

A run with `adapter: {kind: lora, …}` loads its base weights as any run does, then
`inject_lora` puts peft LoRA layers (`peft.inject_adapter_in_model`) on the target modules —
the run's `adapter.targets`, else the family's `lora_targets` — and leaves trainable only the
LoRA matrices and the trainable text rows (the new rows below `freeze`, all rows with
`freeze.mode: none`); frozen base rows stay buffers, so they are bit-identical as in any run.

An adapter checkpoint holds only what trained (`trained_tensors`: parameter names such as
`gpt.blocks.0.attn.qkv.lora_A.default.weight` and `text_embedding.weight_new`) plus the usual
metadata, whose `adapter` record names the base checkpoint, its sha256, the frozen row count and
how each target module multiplies (`linear` or GPT-2's transposed `conv1d`). `full_weights` rebuilds
the published-shape state dict of the base with the trained rows in place (what a resume loads,
and what a vocabulary-growth resume extends); `merged_state_dict` adds each LoRA product through
peft's own `merge()`; `write_peft_adapter` writes `adapter_model.safetensors` + `adapter_config.json`
for `PeftModel.from_pretrained`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import torch
from torch import nn

from core.errors import InputError
from core.fsutil import atomic_write, atomic_write_text

if TYPE_CHECKING:
    from core.families.base import ModelFamily
    from core.training.run_config import AdapterConfig

ADAPTER_NAME = "default"
LORA_MARK = ".lora_"


def adapter_targets(family: "ModelFamily", adapter: "AdapterConfig") -> list[str]:
    """Return the module names that get LoRA: the run's `adapter.targets`, else the family's defaults."""
    return list(adapter.targets) or list(family.lora_targets)


def matches(name: str, target: str) -> bool:
    """Return True when module `name` is `target` or ends with `.target` (peft's rule for a list of targets)."""
    return name == target or name.endswith(f".{target}")


def missing_targets(module_names: list[str], targets: list[str]) -> list[str]:
    """Return the targets that name no module among `module_names`."""
    return [t for t in targets if not any(matches(name, t) for name in module_names)]


def target_modules_of_keys(keys: list[str]) -> list[str]:
    """Return the module names of a state dict's `.weight` keys (what a model built from it holds)."""
    return [key[: -len(".weight")] for key in keys if key.endswith(".weight")]


def _kind(module: nn.Module) -> str:
    from transformers.pytorch_utils import Conv1D

    return "conv1d" if isinstance(module, Conv1D) else "linear"


def inject_lora(model: nn.Module, family: "ModelFamily", adapter: "AdapterConfig", source: str) -> dict[str, Any]:
    """Put LoRA layers on `model`'s target modules (in place) and leave only them and the trainable text rows trainable.

    Returns the adapter record (`kind`, `rank`, `alpha`, `dropout`, `targets`, `modules`: {module name:
    `linear` | `conv1d`}). Raises InputError naming `adapter.targets` when a target matches no module
    of the model, or one peft cannot adapt.
    """
    from peft import LoraConfig, inject_adapter_in_model

    targets = adapter_targets(family, adapter)
    names = [name for name, _ in model.named_modules()]
    missing = missing_targets(names, targets)
    if missing:
        raise InputError(f"{source}: adapter.targets {missing} match no module of this {family.name} model; "
                         f"its defaults are {list(family.lora_targets)} (module names or name suffixes).")
    modules = {name: _kind(module) for name, module in model.named_modules() if any(matches(name, t) for t in targets)}
    config = LoraConfig(r=adapter.rank, lora_alpha=adapter.alpha, lora_dropout=adapter.dropout, target_modules=targets,
                        fan_in_fan_out="conv1d" in modules.values())
    try:
        inject_adapter_in_model(config, model, adapter_name=ADAPTER_NAME)
    except ValueError as exc:
        raise InputError(f"{source}: adapter.targets {targets}: {str(exc).splitlines()[0]}") from exc
    prefixes, unused = family.text_row_prefixes(model), family.unused_prefixes()
    for name, param in model.named_parameters():
        param.requires_grad = (LORA_MARK in name or name.startswith(prefixes)) and not name.startswith(unused)
    return {"kind": "lora", "rank": adapter.rank, "alpha": adapter.alpha, "dropout": adapter.dropout,
            "targets": targets, "modules": modules}


def trained_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Return {parameter name: tensor} of every trainable parameter: what an adapter checkpoint holds."""
    return {name: param.detach() for name, param in model.named_parameters() if param.requires_grad}


def lora_tensors(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Return the LoRA matrices among `tensors` (keys `<module>.lora_A.default.weight` / `lora_B`)."""
    return {key: value for key, value in tensors.items() if LORA_MARK in key}


def load_lora(model: nn.Module, tensors: Mapping[str, torch.Tensor], source: str) -> None:
    """Copy the LoRA matrices of `tensors` into the adapted `model`.

    Raises InputError when the checkpoint's LoRA matrices and the model's differ in names or shapes
    (another rank or other targets than this run's).
    """
    params = {name: p for name, p in model.named_parameters() if LORA_MARK in name}
    saved = lora_tensors(tensors)
    if set(saved) != set(params) or any(saved[k].shape != params[k].shape for k in saved):
        raise InputError(f"{source}: its LoRA matrices do not fit this run's adapter (rank, targets); "
                         "resume with the adapter settings the checkpoint was trained with.")
    with torch.no_grad():
        for key, value in saved.items():
            params[key].copy_(value)


def row_keys(trained: Mapping[str, torch.Tensor]) -> list[str]:
    """Return the published keys (`text_emb.weight`, …) of the text-row tensors whose rows `trained` holds (`<key>_new`)."""
    return [name[: -len("_new")] for name in trained if LORA_MARK not in name and name.endswith("_new")]


def full_weights(base: Mapping[str, torch.Tensor], trained: Mapping[str, torch.Tensor], frozen_rows: int) -> dict[str, torch.Tensor]:
    """Return the base state dict with the trained text rows of an adapter checkpoint in place.

    `trained` holds `<key>_new` for each trained text-row tensor `<key>` (rows `frozen_rows`… of it,
    the layout's extra rows after them staying the base's). Raises InputError when the base has
    no such key or too few rows.
    """
    full = dict(base)
    for key in row_keys(trained):
        name, rows = f"{key}_new", trained[f"{key}_new"]
        if key not in base or base[key].shape[0] < frozen_rows + rows.shape[0]:
            raise InputError(f"adapter checkpoint row tensor {name} does not fit the base checkpoint ({key}); "
                             "use the base checkpoint the adapter was trained on.")
        old = base[key]
        full[key] = torch.cat([old[:frozen_rows], rows.to(old.dtype), old[frozen_rows + rows.shape[0]:]])
    return full


def _merged_module(weight: torch.Tensor, bias: torch.Tensor | None, kind: str, lora_a: torch.Tensor,
                   lora_b: torch.Tensor, record: Mapping[str, Any]) -> torch.Tensor:
    """Return `weight` with its LoRA product added, through a peft LoRA layer's own `merge()`."""
    from peft import LoraConfig
    from peft.tuners.lora import Linear as LoraLinear

    if kind == "conv1d":
        from transformers.pytorch_utils import Conv1D

        base = Conv1D(weight.shape[1], weight.shape[0])
    else:
        base = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        base.weight.copy_(weight)
        if bias is not None:
            base.bias.copy_(bias)
    rank, conv = int(record["rank"]), kind == "conv1d"
    config = LoraConfig(r=rank, lora_alpha=record["alpha"], fan_in_fan_out=conv)
    layer = LoraLinear(base, ADAPTER_NAME, config, r=rank, lora_alpha=record["alpha"], fan_in_fan_out=conv,
                       is_target_conv_1d_layer=conv)
    with torch.no_grad():
        layer.lora_A[ADAPTER_NAME].weight.copy_(lora_a)
        layer.lora_B[ADAPTER_NAME].weight.copy_(lora_b)
    layer.merge()
    return layer.get_base_layer().weight.detach().clone()


def merged_state_dict(base: Mapping[str, torch.Tensor], trained: Mapping[str, torch.Tensor], record: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Return the published-shape state dict of an adapter checkpoint: base weights, trained rows, LoRA merged.

    Raises InputError when a target module's weight is missing from the base.
    """
    full = full_weights(base, trained, int(record["frozen_rows"]))
    for module, kind in record["modules"].items():
        key = f"{module}.weight"
        if key not in full:
            raise InputError(f"base checkpoint has no {key} for the adapter's target {module}; use the adapter's base checkpoint.")
        full[key] = _merged_module(full[key].float(), full.get(f"{module}.bias"), kind,
                                   trained[f"{module}.lora_A.{ADAPTER_NAME}.weight"],
                                   trained[f"{module}.lora_B.{ADAPTER_NAME}.weight"], record).to(full[key].dtype)
    return full


def write_peft_adapter(trained: Mapping[str, torch.Tensor], record: Mapping[str, Any], output_dir: Path,
                       base_model: str | None) -> list[Path]:
    """Write `adapter_model.safetensors` and `adapter_config.json` (peft's layout: keys
    `base_model.model.<module>.lora_A.weight`) into `output_dir`; return the two paths. Both files are written
    through `atomic_write` (a temporary file renamed over the name), never through a link already there."""
    import json

    from peft import LoraConfig
    from safetensors.torch import save_file

    output_dir.mkdir(parents=True, exist_ok=True)
    tensors = {f"base_model.model.{key.replace(f'.{ADAPTER_NAME}.', '.')}": value.contiguous()
               for key, value in lora_tensors(trained).items()}
    weights = output_dir / "adapter_model.safetensors"
    with atomic_write(weights) as tmp:
        save_file(tensors, str(tmp))
    config = LoraConfig(r=int(record["rank"]), lora_alpha=record["alpha"], lora_dropout=record["dropout"],
                        target_modules=list(record["targets"]), fan_in_fan_out="conv1d" in record["modules"].values(),
                        base_model_name_or_path=base_model)
    # peft's `save_pretrained` writes with open(path, "w"), which follows a link; the same JSON, written atomically
    fields = {key: sorted(value) if isinstance(value, set) else value for key, value in config.to_dict().items()}
    config_path = atomic_write_text(output_dir / "adapter_config.json", json.dumps(fields, indent=2, sort_keys=True))
    return [weights, config_path]


def export_merged(checkpoint: Path, output_dir: Path, name: str | None, settings: Any) -> list[Path]:
    """`export --merge` of an adapter checkpoint: write `merged.safetensors` (the published-shape state dict,
    LoRA merged, with its LinguaForge metadata), the family's native files made from it (model families),
    and `peft_adapter/` (`adapter_model.safetensors`, `adapter_config.json`, and `text_rows.safetensors`:
    the full trained text rows under the published keys); return the written paths.

    Raises InputError when the checkpoint is no adapter checkpoint, or its base checkpoint is missing,
    outside the allowed folders or not the file the adapter was trained on (sha256).
    """
    import dataclasses

    from core.checkpoint import CheckpointMeta, load_checkpoint, save_checkpoint
    from core.families.registry import get_model_family
    from safetensors.torch import save_file

    loaded = load_checkpoint(checkpoint)
    meta = dict(loaded.meta or {})
    record = meta.get("adapter")
    if not record:
        raise InputError(f"--merge: {checkpoint} is not an adapter checkpoint (no adapter record); export it without --merge.")
    base_path = settings.check_inside_roots(record["base_checkpoint"], model_folders=True)
    if not base_path.is_file():
        raise InputError(f"{checkpoint}: its base checkpoint {base_path} is missing; the adapter is merged into it.")
    base = load_checkpoint(base_path)
    if base.sha256 != record["base_sha256"]:
        raise InputError(f"{checkpoint}: the base checkpoint {base_path} changed since training (sha256 {base.sha256}, "
                         f"recorded {record['base_sha256']}); merge into the original base.")
    merged = merged_state_dict(base.state_dict, loaded.state_dict, record)
    meta_record = dataclasses.replace(CheckpointMeta.from_dict(meta), adapter=None, parent=loaded.sha256)
    written = [save_checkpoint(output_dir / "merged.safetensors", merged, meta_record)]
    if meta.get("family") not in (None, "linguaforge"):
        written += get_model_family(meta["family"]).export(written[0], output_dir, name, settings)
    peft_dir = output_dir / "peft_adapter"
    written += write_peft_adapter(loaded.state_dict, record, peft_dir, str(base_path))
    rows = {key: merged[key].contiguous() for key in row_keys(loaded.state_dict)}
    with atomic_write(peft_dir / "text_rows.safetensors") as tmp:
        save_file(rows, str(tmp))
    return [*written, peft_dir / "text_rows.safetensors"]
