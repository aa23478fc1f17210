"""Text rows split into a frozen base and trainable new rows.

`SplitEmbedding` and `SplitHead` each hold the first `frozen` rows as buffers (never seen by
an optimizer, so weight decay and Adam momentum cannot move them) and the remaining rows as
Parameters. In the state dict they appear as ONE full matrix under the usual keys
(`<prefix>weight`, and `<prefix>bias` for the head), so checkpoints keep the layout of the
`linguaforge` family no matter where the split sits; loading splits the matrix again.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F
from torch import nn


class _SplitRows(nn.Module):
    """Shared machinery: named tensors, each stored as a frozen head plus trainable rows."""

    tensor_names: tuple[str, ...] = ()

    def __init__(self, full: dict[str, torch.Tensor], frozen: int) -> None:
        super().__init__()
        rows = next(iter(full.values())).shape[0]
        if not 0 <= frozen <= rows:
            raise ValueError(f"frozen rows {frozen} must be within 0..{rows}")
        self.frozen = frozen
        for name, tensor in full.items():
            self.register_buffer(f"{name}_base", tensor[:frozen].detach().clone(), persistent=False)
            setattr(self, f"{name}_new", nn.Parameter(tensor[frozen:].detach().clone()))

    @property
    def rows(self) -> int:
        """Return the total number of rows (frozen + trainable)."""
        return self.frozen + getattr(self, f"{self.tensor_names[0]}_new").shape[0]

    def full(self, name: str) -> torch.Tensor:
        """Return the full matrix `name` (frozen rows first), differentiable in the new rows."""
        base, new = getattr(self, f"{name}_base"), getattr(self, f"{name}_new")
        return torch.cat([base.to(new.dtype), new], dim=0) if self.frozen else new

    def base_sha256(self) -> str:
        """Return the sha256 of the frozen rows' bytes (all tensors, fp32, in name order)."""
        digest = hashlib.sha256()
        for name in self.tensor_names:
            digest.update(getattr(self, f"{name}_base").detach().float().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()

    def _save_to_state_dict(self, destination, prefix, keep_vars):  # noqa: ANN001 (torch hook)
        for name in self.tensor_names:
            tensor = self.full(name)
            destination[prefix + name] = tensor if keep_vars else tensor.detach()

    def _load_from_state_dict(  # noqa: ANN001, PLR0913 (torch hook signature)
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        for name in self.tensor_names:
            key = prefix + name
            if key not in state_dict:
                missing_keys.append(key)
                continue
            value = state_dict[key]
            base, new = getattr(self, f"{name}_base"), getattr(self, f"{name}_new")
            expected = (self.rows, *new.shape[1:])
            if tuple(value.shape) != expected:
                error_msgs.append(f"{key}: checkpoint shape {tuple(value.shape)}, model expects {expected}")
                continue
            with torch.no_grad():
                base.copy_(value[: self.frozen])
                new.copy_(value[self.frozen :])
        if strict:
            known = {prefix + n for n in self.tensor_names}
            unexpected_keys.extend(k for k in state_dict if k.startswith(prefix) and k not in known)


class SplitEmbedding(_SplitRows):
    """An embedding table [rows, dim] whose first `frozen` rows are fixed."""

    tensor_names = ("weight",)

    def __init__(self, rows: int, dim: int, frozen: int = 0) -> None:
        super().__init__({"weight": torch.randn(rows, dim) * 0.02}, frozen)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.full("weight"))


class SplitHead(_SplitRows):
    """An output projection dim → rows with bias whose first `frozen` rows are fixed."""

    tensor_names = ("weight", "bias")

    def __init__(self, rows: int, dim: int, frozen: int = 0) -> None:
        super().__init__({"weight": torch.randn(rows, dim) * 0.02, "bias": torch.zeros(rows)}, frozen)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.full("weight").to(x.dtype), self.full("bias").to(x.dtype))

