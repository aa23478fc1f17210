"""A compact GPT text-to-speech model (family `linguaforge`, task `tts`), laid out as IndexTTS.

Each sequence is
    `[conditioning latents] [start_text, text ids…, stop_text] [start_speech, codes…, stop_speech]`
The conditioning latents come from a small encoder over the reference clip's mel frames.
Text positions and speech positions have their own tables (`max_text_tokens + 2` and
`max_speech_tokens + 2` rows). With `progress_alignment` each text and speech position also
carries its *progress* — its fraction of the way through the text or the speech — through one
shared sinusoidal encoding, and each speech position also gets the embedding of the text token
at the same progress (`aligned_text_index`: the alignment if every text token lasted equally
long). So the model starts from a rough alignment that attention only has to refine, which a
small model learns from little data and few steps (docs/benchmarks.md, "Quickstart"); E2/F5-TTS
condition on the total duration the same way. Generation then needs the speech length in advance:
`speech_rate`, a running mean of codes per text position kept while training, estimates it.
Speech codes `0 … codebook_size - 1` come from the codec;
`start_speech = codebook_size` and `stop_speech = codebook_size + 1`, as in IndexTTS.
Losses: `text_loss` (next text id), `mel_loss` (next speech code, stop included), metric
`mel_top1` (accuracy of the argmax code).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from models.gpt import GPT, GPTConfig, init_weights, sample_next, step_mask
from models.losses import head_cross_entropy
from models.rows import SplitEmbedding, SplitHead

PAD, TEXT, SPEECH = 0, 1, 2  # layout_kind values


@dataclass(kw_only=True)
class TTSConfig(GPTConfig):
    """Shape of a TTS model: the backbone's (`GPTConfig`), the reference encoder's and the tables'.
    `text_rows` equals the tokenizer size; codes come from the codec. Fields are keyword-only."""

    #: text embedding and head rows (the tokenizer size)
    text_rows: int
    #: speech codes (the codec's codebook); two more rows start and stop speech
    codebook_size: int
    #: log-mel bands of the reference clip the speaker latents are made from
    n_mels: int = 80
    #: speaker latents the reference encoder makes (the conditioning prefix)
    n_latents: int = 4
    #: text and speech position tables (the longest text and speech a sample may have)
    max_text_tokens: int = 128
    max_speech_tokens: int = 256
    #: the text ids that wrap a sample's text
    start_text: int = 0
    stop_text: int = 1
    #: add each position's progress and the text token at a speech position's progress (module docstring)
    progress_alignment: bool = False

    @property
    def start_speech(self) -> int:
        """Return the id of the start-of-speech token (one past the last code)."""
        return self.codebook_size

    @property
    def stop_speech(self) -> int:
        """Return the id of the end-of-speech token."""
        return self.codebook_size + 1


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


class ProgressEncoding(nn.Module):
    """Progress in [0, 1] (a fraction of the text or the speech) [...] → a learned map of its sinusoids [..., D].

    The sinusoids have periods from 3 % to 1200 % of the sequence, so nearby fractions look alike
    and any two fractions can be told apart; one map serves text and speech, which makes equal
    progress easy for attention to match.
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        half = d_model // 2
        periods = 0.03 * (400.0 ** (torch.arange(half) / max(half - 1, 1)))
        self.register_buffer("angular", 2 * math.pi / periods, persistent=False)
        self.proj = nn.Linear(2 * half, d_model, bias=False)

    def forward(self, progress: torch.Tensor) -> torch.Tensor:
        angles = progress.float()[..., None] * self.angular
        return self.proj(torch.cat([angles.sin(), angles.cos()], dim=-1))


