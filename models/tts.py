"""A compact GPT text-to-speech model (family `linguaforge`, task `tts`), laid out as IndexTTS.

Each sequence is
    [conditioning latents] [start_text, text ids…, stop_text] [start_speech, codes…, stop_speech]
The conditioning latents come from a small encoder over the reference clip's mel frames.
Text positions and speech positions have their own tables (`max_text_tokens + 2` and
`max_speech_tokens + 2` rows). Speech codes `0 … codebook_size - 1` come from the codec;
`start_speech = codebook_size` and `stop_speech = codebook_size + 1`, as in IndexTTS.
Losses: `text_loss` (next text id), `mel_loss` (next speech code, stop included), metric
`mel_top1` (accuracy of the argmax code).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from models.gpt import GPT, GPTConfig, KVCache, init_weights, sample_next
from models.rows import SplitEmbedding, SplitHead

IGNORE = -100


@dataclass
class TTSConfig:
    """Shape of a TTS model. `text_rows` equals the tokenizer size; codes come from the codec."""

    text_rows: int
    codebook_size: int
    n_mels: int = 80
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_latents: int = 4
    max_text_tokens: int = 128
    max_speech_tokens: int = 256
    start_text: int = 0
    stop_text: int = 1
    dropout: float = 0.0
    attention: str = "sdpa"

    @property
    def start_speech(self) -> int:
        """Return the id of the start-of-speech token (one past the last code)."""
        return self.codebook_size

    @property
    def stop_speech(self) -> int:
        """Return the id of the end-of-speech token."""
        return self.codebook_size + 1

    def to_dict(self) -> dict:
        """Return the config as plain data (checkpoint metadata `model_config`)."""
        return asdict(self)


class ReferenceEncoder(nn.Module):
    """Mel frames [B, F, n_mels] → `n_latents` conditioning vectors [B, n_latents, D]."""

    def __init__(self, n_mels: int, d_model: int, n_latents: int, n_heads: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv1d(n_mels, d_model, 3, padding=1), nn.GELU(), nn.Conv1d(d_model, d_model, 3, padding=1)
        )
        self.latents = nn.Parameter(torch.randn(n_latents, d_model) * 0.02)
        self.pool = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, mel: torch.Tensor | None, lengths: torch.Tensor | None = None, batch: int = 1) -> torch.Tensor:
        """Return the latents; without `mel` (no reference) the learned default latents."""
        queries = self.latents.unsqueeze(0).expand(batch if mel is None else mel.shape[0], -1, -1)
        if mel is None:
            return self.norm(queries)
        frames = self.conv(mel.transpose(1, 2)).transpose(1, 2)
        padding = None
        if lengths is not None:
            padding = torch.arange(mel.shape[1], device=mel.device)[None, :] >= lengths[:, None]
        pooled, _ = self.pool(queries, frames, frames, key_padding_mask=padding, need_weights=False)
        return self.norm(queries + pooled)


class GPTTTS(nn.Module):
    """Reference encoder + text and speech tables + GPT backbone + text and speech heads."""

    def __init__(self, config: TTSConfig, frozen_rows: int = 0) -> None:
        super().__init__()
        self.config = config
        D = config.d_model
        gpt = GPTConfig(D, config.n_layers, config.n_heads, config.dropout, config.attention)
        self.reference = ReferenceEncoder(config.n_mels, D, config.n_latents, config.n_heads)
        self.text_pos = nn.Embedding(config.max_text_tokens + 2, D)
        self.mel_embedding = nn.Embedding(config.codebook_size + 2, D)
        self.mel_pos = nn.Embedding(config.max_speech_tokens + 2, D)
        self.gpt = GPT(gpt)
        self.mel_head = nn.Linear(D, config.codebook_size + 2)
        self.apply(init_weights)
        self.text_embedding = SplitEmbedding(config.text_rows, D, frozen_rows)
        self.text_head = SplitHead(config.text_rows, D, frozen_rows)

    def _text_sequence(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        device = self.text_pos.weight.device
        ids = torch.as_tensor(ids, dtype=torch.long, device=device)
        c = self.config
        return torch.cat([ids.new_tensor([c.start_text]), ids, ids.new_tensor([c.stop_text])])

    def _speech_sequence(self, codes: torch.Tensor) -> torch.Tensor:
        c = self.config
        return torch.cat([codes.new_tensor([c.start_speech]), codes, codes.new_tensor([c.stop_speech])])

    def _embed_text(self, seq: torch.Tensor) -> torch.Tensor:
        return self.text_embedding(seq) + self.text_pos(torch.arange(len(seq), device=seq.device))

    def _embed_speech(self, seq: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return self.mel_embedding(seq) + self.mel_pos(torch.arange(offset, offset + len(seq), device=seq.device))

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Return `text_loss`, `mel_loss`, `mel_top1` and token counts for a collated batch.

        `batch` holds `text_ids` [B, Lt] and `codes` [B, Ls] (right-padded), their lengths
        `text_lengths`, `code_lengths`, and `ref_mel` [B, F, n_mels] with `ref_lengths`.
        """
        cond = self.reference(batch["ref_mel"], batch["ref_lengths"])
        n_cond = cond.shape[1]
        inputs, text_targets, mel_targets = [], [], []
        for b in range(cond.shape[0]):
            text = self._text_sequence(batch["text_ids"][b, : batch["text_lengths"][b]])
            speech = self._speech_sequence(batch["codes"][b, : batch["code_lengths"][b]])
            inputs.append(torch.cat([cond[b], self._embed_text(text), self._embed_speech(speech[:-1])]))
            # Position of each token's prediction = position of the token before it.
            text_target = torch.full((len(inputs[-1]),), IGNORE, device=text.device)
            text_target[n_cond : n_cond + len(text) - 1] = text[1:]
            mel_target = torch.full_like(text_target, IGNORE)
            mel_target[n_cond + len(text) :] = speech[1:]
            text_targets.append(text_target)
            mel_targets.append(mel_target)
        hidden = self.gpt(pad_sequence(inputs, batch_first=True))
        text_targets = pad_sequence(text_targets, batch_first=True, padding_value=IGNORE)
        mel_targets = pad_sequence(mel_targets, batch_first=True, padding_value=IGNORE)
        text_at, mel_at = text_targets != IGNORE, mel_targets != IGNORE
        text_logits = self.text_head(hidden[text_at]).float()
        mel_logits = self.mel_head(hidden[mel_at]).float()
        return {
            "text_loss": F.cross_entropy(text_logits, text_targets[text_at]),
            "mel_loss": F.cross_entropy(mel_logits, mel_targets[mel_at]),
            "mel_top1": (mel_logits.argmax(-1) == mel_targets[mel_at]).float().mean(),
            "tokens": text_at.sum() + mel_at.sum(),
        }

    @torch.no_grad()
    def generate(
        self,
        text_ids: list[int],
        ref_mel: torch.Tensor | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        max_codes: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
        min_codes: int = 0,
    ) -> list[int]:
        """Return speech codes for `text_ids` conditioned on `ref_mel` [F, n_mels] (or none).

        Stops at `stop_speech` (never before `min_codes` codes), at `max_codes` or at
        `max_speech_tokens`. Raises ValueError when the text exceeds `max_text_tokens`.
        """
        c = self.config
        if len(text_ids) > c.max_text_tokens:
            raise ValueError(f"text of {len(text_ids)} tokens exceeds max_text_tokens {c.max_text_tokens}")
        limit = min(max_codes or c.max_speech_tokens, c.max_speech_tokens)
        device = self.text_pos.weight.device
        mel = None if ref_mel is None else ref_mel.to(device).float().unsqueeze(0)
        cond = self.reference(mel)[0]
        start = torch.tensor([c.start_speech], device=device)
        cache: KVCache | None = self.gpt.new_cache() if use_cache else None
        step_input = torch.cat([cond, self._embed_text(self._text_sequence(text_ids)), self._embed_speech(start)])
        codes: list[int] = []
        allowed = torch.full((c.codebook_size + 2,), float("-inf"), device=device)
        allowed[: c.codebook_size] = 0.0
        while len(codes) < limit:
            hidden = self.gpt(step_input.unsqueeze(0), cache)[0, -1]
            allowed[c.stop_speech] = 0.0 if len(codes) >= min_codes else float("-inf")
            code = int(sample_next((self.mel_head(hidden) + allowed).unsqueeze(0), temperature, top_k, top_p, generator))
            if code == c.stop_speech:
                break
            codes.append(code)
            embedded = self._embed_speech(torch.tensor([code], device=device), offset=len(codes))
            step_input = embedded if cache is not None else torch.cat([step_input, embedded])
        return codes
