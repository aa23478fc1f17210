"""Training IndexTTS2's GPT: split text rows, prompt-paired samples from the cache, IndexTTS2's loss.

The loss is IndexTTS2's own teacher-forced step on the sequence layout every decoder uses
(`core.families.indextts.layout`): conditioning = the prompt's 32 speaker latents + its emotion
vector, then the two duration embeddings (34 positions); text wrapped in start 0 / stop 1, codes
in start 8192 / stop 8193, each sample's speech right after its own text and padding only after
its own speech. Loss = text_weight × text CE + mel_weight × code CE, each the mean over the
batch's scored tokens (every text id and code plus one stop each; padding is never scored and,
coming after a sample's last token, never seen by its real positions).

`build_trainable_gpt` returns the published `UnifiedVoice` with one added call, `model(batch=…)`, that
computes these losses: the trainer calls it through the module it hands the forward (the DDP
wrapper under `torchrun`), so the gradients are reduced over the ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from core.families.indextts.gpt import ROWS
from core.data.feature_cache import load_item, open_cache
from core.data.pairs import load_pairs
from core.families.indextts.features import CACHE_FORMAT
from core.families.indextts.layout import IGNORE, collate_layouts, layout_hidden, layout_sample
from core.families.contract import SampleSet, Scored
from models.losses import head_cross_entropy


def split_text_rows(model: nn.Module, frozen_rows: int) -> nn.Module:
    """Return `model` with `text_embedding` / `text_head` replaced by split modules.

    Rows below `frozen_rows` and the extra row at the end (never indexed) are frozen buffers;
    the rows between are Parameters. The state dict keeps IndexTTS2's keys and shapes.
    """
    from models.rows import SplitEmbedding, SplitHead

    model.text_embedding = SplitEmbedding.from_module(model.text_embedding, frozen_rows, ROWS.row_offset)
    model.text_head = SplitHead.from_module(model.text_head, frozen_rows, ROWS.row_offset)
    return model


def token_losses(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Return per-position cross-entropies of a `collate_indextts` batch: `text` [B, Lt] and `mel` [B, Lm]
    (0 where the target is IGNORE), the masks `text_scored` / `mel_scored` and `mel_hit` (argmax == target)."""
    text_hidden, speech_hidden = layout_hidden(model, batch)
    text_targets, speech_targets = batch["text_targets"], batch["speech_targets"]
    text, _ = head_cross_entropy(model.text_head, text_hidden, text_targets, IGNORE)
    mel, mel_best = head_cross_entropy(model.mel_head, speech_hidden, speech_targets, IGNORE)
    return {
        "text": text, "mel": mel, "text_scored": text_targets != IGNORE, "mel_scored": speech_targets != IGNORE,
        "mel_hit": mel_best == speech_targets,
    }


