"""A decoder-only transformer backbone you can read top to bottom.

Pre-norm blocks (LayerNorm → causal self-attention → residual, LayerNorm → MLP → residual),
attention through `scaled_dot_product_attention` (or an explicit, unfused softmax for the
reference benchmark), and a preallocated `KVCache` for generation. The backbone maps input embeddings
[B, T, D] to hidden states [B, T, D]; token tables, position tables and heads live in the
task models (`models/lm.py`, `models/tts.py`) because their layouts differ.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

ATTENTION_IMPLS = ("sdpa", "naive")


@dataclass
class GPTConfig:
    """Backbone shape. `d_model` must divide by `n_heads`."""

    #: width of every hidden state
    d_model: int = 64
    #: transformer blocks
    n_layers: int = 2
    #: attention heads per block (`d_model / n_heads` dimensions each)
    n_heads: int = 4
    #: dropout on attention and MLP outputs while training
    dropout: float = 0.0
    #: `sdpa` (torch's fused attention) or `naive` (the written-out softmax, for checking it)
    attention: str = "sdpa"

    def to_dict(self) -> dict:
        """Return the config as plain data (checkpoint metadata `model_config`)."""
        return asdict(self)


class KVCache:
    """Keys and values of every layer, written into buffers preallocated for `capacity` positions.

    The buffers are allocated at the first update (when batch, heads, width, dtype and device are
    known), so each decode step writes one position in place instead of copying the whole cache.
    """

    def __init__(self, n_layers: int, capacity: int) -> None:
        self.capacity = capacity
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers
        self.length = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this step's k, v [B, H, T, hd] of `layer` after the cached positions; return k, v so far.

        The last layer's write advances `length`. Raises ValueError when the cache is full.
        """
        start, end = self.length, self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"KV cache of {self.capacity} positions cannot hold {end}")
        if self.keys[layer] is None:
            shape = (k.shape[0], k.shape[1], self.capacity, k.shape[3])
            self.keys[layer] = k.new_empty(shape)
            self.values[layer] = v.new_empty(shape)
        keys, values = self.keys[layer], self.values[layer]
        keys[:, :, start:end] = k
        values[:, :, start:end] = v
        if layer == len(self.keys) - 1:
            self.length = end
        return keys[:, :, :end], values[:, :, :end]


class StaticKVCache:
    """Keys and values of every layer in buffers of one fixed shape, written at a position held on the device.

    Every decode step has the same shapes and reads no value back to the host, so the step can be captured
    as a CUDA graph (`torch.compile(mode="reduce-overhead")`). Attention reads the whole buffer, so its
    caller passes the mask of the positions written so far (`step_mask`); unwritten positions are zeros.
    The caller keeps the steps within `capacity` (a write beyond it is not checked: that would need a sync).
    """

    def __init__(self, n_layers: int, capacity: int, device: torch.device | str) -> None:
        self.capacity = capacity
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers
        self.position = torch.zeros((), dtype=torch.long, device=device)  # positions written (advanced in place)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this step's k, v [B, H, T, hd] of `layer` at `position`; return the whole buffers [B, H, capacity, hd].
        The last layer's write advances `position`."""
        if self.keys[layer] is None:
            shape = (k.shape[0], k.shape[1], self.capacity, k.shape[3])
            self.keys[layer], self.values[layer] = k.new_zeros(shape), v.new_zeros(shape)
        index = self.position + torch.arange(k.shape[2], device=k.device)
        self.keys[layer].index_copy_(2, index, k)
        self.values[layer].index_copy_(2, index, v)
        if layer == len(self.keys) - 1:
            self.position += k.shape[2]
        return self.keys[layer], self.values[layer]


