"""Training data: samples, length-bucketed batches with a resumable position, and collation.

`Batcher` cuts each epoch into batches of similar length (a seeded shuffle, then sorting within
windows of 50 batches, then a shuffle of the batch order), so padding stays small; it reports
the padding share. Its position (epoch, batch index) is saved in checkpoints, so a resumed run
sees exactly the batches an uninterrupted run would. With several processes each rank takes
every world-th batch.

`Prefetcher` prepares batches ahead in a background thread (samples read in bulk a window of
batches at a time, collated, pinned on CUDA) and hands them over with non-blocking copies; each
batch carries the Batcher position after it, so what a checkpoint saves is the position of the
last batch trained on, never of one only prepared.
"""

from __future__ import annotations

import queue
import threading
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
    """The samples of one split: `items[i]` is loaded by `load(i)`, `lengths[i]` is its token count.

    `load_many(indices)`, where given, reads many samples in one bulk pass (`take` uses it).
    """

    lengths: list[int]
    load: Callable[[int], Any]
    n_bytes: int = 0
    filtered: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    load_many: Callable[[list[int]], list[Any]] | None = None

    def __len__(self) -> int:
        return len(self.lengths)

    def take(self, indices: list[int]) -> list[Any]:
        """Return the samples at `indices`, read in bulk where the set supports it."""
        return self.load_many(indices) if self.load_many is not None else [self.load(i) for i in indices]


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


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Return `batch` with its tensors on `device` (non-blocking copies; pin them first for overlap)."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


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

    def upcoming(self, count: int) -> list[list[int]]:
        """Return up to `count` batches that follow the current position within this epoch."""
        return self._batches[self.index : self.index + count]

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


class Prefetcher:
    """Collated batches of a Batcher, prepared `depth` ahead in a background thread.

    Every `window` batches the thread asks the samples to read the next window's items in bulk
    (`SampleSet.load_many`), then collates batch by batch; on CUDA the tensors are pinned so the
    copy to the device overlaps the step. `depth` 0 prepares each batch in the caller's thread.
    `position` is the Batcher position after the last batch handed out. Errors of the thread are
    raised by `next()`. Call `close()` when done.
    """

    def __init__(
        self, batcher: Batcher, samples: SampleSet, collate: Callable[[list[Any]], dict[str, Any]],
        device: torch.device, depth: int = 4, window: int = BUCKET_WINDOW,
    ) -> None:
        self.batcher, self.samples, self.collate = batcher, samples, collate
        self.device, self.window = device, window
        self.position = batcher.state_dict()
        self._indices = iter(batcher)
        self._warm_left = 0
        self._pin = device.type == "cuda"
        self._queue: queue.Queue = queue.Queue(maxsize=max(depth, 1))
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if depth > 0:
            self._thread = threading.Thread(target=self._fill, name="batch-prefetch", daemon=True)
            self._thread.start()

    def _make(self) -> tuple[dict[str, Any], dict[str, int]]:
        indices = next(self._indices)
        position = self.batcher.state_dict()
        if self._warm_left == 0 and self.samples.load_many is not None:
            ahead = [indices, *self.batcher.upcoming(self.window - 1)]
            self.samples.load_many([i for batch in ahead for i in batch])  # one bulk read for the window
            self._warm_left = len(ahead)
        self._warm_left = max(self._warm_left - 1, 0)
        batch = self.collate(self.samples.take(indices))
        if self._pin:
            batch = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        return batch, position

    def _fill(self) -> None:
        try:
            while not self._closed.is_set():
                item = self._make()
                while not self._closed.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # noqa: BLE001 — handed to the training thread, raised there
            self._queue.put((exc, None))

    def next(self) -> dict[str, Any]:
        """Return the next batch on the device; raises what preparing it raised."""
        if self._thread is None:
            batch, position = self._make()
        else:
            batch, position = self._queue.get()
            if isinstance(batch, BaseException):
                self.close()
                raise batch
        self.position = position
        return to_device(batch, self.device)

    def close(self) -> None:
        """Stop the background thread and drop prepared batches."""
        self._closed.set()
        if self._thread is not None:
            while self._thread.is_alive():
                try:
                    self._queue.get(timeout=0.05)
                except queue.Empty:
                    pass
            self._thread = None
