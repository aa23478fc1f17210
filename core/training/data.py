"""Training data: length-bucketed batches with a resumable position, and prefetching.

The samples themselves come from the run's family as `core.families.contract.SampleSet`s.

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
from typing import Any, Callable, Iterator

import torch

from core.errors import InputError
from core.families.contract import SampleSet

BUCKET_WINDOW = 50


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
