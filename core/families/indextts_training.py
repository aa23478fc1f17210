"""Training IndexTTS2's GPT: split text rows, prompt-paired samples from the cache, IndexTTS2's loss.

The loss is IndexTTS2's own teacher-forced step: conditioning = the prompt's 32 speaker latents +
its emotion vector, then the two duration embeddings (34 positions); text and semantic codes are
wrapped by `build_aligned_inputs_and_targets` (text start 0 / stop 1, codes start 8192 / stop
8193) and `get_logits` gives both heads' logits. Loss = text_weight × text CE + mel_weight ×
code CE, each over the real tokens plus one stop (padding beyond that is ignored).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.families.indextts import ROW_OFFSET
from core.families.indextts_features import load_item, load_pairs, open_features
from core.training.data import SampleSet

IGNORE = -100


def split_text_rows(model: nn.Module, frozen_rows: int) -> nn.Module:
    """Return `model` with `text_embedding` / `text_head` replaced by split modules.

    Rows below `frozen_rows` and the extra row at the end (never indexed) are frozen buffers;
    the rows between are Parameters. The state dict keeps IndexTTS2's keys and shapes.
    """
    from models.rows import SplitEmbedding, SplitHead

    model.text_embedding = SplitEmbedding.from_module(model.text_embedding, frozen_rows, ROW_OFFSET)
    model.text_head = SplitHead.from_module(model.text_head, frozen_rows, ROW_OFFSET)
    return model


def freeze_conditioning(model: nn.Module) -> None:
    """Freeze the modules whose outputs come from the cache (conditioning and emotion encoders)."""
    for name in ("conditioning_encoder", "perceiver_encoder", "emo_conditioning_encoder", "emo_perceiver_encoder", "emovec_layer", "emo_layer"):
        module = getattr(model, name, None)
        if module is not None:
            for param in module.parameters():
                param.requires_grad = False


def _aligned(values: torch.Tensor, lengths: torch.Tensor, start: int, stop: int, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    padded = values.clone()
    positions = torch.arange(padded.shape[1], device=padded.device)
    padded[positions.unsqueeze(0) >= lengths.unsqueeze(1)] = stop
    padded = F.pad(padded, (0, 1), value=stop)
    inputs, targets = model.build_aligned_inputs_and_targets(padded, start, stop)
    beyond = torch.arange(targets.shape[1], device=targets.device).unsqueeze(0) > lengths.unsqueeze(1)
    return inputs, targets.masked_fill(beyond, IGNORE)


def conditioning_prefix(model: nn.Module, condition: torch.Tensor, emo_vec: torch.Tensor) -> torch.Tensor:
    """Return the 34 conditioning positions IndexTTS2 puts before the text: latents + emotion, then the duration embeddings."""
    zeros = torch.zeros(condition.shape[0], dtype=torch.long, device=condition.device)
    duration = model.speed_emb(zeros)
    duration_half = model.speed_emb(torch.ones_like(zeros))
    return torch.cat([condition + emo_vec.unsqueeze(1), duration_half.unsqueeze(1), duration.unsqueeze(1)], dim=1)


def indextts_forward(model: nn.Module, batch: Mapping[str, torch.Tensor], text_weight: float, mel_weight: float) -> dict[str, torch.Tensor]:
    """Return `loss`, `text_loss`, `mel_loss`, `mel_top1` and `tokens` of one collated batch."""
    conds = conditioning_prefix(model, batch["condition"], batch["emo_vec"])
    text_in, text_target = _aligned(batch["text_ids"], batch["text_lengths"], model.start_text_token, model.stop_text_token, model)
    code_in, code_target = _aligned(batch["codes"], batch["code_lengths"], model.start_mel_token, model.stop_mel_token, model)
    text_emb = model.text_embedding(text_in) + model.text_pos_embedding(text_in)
    mel_emb = model.mel_embedding(code_in) + model.mel_pos_embedding(code_in)
    text_logits, mel_logits = model.get_logits(conds, text_emb, model.text_head, mel_emb, model.mel_head)
    text_loss = F.cross_entropy(text_logits.float(), text_target, ignore_index=IGNORE)
    mel_loss = F.cross_entropy(mel_logits.float(), code_target, ignore_index=IGNORE)
    valid = code_target != IGNORE
    top1 = (mel_logits.argmax(dim=1)[valid] == code_target[valid]).float().mean()
    return {
        "loss": text_weight * text_loss + mel_weight * mel_loss,
        "text_loss": text_loss.detach(),
        "mel_loss": mel_loss.detach(),
        "mel_top1": top1.detach(),
        "tokens": torch.tensor(int(valid.sum()) + int((text_target != IGNORE).sum())),
    }


def collate_indextts(samples: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """Return the padded batch: text ids, codes (with lengths), prompt latents [B, 32, D] and emotion vectors [B, D]."""
    from torch.nn.utils.rnn import pad_sequence

    def pad(key: str) -> tuple[torch.Tensor, torch.Tensor]:
        tensors = [torch.as_tensor(s[key]).long() for s in samples]
        return pad_sequence(tensors, batch_first=True), torch.tensor([len(t) for t in tensors])

    text, text_lengths = pad("text_ids")
    codes, code_lengths = pad("codes")
    return {
        "text_ids": text, "text_lengths": text_lengths, "codes": codes, "code_lengths": code_lengths,
        "condition": torch.stack([torch.as_tensor(s["condition"]) for s in samples]).float(),
        "emo_vec": torch.stack([torch.as_tensor(s["emo_vec"]) for s in samples]).float(),
    }


def paired_samples(cache_dir: str | Path, max_text_tokens: int, max_mel_tokens: int) -> dict[str, SampleSet]:
    """Return `{"train", "val"}` SampleSets of (target text + codes, prompt latents + emotion) from an IndexTTS2 cache.

    Each target takes its first prompt from `pairs.json`; targets without a prompt (single-clip
    speakers) or longer than the position tables are left out and counted in `filtered`.
    """
    cache_dir = Path(cache_dir)
    index = open_features(cache_dir)
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
        )
        for name, split in splits.items()
    }
