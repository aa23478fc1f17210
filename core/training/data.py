"""Training data: samples, length-bucketed batches with a resumable position, and collation.

`Batcher` cuts each epoch into batches of similar length (a seeded shuffle, then sorting within
windows of 50 batches, then a shuffle of the batch order), so padding stays small; it reports
the padding share. Its position (epoch, batch index) is saved in checkpoints, so a resumed run
sees exactly the batches an uninterrupted run would. With several processes each rank takes
every world-th batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch.nn.utils.rnn import pad_sequence

from core.errors import InputError
from core.data.splits import TRAIN, VAL, split_of
from core.text import normalize_text
from core.tokenizers.tokenizer import Tokenizer

IGNORE = -100
BUCKET_WINDOW = 50


@dataclass
class SampleSet:
    """The samples of one split: `items[i]` is loaded by `load(i)`, `lengths[i]` is its token count."""

    lengths: list[int]
    load: Callable[[int], Any]
    n_bytes: int = 0
    filtered: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.lengths)


def special_ids(tokenizer: Tokenizer) -> tuple[int, int]:
    """Return (start, stop) text ids: the tokenizer's bos/eos, else 0 and 1 (the IndexTTS convention)."""
    bos = tokenizer.bos_id if tokenizer.bos_id is not None else 0
    eos = tokenizer.eos_id if tokenizer.eos_id is not None else 1
    return bos, eos


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


def collate_lm(samples: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Return `ids` [B, T] (inputs) and `targets` [B, T] (IGNORE at padding) for LM sequences."""
    inputs = pad_sequence([torch.tensor(s[:-1]) for s in samples], batch_first=True, padding_value=pad_id)
    targets = pad_sequence([torch.tensor(s[1:]) for s in samples], batch_first=True, padding_value=IGNORE)
    return {"ids": inputs, "targets": targets}


def collate_tts(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Return the padded TTS batch (`text_ids`, `codes`, `ref_mel` and their lengths)."""
    def pad(key: str) -> tuple[torch.Tensor, torch.Tensor]:
        tensors = [torch.as_tensor(s[key]) for s in samples]
        return pad_sequence(tensors, batch_first=True), torch.tensor([len(t) for t in tensors])

    text, text_lengths = pad("text_ids")
    codes, code_lengths = pad("codes")
    mel, mel_lengths = pad("ref_mel")
    return {"text_ids": text.long(), "text_lengths": text_lengths, "codes": codes.long(), "code_lengths": code_lengths,
            "ref_mel": mel.float(), "ref_lengths": mel_lengths}


class Batcher:
    """Length-bucketed batches of sample indices, resumable at any (epoch, index)."""

    def __init__(
        self, lengths: list[int], batch_size: int, seed: int, rank: int = 0, world: int = 1, bucket: bool = True
    ) -> None:
        if not lengths:
            raise InputError("no training samples: the data set is empty after filtering.")
        self.lengths = lengths
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world = world
        self.bucket = bucket
        self.epoch = 0
        self.index = 0
        self._batches = self.epoch_batches(0)

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """Return this rank's batches of `epoch` (the same on every call)."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.lengths), generator=g).tolist()
        if self.bucket:
            window = self.batch_size * BUCKET_WINDOW
            order = [i for s in range(0, len(order), window) for i in sorted(order[s : s + window], key=self.lengths.__getitem__)]
        batches = [order[s : s + self.batch_size] for s in range(0, len(order), self.batch_size)]
        batches = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
        usable = len(batches) - len(batches) % self.world or len(batches)
        return batches[:usable][self.rank :: self.world] or batches[:1]

    def __iter__(self) -> Iterator[list[int]]:
        while True:
            if self.index >= len(self._batches):
                self.epoch += 1
                self.index = 0
                self._batches = self.epoch_batches(self.epoch)
            batch = self._batches[self.index]
            self.index += 1
            yield batch

    def padding_share(self, epoch: int = 0) -> float:
        """Return the share of padded positions over the batches of `epoch` (0 = no padding)."""
        padded = real = 0
        for batch in self.epoch_batches(epoch):
            lengths = [self.lengths[i] for i in batch]
            padded += max(lengths) * len(lengths)
            real += sum(lengths)
        return 1.0 - real / padded if padded else 0.0

    def state_dict(self) -> dict[str, int]:
        """Return the position: the epoch and the index of the next batch in it."""
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a saved position."""
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._batches = self.epoch_batches(self.epoch)


def eval_batches(n: int, batch_size: int) -> list[list[int]]:
    """Return consecutive index batches covering 0..n-1 (validation order, no shuffle)."""
    return [list(range(s, min(n, s + batch_size))) for s in range(0, n, batch_size)]
