"""Text rows split into frozen rows and trainable new rows.

`SplitEmbedding` and `SplitHead` each hold the first `frozen` rows (and, optionally, the last
`frozen_tail` rows) as buffers — never seen by an optimizer, so weight decay and Adam momentum
cannot move them — and the rows between as Parameters. The tail serves layouts whose extra rows
sit after the vocabulary (IndexTTS's row V). In the state dict they appear as ONE full matrix
under the usual keys (`<prefix>weight`, and `<prefix>bias` for a head with bias), so
checkpoints keep their family's layout no matter where the split sits; loading splits the
matrix again. `from_module` wraps an existing `nn.Embedding` / `nn.Linear` (a published
model's) in place of the original with the same values.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F
from torch import nn


class _SplitRows(nn.Module):
    """Shared machinery: named tensors, each stored as frozen head rows, trainable rows and frozen tail rows."""

    tensor_names: tuple[str, ...] = ()

    def __init__(self, full: dict[str, torch.Tensor], frozen: int, frozen_tail: int = 0) -> None:
        super().__init__()
        self.tensor_names = tuple(full)
        rows = next(iter(full.values())).shape[0]
        if frozen_tail < 0 or not 0 <= frozen <= rows - frozen_tail:
            raise ValueError(f"frozen rows {frozen} + frozen tail {frozen_tail} must be within 0..{rows}")
        self.frozen = frozen
        self.frozen_tail = frozen_tail
        end = rows - frozen_tail
        for name, tensor in full.items():
            self.register_buffer(f"{name}_base", tensor[:frozen].detach().clone(), persistent=False)
            self.register_buffer(f"{name}_tail", tensor[end:].detach().clone(), persistent=False)
            setattr(self, f"{name}_new", nn.Parameter(tensor[frozen:end].detach().clone()))

    @property
    def rows(self) -> int:
        """Return the total number of rows (frozen head + trainable + frozen tail)."""
        return self.frozen + getattr(self, f"{self.tensor_names[0]}_new").shape[0] + self.frozen_tail

    def full(self, name: str) -> torch.Tensor:
        """Return the full matrix `name` (head rows, new rows, tail rows), differentiable in the new rows."""
        base, new, tail = getattr(self, f"{name}_base"), getattr(self, f"{name}_new"), getattr(self, f"{name}_tail")
        if not self.frozen and not self.frozen_tail:
            return new
        return torch.cat([base.to(new.dtype), new, tail.to(new.dtype)], dim=0)

    def base_sha256(self) -> str:
        """Return the sha256 of the frozen rows' bytes (head rows, then tail rows; all tensors, fp32, in name order)."""
        digest = hashlib.sha256()
        for name in self.tensor_names:
            for part in ("base", "tail"):
                digest.update(getattr(self, f"{name}_{part}").detach().float().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()

    def _save_to_state_dict(self, destination, prefix, keep_vars):  # noqa: ANN001 (torch hook)
        for name in self.tensor_names:
            tensor = self.full(name)
            destination[prefix + name] = tensor if keep_vars else tensor.detach()

    def _load_from_state_dict(  # noqa: ANN001, PLR0913 (torch hook signature)
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        end = self.rows - self.frozen_tail
        for name in self.tensor_names:
            key = prefix + name
            if key not in state_dict:
                missing_keys.append(key)
                continue
            value = state_dict[key]
            base, new, tail = getattr(self, f"{name}_base"), getattr(self, f"{name}_new"), getattr(self, f"{name}_tail")
            expected = (self.rows, *new.shape[1:])
            if tuple(value.shape) != expected:
                error_msgs.append(f"{key}: checkpoint shape {tuple(value.shape)}, model expects {expected}")
                continue
            with torch.no_grad():
                base.copy_(value[: self.frozen])
                new.copy_(value[self.frozen : end])
                tail.copy_(value[end:])
        if strict:
            known = {prefix + n for n in self.tensor_names}
            unexpected_keys.extend(k for k in state_dict if k.startswith(prefix) and k not in known)


class SplitEmbedding(_SplitRows):
    """An embedding table [rows, dim] whose first `frozen` (and last `frozen_tail`) rows are fixed."""

    def __init__(self, rows: int, dim: int, frozen: int = 0, frozen_tail: int = 0, weight: torch.Tensor | None = None) -> None:
        super().__init__({"weight": torch.randn(rows, dim) * 0.02 if weight is None else weight}, frozen, frozen_tail)

    @classmethod
    def from_module(cls, embedding: nn.Embedding, frozen: int = 0, frozen_tail: int = 0) -> "SplitEmbedding":
        """Return a SplitEmbedding holding `embedding`'s weight (same values, same device and dtype)."""
        weight = embedding.weight.detach()
        return cls(weight.shape[0], weight.shape[1], frozen, frozen_tail, weight=weight)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Return the rows of `ids`, each read from the part that holds it. The full matrix is never built, so
        a lookup costs what its ids cost and the gradient is the trainable rows' own size, not the table's
        (a large frozen vocabulary, such as GPT-2's 50,276 rows, is neither copied nor given a dense gradient
        at every call). Out-of-range ids raise as `F.embedding` raises."""
        new = self.weight_new
        parts = [(part, start, count) for part, start, count in (
            (self.weight_base, 0, self.frozen), (new, self.frozen, new.shape[0]),
            (self.weight_tail, self.frozen + new.shape[0], self.frozen_tail)) if count]
        out: torch.Tensor | None = None
        for index, (part, start, count) in enumerate(parts):
            local = ids - start if start else ids
            if index:
                local = local.clamp(min=0)
            if index < len(parts) - 1:
                local = local.clamp(max=count - 1)
            rows = F.embedding(local, part.to(new.dtype))
            out = rows if out is None else torch.where(((ids >= start) & (ids < start + count)).unsqueeze(-1), rows, out)
        return out if out is not None else F.embedding(ids, new)


class SplitHead(_SplitRows):
    """An output projection dim → rows (with a bias unless `bias=False`) whose first `frozen`
    (and last `frozen_tail`) rows are fixed."""

    def __init__(
        self, rows: int, dim: int, frozen: int = 0, frozen_tail: int = 0, bias: bool = True,
        weight: torch.Tensor | None = None, bias_value: torch.Tensor | None = None,
    ) -> None:
        tensors = {"weight": torch.randn(rows, dim) * 0.02 if weight is None else weight}
        if bias:
            tensors["bias"] = torch.zeros(rows) if bias_value is None else bias_value
        super().__init__(tensors, frozen, frozen_tail)

    @classmethod
    def from_module(cls, linear: nn.Linear, frozen: int = 0, frozen_tail: int = 0) -> "SplitHead":
        """Return a SplitHead holding `linear`'s weight (and bias, when it has one)."""
        weight = linear.weight.detach()
        bias = linear.bias.detach() if linear.bias is not None else None
        return cls(weight.shape[0], weight.shape[1], frozen, frozen_tail, bias=bias is not None, weight=weight, bias_value=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.full("bias").to(x.dtype) if "bias" in self.tensor_names else None
        return F.linear(x, self.full("weight").to(x.dtype), bias)