def sample_losses(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Return each sample's (text loss [B], code loss [B]): the mean cross-entropy over its own scored tokens."""
    losses = token_losses(model, batch)
    text = losses["text"].sum(1) / losses["text_scored"].sum(1)
    mel = losses["mel"].sum(1) / losses["mel_scored"].sum(1)
    return text, mel


def training_losses(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Return `text_loss`, `mel_loss` and `mel_top1` (means over the batch's scored tokens) and the tokens they
    score, `text_tokens` and `mel_tokens`, of a `collate_indextts` batch on the bare UnifiedVoice `model`."""
    losses = token_losses(model, batch)
    text_scored, mel_scored = losses["text_scored"], losses["mel_scored"]
    text_tokens, mel_tokens = text_scored.sum(), mel_scored.sum()
    return {
        "text_loss": losses["text"].sum() / text_tokens,
        "mel_loss": losses["mel"].sum() / mel_tokens,
        "mel_top1": losses["mel_hit"][mel_scored].float().mean().detach(),
        "text_tokens": text_tokens,
        "mel_tokens": mel_tokens,
    }


def _trainable_unified_voice_class() -> type:
    from indextts.gpt.model_v2 import UnifiedVoice

    class LinguaForgeUnifiedVoice(UnifiedVoice):
        """IndexTTS2's UnifiedVoice with a training forward: `model(batch=…)` returns `training_losses`.

        Any other call is the published forward; the state-dict keys are UnifiedVoice's.
        """

        def forward(self, *args: Any, batch: Mapping[str, torch.Tensor] | None = None, **kwargs: Any) -> Any:  # noqa: D102
            if batch is None:
                return super().forward(*args, **kwargs)
            return training_losses(self, batch)

    return LinguaForgeUnifiedVoice


_LINGUAFORGE_UNIFIED_VOICE: type | None = None


def build_trainable_gpt(kwargs: Mapping[str, Any], frozen_rows: int) -> nn.Module:
    """Return a random-initialised `LinguaForgeUnifiedVoice(**kwargs)` (a UnifiedVoice) whose first `frozen_rows`
    text rows and the extra row are frozen buffers (`split_text_rows`)."""
    global _LINGUAFORGE_UNIFIED_VOICE
    if _LINGUAFORGE_UNIFIED_VOICE is None:
        _LINGUAFORGE_UNIFIED_VOICE = _trainable_unified_voice_class()
    return split_text_rows(_LINGUAFORGE_UNIFIED_VOICE(**dict(kwargs)), frozen_rows)


def indextts_forward(module: nn.Module, batch: Mapping[str, torch.Tensor]) -> Scored:
    """Return `text_loss`, `mel_loss` and `mel_top1` of a LinguaForgeUnifiedVoice (or its DDP wrapper) on one
    collated batch, with the tokens each scores."""
    out = module(batch=batch)
    return {"text_loss": (out["text_loss"], out["text_tokens"]), "mel_loss": (out["mel_loss"], out["mel_tokens"]),
            "mel_top1": (out["mel_top1"], out["mel_tokens"])}


def collate_indextts(samples: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """Return the padded batch of `collate_layouts`: each sample laid out by `layout_sample` (target text
    and codes) after its prompt's 32 latents + emotion vector."""
    layouts = [layout_sample(s["text_ids"], s["codes"]) for s in samples]
    condition = torch.stack([torch.as_tensor(s["condition"]) for s in samples])
    emo_vec = torch.stack([torch.as_tensor(s["emo_vec"]) for s in samples])
    return collate_layouts(layouts, condition, emo_vec)


def paired_samples(cache_dir: str | Path, max_text_tokens: int, max_mel_tokens: int) -> dict[str, SampleSet]:
    """Return `{"train", "val"}` SampleSets of (target text + codes, prompt latents + emotion) from an IndexTTS2 cache.

    Each target takes its first prompt from `pairs.json`; targets without a prompt (single-clip
    speakers) or longer than the position tables are left out and counted in `filtered`.
    """
    cache_dir = Path(cache_dir)
    index = open_cache(cache_dir, (CACHE_FORMAT,)).data
    pairs = load_pairs(cache_dir)
    by_id = {item["id"]: item for item in index["items"]}
    splits: dict[str, dict[str, Any]] = {s: {"entries": [], "filtered": 0} for s in ("train", "val")}
    for item in index["items"]:
        split = splits[item["split"]]
        prompts = pairs.get(item["id"])
        if not prompts or item["n_text"] > max_text_tokens or item["n_codes"] > max_mel_tokens:
            split["filtered"] += 1
            continue
        split["entries"].append((item, by_id[prompts[0]]))

    def loader(entries: list[tuple[dict, dict]]):
        def load(i: int) -> dict[str, np.ndarray]:
            target, prompt = entries[i]
            t, p = load_item(cache_dir, target), load_item(cache_dir, prompt)
            return {"text_ids": t["text_ids"], "codes": t["codes"], "condition": p["condition"], "emo_vec": p["emo_vec"]}

        return load

    return {
        name: SampleSet(
            lengths=[t["n_text"] + t["n_codes"] for t, _ in split["entries"]],
            load=loader(split["entries"]),
            filtered=split["filtered"],
            extra={"languages": [t.get("language") for t, _ in split["entries"]]},
        )
        for name, split in splits.items()
    }
