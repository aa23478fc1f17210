"""A text-only causal language model on the GPT backbone (family `linguaforge`, task `lm`).

Sequence: `[bos, ids…, eos]`; the model predicts each next id. The text table and head are
`SplitEmbedding` / `SplitHead`, saved as `text_embedding.weight`, `text_head.weight`,
`text_head.bias` with one row per tokenizer id.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.gpt import GPT, GPTConfig, init_weights, sample_next
from models.losses import head_cross_entropy
from models.rows import SplitEmbedding, SplitHead

IGNORE = -100


@dataclass(kw_only=True)
class LMConfig(GPTConfig):
    """Shape of a language model: the backbone's (`GPTConfig`) and the text table's. `text_rows` equals
    the tokenizer size. Fields are keyword-only."""

    text_rows: int
    max_text_tokens: int = 128
    bos_id: int = 0
    eos_id: int = 1


class GPTLM(nn.Module):
    """Token table + learned positions + GPT backbone + text head."""

    def __init__(self, config: LMConfig, frozen_rows: int = 0) -> None:
        super().__init__()
        self.config = config
        self.text_pos = nn.Embedding(config.max_text_tokens + 2, config.d_model)
        self.gpt = GPT(config)
        self.apply(init_weights)
        self.text_embedding = SplitEmbedding(config.text_rows, config.d_model, frozen_rows)
        self.text_head = SplitHead(config.text_rows, config.d_model, frozen_rows)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Return `logits` [B, T, rows]; with `targets` (IGNORE where padded) instead `loss` (nats/token) and the
        `tokens` it scores, the logits never materialised whole (`models.losses.head_cross_entropy`)."""
        hidden = self._hidden(ids)
        if targets is None:
            return {"logits": self.text_head(hidden)}
        losses, _ = head_cross_entropy(self.text_head, hidden, targets, IGNORE)
        tokens = (targets != IGNORE).sum()
        return {"loss": losses.sum() / tokens, "tokens": tokens}

    def _hidden(self, ids: torch.Tensor, cache=None, offset: int = 0) -> torch.Tensor:  # noqa: ANN001
        positions = torch.arange(offset, offset + ids.shape[1], device=ids.device)
        return self.gpt(self.text_embedding(ids) + self.text_pos(positions), cache)

    @torch.no_grad()
    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> list[int]:
        """Return the ids sampled after `[bos] + prompt`, stopping at eos or the position limit.

        Raises ValueError when the prompt alone exceeds `max_text_tokens`.
        """
        limit = self.config.max_text_tokens + 2
        seq = [self.config.bos_id, *prompt]
        if len(seq) >= limit:
            raise ValueError(f"prompt of {len(prompt)} tokens leaves no room under max_text_tokens")
        device = self.text_pos.weight.device
        cache = self.gpt.new_cache(limit) if use_cache else None
        new: list[int] = []
        step_input = torch.tensor([seq], device=device)
        while len(seq) < limit and len(new) < max_new_tokens:
            if cache is not None:
                hidden = self._hidden(step_input, cache, offset=cache.length)
            else:
                hidden = self._hidden(torch.tensor([seq], device=device))
            logits = self.text_head(hidden[:, -1]).float().cpu()  # sampled on the CPU: a seed means the same on any device
            token = int(sample_next(logits, temperature, top_k, top_p, generator))
            if token == self.config.eos_id:
                break
            seq.append(token)
            new.append(token)
            step_input = torch.tensor([[token]], device=device)
        return new