class GPTTTS(nn.Module):
    """Reference encoder + text and speech tables + GPT backbone + text and speech heads."""

    def __init__(self, config: TTSConfig, frozen_rows: int = 0) -> None:
        super().__init__()
        self.config = config
        D = config.d_model
        self.reference = ReferenceEncoder(config.n_mels, D, config.n_latents, config.n_heads)
        self.text_pos = nn.Embedding(config.max_text_tokens + 2, D)
        self.mel_embedding = nn.Embedding(config.codebook_size + 2, D)
        self.mel_pos = nn.Embedding(config.max_speech_tokens + 2, D)
        self.gpt = GPT(config)
        self.mel_head = nn.Linear(D, config.codebook_size + 2)
        if config.progress_alignment:
            self.progress = ProgressEncoding(D)
            #: codes per text position (start and stop included), a running mean over training batches
            self.register_buffer("speech_rate", torch.zeros(()))
        self.apply(init_weights)
        self.text_embedding = SplitEmbedding(config.text_rows, D, frozen_rows)
        self.text_head = SplitHead(config.text_rows, D, frozen_rows)

    def _text_sequence(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        device = self.text_pos.weight.device
        ids = torch.as_tensor(ids, dtype=torch.long, device=device)
        c = self.config
        return torch.cat([ids.new_tensor([c.start_text]), ids, ids.new_tensor([c.stop_text])])

    def _embed_text(self, seq: torch.Tensor) -> torch.Tensor:
        at = torch.arange(len(seq), device=seq.device)
        embedded = self.text_embedding(seq) + self.text_pos(at)
        if self.config.progress_alignment:
            embedded = embedded + self.progress(at / (len(seq) - 1))
        return embedded

    def _embed_start_speech(self) -> torch.Tensor:
        """Return the embedding [1, D] of `start_speech` at speech position 0 (progress 0)."""
        c, device = self.config, self.mel_pos.weight.device
        embedded = self.mel_embedding.weight[c.start_speech] + self.mel_pos.weight[0]
        if c.progress_alignment:
            start_text = torch.tensor(c.start_text, device=device)
            embedded = embedded + self.progress(torch.zeros((), device=device)) + self.text_embedding(start_text)
        return embedded[None]

    def expected_codes(self, text_ids: list[int], limit: int) -> int:
        """Return the speech length (codes) generation aims at for `text_ids`: `speech_rate` × text
        positions, between 1 and `limit`. Raises ValueError when the model has no progress alignment
        or never trained (rate 0)."""
        if not self.config.progress_alignment:
            raise ValueError("this model has no progress alignment, so it needs no expected length")
        rate = float(self.speech_rate)
        if rate <= 0:
            raise ValueError("speech_rate is 0: the model never trained, so it cannot estimate a speech length")
        return max(1, min(limit, round(rate * (len(text_ids) + 2))))

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Return `text_loss`, `mel_loss`, `mel_top1` (means) and the tokens they score, `text_tokens` and
        `mel_tokens`, for a collated batch.

        `batch` holds `text_ids` [B, Lt] and `codes` [B, Ls] (right-padded), their lengths
        `text_lengths`, `code_lengths`, and `ref_mel` [B, F, n_mels] with `ref_lengths`; with the
        keys of `sequence_layout` (the trainer's collate adds them on the host) the step needs no
        device-to-host sync. Logits are computed only at the positions a loss scores.
        """
        if "layout_ids" not in batch:
            lengths = batch["text_lengths"].tolist(), batch["code_lengths"].tolist()
            layout = sequence_layout(batch["text_ids"].cpu(), lengths[0], batch["codes"].cpu(), lengths[1], self.config)
            batch = {**batch, **{k: v.to(batch["text_ids"].device) for k, v in layout.items()}}
        cond = self.reference(batch["ref_mel"], batch["ref_lengths"])
        ids, pos, kind = batch["layout_ids"], batch["layout_pos"], batch["layout_kind"]
        is_text = (kind == TEXT)[..., None]
        text = self.text_embedding(torch.where(kind == TEXT, ids, 0)) + self.text_pos(torch.where(kind == TEXT, pos, 0))
        speech = self.mel_embedding(torch.where(kind == SPEECH, ids, 0)) + self.mel_pos(torch.where(kind == SPEECH, pos, 0))
        body = torch.where(is_text, text, speech)
        if self.config.progress_alignment:
            body = body + self.progress(batch["layout_progress"])
            aligned = self.text_embedding(batch["layout_aligned"]) * (kind == SPEECH)[..., None].to(text.dtype)
            body = body + aligned
            if self.training:
                self._track_speech_rate(batch["text_lengths"], batch["code_lengths"])
        body = body * (kind != PAD)[..., None].to(text.dtype)
        hidden = self.gpt(torch.cat([cond, body.to(cond.dtype)], dim=1)).flatten(0, 1)
        text_losses, _ = head_cross_entropy(self.text_head, hidden.index_select(0, batch["text_index"]), batch["text_targets"])
        mel_targets = batch["mel_targets"]
        mel_losses, mel_best = head_cross_entropy(self.mel_head, hidden.index_select(0, batch["mel_index"]), mel_targets)
        return {
            "text_loss": text_losses.mean(),
            "mel_loss": mel_losses.mean(),
            "mel_top1": (mel_best == mel_targets).float().mean(),
            "text_tokens": torch.tensor(batch["text_index"].numel(), device=mel_targets.device),
            "mel_tokens": torch.tensor(mel_targets.numel(), device=mel_targets.device),
        }

    @torch.no_grad()
    def _track_speech_rate(self, text_lengths: torch.Tensor, code_lengths: torch.Tensor) -> None:
        """Move `speech_rate` towards this batch's codes per text position (on the device, no sync).

        Under several processes (torch.distributed initialised) the batch is the global one: the
        counts are summed over the ranks, as SyncBatchNorm sums its statistics, so every rank keeps
        the same rate, the one a single process on the whole batch keeps.
        """
        counts = torch.stack([code_lengths.sum(), (text_lengths + 2).sum()]).float()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(counts)
        batch_rate = counts[0] / counts[1]
        rate = self.speech_rate
        rate.copy_(torch.where(rate > 0, 0.98 * rate + 0.02 * batch_rate, batch_rate))

    @torch.no_grad()
    def generate(self, text_ids: list[int], ref_mel: torch.Tensor | None = None, min_codes: int = 0,
                 **sampling: Any) -> list[int]:
        """Return speech codes for `text_ids` conditioned on `ref_mel` [F, n_mels] (or none): `generate_batch`
        of this one text, with its options `sampling` (temperature, top_k, top_p, max_codes, use_cache, generator).

        Stops at `stop_speech` (never before `min_codes` codes), at `max_codes` or at
        `max_speech_tokens`; with progress alignment it aims at `expected_codes`. Raises ValueError
        when the text exceeds `max_text_tokens`.
        """
        return self.generate_batch([text_ids], ref_mel, min_codes=[min_codes], **sampling)[0]

    @torch.no_grad()
    def generate_batch(self, texts: list[list[int]], ref_mel: torch.Tensor | None = None, *sampling: Any,
                       **options: Any) -> list[list[int]]:
        """Return the speech codes of several texts generated together, one list per text: `generate_steps`
        (its sampling options: temperature, top_k, top_p, max_codes, use_cache, generator, min_codes) collected.

        All texts share the reference `ref_mel` [F, n_mels]. Prompts are left-padded (padding is
        masked out of attention); each text stops at its own `stop_speech`, never before its
        `min_codes`. Sampling runs on the CPU with `generator` (a CPU generator), so a seed gives
        the same codes on any device, and one text alone gives what `generate` gives.
        Raises ValueError when a text exceeds `max_text_tokens`.
        """
        codes: list[list[int]] = [[] for _ in texts]
        for step in self.generate_steps(texts, ref_mel, *sampling, **options):
            for row, code in enumerate(step):
                if code is not None:
                    codes[row].append(code)
        return codes

    @torch.no_grad()
    def generate_steps(
        self,
        texts: list[list[int]],
        ref_mel: torch.Tensor | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        max_codes: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
        min_codes: list[int] | None = None,
        dropped: set[int] | None = None,
        static_cache: bool | None = None,
        compiled_step: bool = False,
    ) -> Iterator[list[int | None]]:
        """Yield, once per decoding step of `generate_batch`, each text's new code (None: the text has
        stopped). Rows the caller adds to `dropped` (a set it may grow between steps) count as stopped;
        generation ends when every row has stopped. Raises ValueError when a text exceeds `max_text_tokens`.

        With `use_cache` on CUDA (or `static_cache=True`) the KV cache is a `StaticKVCache`: every per-token step
        has the same shapes and reads nothing back but the sampled codes, so `compiled_step` runs it as one
        `torch.compile(mode="reduce-overhead")` graph (CUDA graphs). The codes equal those of the growing cache
        the CPU keeps by default, where it is faster (tests/test_fast_decoder.py; bench/generate.py).
        """
        c = self.config
        for ids in texts:
            if len(ids) > c.max_text_tokens:
                raise ValueError(f"text of {len(ids)} tokens exceeds max_text_tokens {c.max_text_tokens}")
        minimum = list(min_codes or [0] * len(texts))
        limit = min(max_codes or c.max_speech_tokens, c.max_speech_tokens)
        device = self.text_pos.weight.device
        mel = None if ref_mel is None else ref_mel.to(device).float().unsqueeze(0)
        cond = self.reference(mel)[0]
        start = self._embed_start_speech()
        prompts = [torch.cat([cond, self._embed_text(self._text_sequence(ids)), start]) for ids in texts]
        width = max(len(p) for p in prompts)
        padding = [width - len(p) for p in prompts]
        inputs = torch.stack([F.pad(p, (0, 0, pad, 0)) for p, pad in zip(prompts, padding)])
        key_valid = torch.ones(len(texts), width + limit, dtype=torch.bool, device=device)
        for b, pad in enumerate(padding):
            key_valid[b, :pad] = False
        padded = any(padding)
        static = use_cache and (device.type == "cuda" if static_cache is None else static_cache)
        cache = self.gpt.new_cache(width + limit, static=static) if use_cache else None
        backbone = torch.compile(self.gpt, mode="reduce-overhead", dynamic=False) if static and compiled_step else self.gpt
        counts = [0] * len(texts)
        done = [False] * len(texts)
        dropped = dropped if dropped is not None else set()
        stop_allowed = torch.tensor([[float("-inf")]] * len(texts))
        allowed = torch.full((len(texts), c.codebook_size + 2), float("-inf"))
        allowed[:, : c.codebook_size] = 0.0
        expected = [self.expected_codes(ids, limit) for ids in texts] if c.progress_alignment else None
        if expected is not None:
            text_seqs = torch.nn.utils.rnn.pad_sequence([self._text_sequence(ids) for ids in texts], batch_first=True)
            text_lengths = torch.tensor([len(ids) + 2 for ids in texts], device=device)
        step_input = inputs
        for step in range(limit):
            total, queries = width + step, step_input.shape[1]
            if static:  # the whole buffer, masked to the positions written: the same shapes at every step
                hidden = (backbone if step else self.gpt)(step_input, cache, step_mask(key_valid, cache.position, queries))[:, -1]
            else:
                mask = step_mask(key_valid[:, :total], total - queries, queries) if padded else None
                hidden = self.gpt(step_input, cache, mask)[:, -1]
            for b in range(len(texts)):
                stop_allowed[b, 0] = 0.0 if counts[b] >= minimum[b] else float("-inf")
            allowed[:, c.stop_speech] = stop_allowed[:, 0]
            chosen = sample_next(self.mel_head(hidden).float().cpu() + allowed, temperature, top_k, top_p, generator)
            new: list[int | None] = [None] * len(texts)
            for b, code in enumerate(chosen.tolist()):
                if done[b] or b in dropped:
                    done[b] = True
                elif code == c.stop_speech:
                    done[b] = True
                else:
                    counts[b] += 1
                    new[b] = code
            yield new
            done = [d or b in dropped for b, d in enumerate(done)]
            if all(done):
                break
            embedded = self.mel_embedding(chosen.to(device)) + self.mel_pos.weight[step + 1]
            if expected is not None:
                progress = (step + 1) / (torch.tensor(expected, device=device) + 1)
                at = aligned_text_index(progress, text_lengths)
                embedded = embedded + self.progress(progress) + self.text_embedding(text_seqs.gather(1, at[:, None])[:, 0])
            embedded = embedded.unsqueeze(1)
            step_input = embedded if cache is not None else torch.cat([step_input, embedded], dim=1)


def aligned_text_index(progress: torch.Tensor, text_positions: torch.Tensor | int) -> torch.Tensor:
    """Return the text position (0 … text_positions - 1, start and stop included) at `progress`
    in [0, 1] if every text position lasted equally long."""
    return (progress * text_positions).floor().long().clamp(max=torch.as_tensor(text_positions) - 1)


def sequence_layout(
    text_ids: torch.Tensor, text_lengths: list[int], codes: torch.Tensor, code_lengths: list[int], config: TTSConfig
) -> dict[str, torch.Tensor]:
    """Return where each sample's tokens go in the training sequence (after the conditioning latents).

    Body of sample b: `[start_text, text…, stop_text, start_speech, codes…]`, right-padded.
    Keys: `layout_ids`, `layout_pos` (row in the text or speech position table), `layout_kind`
    (PAD / TEXT / SPEECH), `layout_progress` (the position's fraction of its text or speech),
    `layout_aligned` (at a speech position, the text id at the same progress; 0 elsewhere) [B, Tb];
    `text_index` / `mel_index` (flat positions in [B, n_latents + Tb] whose hidden state predicts a
    token) with `text_targets` / `mel_targets`. Built on the host,
    so the model never has to read lengths back from the device.
    """
    lt = torch.as_tensor(text_lengths, dtype=torch.long)[:, None]
    lc = torch.as_tensor(code_lengths, dtype=torch.long)[:, None]
    batch = lt.shape[0]
    body = lt + 3 + lc
    width = int(body.max())
    j = torch.arange(width)[None, :]
    s = j - (lt + 2)
    text_vals = text_ids.long().gather(1, (j - 1).clamp(0, max(text_ids.shape[1] - 1, 0)).expand(batch, -1)) \
        if text_ids.shape[1] else torch.zeros(batch, width, dtype=torch.long)
    text_vals = torch.where(j == 0, config.start_text, torch.where(j == lt + 1, config.stop_text, text_vals))
    code_vals = codes.long().gather(1, (s - 1).clamp(0, max(codes.shape[1] - 1, 0))) \
        if codes.shape[1] else torch.zeros(batch, width, dtype=torch.long)
    speech_vals = torch.where(s == 0, config.start_speech, code_vals)
    is_text, valid = j < lt + 2, j < body
    kind = torch.where(valid, torch.where(is_text, TEXT, SPEECH), PAD).to(torch.uint8)
    ids = torch.where(valid, torch.where(is_text, text_vals, speech_vals), 0)
    pos = torch.where(valid, torch.where(is_text, j, s), 0)
    progress = torch.where(valid, torch.where(is_text, j / (lt + 1), s / (lc + 1)), 0.0)
    at = aligned_text_index(s.clamp(min=0) / (lc + 1), lt + 2)
    aligned = torch.where(valid & ~is_text, text_vals.gather(1, at), 0)
    following = torch.cat([ids[:, 1:], torch.zeros(batch, 1, dtype=torch.long)], dim=1)
    flat = torch.arange(batch)[:, None] * (config.n_latents + width) + config.n_latents + j
    text_at = j < lt + 1
    mel_at = (s >= 0) & valid
    mel_targets = torch.where(s == lc, config.stop_speech, following)
    return {
        "layout_ids": ids, "layout_pos": pos, "layout_kind": kind, "layout_progress": progress,
        "layout_aligned": aligned,
        "text_index": flat[text_at], "text_targets": following[text_at],
        "mel_index": flat[mel_at], "mel_targets": mel_targets[mel_at],
    }
