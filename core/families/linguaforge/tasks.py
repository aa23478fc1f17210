"""LinguaForge's own models, what differs between the LM and TTS tasks: data, collation, loss and metrics.

`build_task_data(run, model_config, cache_dir)` returns a `TaskData` whose `forward(module, batch)`
returns the task's losses and metrics (`core.families.contract.Scored`): the LM's `loss`, the TTS's
`text_loss`, `mel_loss` and `mel_top1`, weighted by `loss.text_weight` / `loss.mel_weight`.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from core.data.splits import TRAIN, VAL, split_of
from core.errors import InputError
from core.families.base import FamilyRun
from core.families.contract import SampleSet, Scored, TaskData, special_ids
from core.text import normalize_text
from core.tokenizers.tokenizer import Tokenizer

IGNORE = -100


def load_text_corpus(
    paths: list[Path], tokenizer: Tokenizer, max_text_tokens: int, val_ratio: float
) -> dict[str, SampleSet]:
    """Return `{"train", "val"}` SampleSets of `[bos, ids…, eos]` lines from UTF-8 text files.

    Lines are normalised and split by a hash of `file:line`. Lines longer than
    `max_text_tokens` are filtered and counted. `n_bytes` counts each line's UTF-8 bytes plus
    one for its line break (what eos stands for), for bits per byte.
    Raises InputError when a file is missing, not UTF-8, or no line survives.
    """
    bos, eos = special_ids(tokenizer)
    seqs: dict[str, list[list[int]]] = {TRAIN: [], VAL: []}
    n_bytes = {TRAIN: 0, VAL: 0}
    filtered = {TRAIN: 0, VAL: 0}
    for path in paths:
        if not path.is_file():
            raise InputError(f"{path}: corpus file not found. Fix data.corpus in the run config.")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text ({exc}). Save the corpus as UTF-8.") from exc
        for number, line in enumerate(lines, 1):
            text = normalize_text(line)
            if not text:
                continue
            split = split_of(f"{path.name}:{number}", val_ratio)
            ids = tokenizer.encode(text)
            if len(ids) > max_text_tokens:
                filtered[split] += 1
                continue
            seqs[split].append([bos, *ids, eos])
            n_bytes[split] += len(text.encode("utf-8")) + 1
    if not seqs[TRAIN]:
        raise InputError(
            f"no training line in {', '.join(map(str, paths))} fits max_text_tokens {max_text_tokens} "
            f"({filtered[TRAIN]} filtered). Add text or raise model.max_text_tokens."
        )
    return {
        split: SampleSet([len(s) - 1 for s in seqs[split]], seqs[split].__getitem__, n_bytes[split], filtered[split])
        for split in (TRAIN, VAL)
    }


def collate_lm(samples: list[list[int]], pad_id: int) -> dict[str, Any]:
    """Return `ids` [B, T] (inputs), `targets` [B, T] (IGNORE at padding) and `n_tokens` (an int)."""
    inputs = pad_sequence([torch.tensor(s[:-1]) for s in samples], batch_first=True, padding_value=pad_id)
    targets = pad_sequence([torch.tensor(s[1:]) for s in samples], batch_first=True, padding_value=IGNORE)
    return {"ids": inputs, "targets": targets, "n_tokens": sum(len(s) - 1 for s in samples)}


def collate_tts(samples: list[dict[str, torch.Tensor]], model_config: Any = None) -> dict[str, Any]:
    """Return the padded TTS batch (`text_ids`, `codes`, `ref_mel` and their lengths) and `n_tokens`.

    With `model_config` (a TTSConfig) the batch also carries the model's `sequence_layout`, built
    here on the host so the training step never reads lengths back from the device.
    """
    def pad(key: str) -> tuple[torch.Tensor, list[int]]:
        tensors = [torch.as_tensor(s[key]) for s in samples]
        return pad_sequence(tensors, batch_first=True), [len(t) for t in tensors]

    text, text_lengths = pad("text_ids")
    codes, code_lengths = pad("codes")
    mel, mel_lengths = pad("ref_mel")
    batch: dict[str, Any] = {
        "text_ids": text.long(), "text_lengths": torch.tensor(text_lengths), "codes": codes.long(),
        "code_lengths": torch.tensor(code_lengths), "ref_mel": mel.float(), "ref_lengths": torch.tensor(mel_lengths),
        # scored positions: every text id plus stop_text, every code plus stop_speech
        "n_tokens": sum(text_lengths) + sum(code_lengths) + 2 * len(samples),
    }
    if model_config is not None:
        from models.tts import sequence_layout

        batch.update(sequence_layout(text, text_lengths, codes, code_lengths, model_config))
    return batch


def lm_forward(module: nn.Module, batch: dict[str, torch.Tensor]) -> Scored:
    """Return `loss` (nats per token) of a GPTLM on a collated batch, with the tokens it scores."""
    out = module(batch["ids"], batch["targets"])
    return {"loss": (out["loss"], out["tokens"])}


def tts_forward(module: nn.Module, batch: dict[str, torch.Tensor]) -> Scored:
    """Return `text_loss`, `mel_loss` and `mel_top1` of a GPTTTS on a collated batch, with the tokens each scores."""
    out = module(batch)
    return {"text_loss": (out["text_loss"], out["text_tokens"]), "mel_loss": (out["mel_loss"], out["mel_tokens"]),
            "mel_top1": (out["mel_top1"], out["mel_tokens"])}


def _lm_data(run: FamilyRun, model_config: Any) -> TaskData:
    if not run.corpus:
        raise InputError(f"{run.source}: task lm needs data.corpus (a list of UTF-8 text files).")
    splits = load_text_corpus(run.corpus, run.tokenizer, model_config.max_text_tokens, run.val_ratio)
    train = splits["train"]
    tokens = sum(train.lengths)
    _, eos = special_ids(run.tokenizer)
    return TaskData(train, splits["val"], partial(collate_lm, pad_id=eos), lm_forward, {"loss": 1.0},
                    tokens / max(train.n_bytes, 1))


def build_task_data(run: FamilyRun, model_config: Any, cache_dir: Path | None) -> TaskData:
    """Return the TaskData of the run's task (tts reads the preprocessing cache at `cache_dir`).

    Raises InputError when the data section does not fit the task or the data cannot be read.
    """
    if run.task == "lm":
        return _lm_data(run, model_config)
    from core.families.linguaforge.data import tts_samples

    splits = tts_samples(run, model_config, cache_dir)
    return TaskData(splits["train"], splits["val"], partial(collate_tts, model_config=model_config), tts_forward,
                    {"text_loss": run.text_weight, "mel_loss": run.mel_weight})