def step_mask(key_valid: torch.Tensor, start: torch.Tensor | int, queries: int) -> torch.Tensor:
    """Return the attention mask [B, 1, queries, S] of `queries` positions from `start` (a device tensor or an int)
    over `key_valid` [B, S] (False: padding): causal over absolute positions, padding hidden; a padding query sees
    itself, so no row is fully masked (which would give NaN)."""
    total = key_valid.shape[1]
    positions = start + torch.arange(queries, device=key_valid.device)
    keys = torch.arange(total, device=key_valid.device)
    mask = (keys[None, :] <= positions[:, None])[None] & key_valid[:, None, :]
    mask |= keys[None, None, :] == positions[None, :, None]
    return mask[:, None]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with an optional KV cache."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.d_model % config.n_heads:
            raise ValueError(f"d_model {config.d_model} is not divisible by n_heads {config.n_heads}")
        if config.attention not in ATTENTION_IMPLS:
            raise ValueError(f"attention {config.attention!r} is not one of {ATTENTION_IMPLS}")
        self.n_heads = config.n_heads
        self.attention = config.attention
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self, x: torch.Tensor, cache: KVCache | StaticKVCache | None = None, layer: int = 0, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Return the attention output of `x` [B, T, D].

        Without `mask` attention is causal: a whole sequence uses `is_causal` (so the flash and
        memory-efficient kernels apply), a continuation of the cache a bottom-right causal mask.
        `mask` [B, 1, T, S] (True = attend) replaces that, e.g. to hide left padding.
        """
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            if isinstance(cache, StaticKVCache) and mask is None:
                raise ValueError("a StaticKVCache step needs the mask of the positions written (step_mask)")
            k, v = cache.update(layer, k, v)
        S = k.shape[2]
        causal = mask is None and T > 1 and S == T
        if mask is None and T > 1 and S > T:
            # Query i (absolute position S - T + i) sees keys 0 .. S - T + i.
            mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            if causal:
                mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril()
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            y = scores.softmax(dim=-1) @ v
        return self.dropout(self.proj(y.transpose(1, 2).reshape(B, T, D)))


class MLP(nn.Module):
    """Position-wise feed-forward layer, 4× wide, GELU."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.d_model, 4 * config.d_model)
        self.proj = nn.Linear(4 * config.d_model, config.d_model)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """One pre-norm transformer block."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache, layer, mask)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """The stack of blocks plus a final LayerNorm: embeddings [B, T, D] → hidden [B, T, D].

    With `activation_checkpointing` set (a run option, not part of the shape) training keeps only
    each block's input and recomputes the block in the backward pass: less memory, ~30 % more compute.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.activation_checkpointing = False

    def new_cache(self, capacity: int, static: bool = False) -> KVCache | StaticKVCache:
        """Return an empty KV cache for up to `capacity` positions of this backbone; `static`: one of fixed shape
        written at a device-held position (`StaticKVCache`, on the backbone's device)."""
        if static:
            return StaticKVCache(self.config.n_layers, capacity, self.ln_f.weight.device)
        return KVCache(self.config.n_layers, capacity)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Return the hidden states of `x`; with `cache`, `x` continues the cached sequence.

        `mask` [B, 1, T, S] (True = attend) replaces the causal mask (see CausalSelfAttention).
        """
        recompute = self.activation_checkpointing and self.training and cache is None and torch.is_grad_enabled()
        for i, block in enumerate(self.blocks):
            if recompute:
                x = checkpoint(block, x, None, i, mask, use_reentrant=False)
            else:
                x = block(x, cache, i, mask)
        return self.ln_f(x)


def init_weights(module: nn.Module) -> None:
    """GPT-2 style initialisation: normal(0, 0.02) weights, zero biases, unit LayerNorm."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Return one sampled id per row of `logits` [B, V] as a [B] tensor.

    `temperature` 0 means greedy (argmax). `top_k` keeps the k most likely ids, `top_p` the
    smallest set whose probability reaches p. Raises ValueError on a negative temperature or
    a top_p outside (0, 1].
    """
    if temperature < 0:
        raise ValueError(f"temperature {temperature} must be ≥ 0")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p {top_p} must be in (0, 1]")
    logits = logits.float()
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None and top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative - sorted_logits.softmax(dim=-1) >= top_p  # keep the first id always
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
