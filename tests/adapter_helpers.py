"""LoRA checks shared by the family adapter tests: exact resume, and merged vs unmerged models."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from core.checkpoint import load_checkpoint
from core.families.registry import get_model_family
from core.training.adapter import full_weights, inject_lora, load_lora, merged_state_dict
from core.training.run_config import AdapterConfig

LORA = {"kind": "lora", "rank": 4, "alpha": 8.0, "dropout": 0.0}


def assert_same_trained_tensors(straight: Path, resumed: Path) -> None:
    """Assert two adapter checkpoints hold the same tensors (names, and values within float tolerance)."""
    a, b = load_checkpoint(straight).state_dict, load_checkpoint(resumed).state_dict
    assert set(a) == set(b)
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6), (key, (a[key] - b[key]).abs().max())


def assert_adapter_only(checkpoint: Path, text_keys: set[str]) -> dict[str, Any]:
    """Assert the adapter checkpoint holds LoRA matrices and the trained text rows only; return its record."""
    saved = load_checkpoint(checkpoint)
    keys = set(saved.state_dict)
    lora = {k for k in keys if ".lora_" in k}
    assert lora and keys - lora == text_keys
    assert any(saved.state_dict[k].abs().sum() > 0 for k in lora if "lora_B" in k)  # B starts at zero: it trained
    return saved.meta["adapter"]


def merged_and_adapted(checkpoint: Path, base: Path, family_name: str, build_published: Callable[[int], torch.nn.Module],
                       model_config: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Return (the published class loaded strictly with the merged state dict, the LinguaForge model with the
    unmerged peft adapter) for an adapter checkpoint; both in eval mode."""
    saved, base_loaded = load_checkpoint(checkpoint), load_checkpoint(base)
    record = saved.meta["adapter"]
    published = build_published(saved.meta["rows"])
    published.load_state_dict(merged_state_dict(base_loaded.state_dict, saved.state_dict, record), strict=True)
    family = get_model_family(family_name)
    adapted = family.build_model(model_config, record["frozen_rows"])
    family.load_weights(adapted, full_weights(base_loaded.state_dict, saved.state_dict, record["frozen_rows"]), "base",
                        _Sized(saved.meta["tokenizer_size"]))
    inject_lora(adapted, family, AdapterConfig(**{k: record[k] for k in ("kind", "rank", "alpha", "dropout", "targets")}), "test")
    load_lora(adapted, saved.state_dict, "test")
    return published.eval(), adapted.eval()


class _Sized:
    """The tokenizer facts `ModelFamily.load_weights` reads (its size and path)."""

    def __init__(self, size: int) -> None:
        self.size, self.path = size, "checkpoint tokenizer"


def assert_close_logits(got: torch.Tensor, want: torch.Tensor) -> None:
    """Assert merged and unmerged logits agree within float tolerance (and are not trivially zero)."""
    assert got.abs().max() > 0
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()

