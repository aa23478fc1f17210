"""Training data: length-bucketed batches with a resumable position, and prefetching.

The samples themselves come from the run's family as `core.families.contract.SampleSet`s.

`Batcher` cuts each epoch into batches of similar length (a seeded shuffle, then sorting within
windows of 50 batches, then a shuffle of the batch order), so padding stays small; it reports
the padding share. Its position (epoch, batch index) is saved in checkpoints, so a resumed run
sees exactly the batches an uninterrupted run would. With several processes (`torchrun`, W ranks
of `batch.size` B each) the batches are global ones of W × B samples — the very batches one
process cuts with `batch.size` W × B — and each rank takes its share of every one, as
`DistributedSampler` splits a batch: consecutive slices whose sizes differ by at most one (a last
global batch with fewer samples than ranks is left out). A run resumed with another global batch
(another world size or `batch.size`) continues at the same share of the epoch, whose batches are
cut anew.

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
    """Length-bucketed batches of sample indices, resumable at any (epoch, index): this rank's share of
    global batches of `batch_size` × `world` samples (see the module docstring)."""

    def __init__(
        self, lengths: list[int], batch_size: int, seed: int, rank: int = 0, world: int = 1, bucket: bool = True
    ) -> None:
        if not lengths:
            raise InputError("no training samples: the data set is empty after filtering.")
        if len(lengths) < world:
            raise InputError(f"{len(lengths)} training samples for {world} processes: each rank needs one; "
                             "add data or run fewer processes.")
        self.lengths = lengths
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world = world
        self.bucket = bucket
        self.global_size = batch_size * world
        self.epoch = 0
        self.index = 0
        self.resized_from: dict[str, int] | None = None  # set by a load of another global batch size
        self._batches = self.epoch_batches(0)

    def global_batches(self, epoch: int, size: int | None = None) -> list[list[int]]:
        """Return the global batches of `epoch` (of `size` samples, default the run's global batch): the same on
        every call and every rank."""
        size = size or self.global_size
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.lengths), generator=g).tolist()
        if self.bucket:
            window = size * BUCKET_WINDOW
            order = [i for s in range(0, len(order), window) for i in sorted(order[s : s + window], key=self.lengths.__getitem__)]
        batches = [order[s : s + size] for s in range(0, len(order), size)]
        batches = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
        return [batch for batch in batches if len(batch) >= self.world]

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """Return this rank's batches of `epoch`: its share of each global batch (the same on every call)."""
        return [share(batch, self.rank, self.world) for batch in self.global_batches(epoch)]

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
        """Return the share of padded positions over this rank's batches of `epoch` (0 = no padding)."""
        padded = real = 0
        for batch in self.epoch_batches(epoch):
            lengths = [self.lengths[i] for i in batch]
            padded += max(lengths) * len(lengths)
            real += sum(lengths)
        return 1.0 - real / padded if padded else 0.0

    def state_dict(self) -> dict[str, int]:
        """Return the position: the epoch, the index of the next global batch in it and the global batch size."""
        return {"epoch": self.epoch, "index": self.index, "global_batch": self.global_size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a saved position. Saved with another global batch size, the position becomes the same
        share of the epoch in this run's batches (`resized_from` then holds the saved size and index)."""
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._batches = self.epoch_batches(self.epoch)
        saved_size = int(state.get("global_batch", self.global_size))
        if saved_size != self.global_size:
            saved_count = len(self.global_batches(self.epoch, saved_size))
            self.resized_from = {"global_batch": saved_size, "index": self.index}
            self.index = min(round(self.index * len(self._batches) / max(saved_count, 1)), len(self._batches))


def share(batch: list[int], rank: int, world: int) -> list[int]:
    """Return rank `rank`'s consecutive slice of `batch` split over `world` ranks (sizes differ by at most one)."""
    size, extra = divmod(len(batch), world)
    start = rank * size + min(rank, extra)
    return batch[start : start + size + (rank < extra)]


def replay_count(batch_size: int, share: float) -> int:
    """Return how many of a batch's `batch_size` samples are replayed base-language clips: `share` of it,
    rounded, at least 1 and at most `batch_size - 1`. Raises InputError for a batch of 1 (no room to mix)."""
    if batch_size < 2:
        raise InputError(f"data.replay: batch.size {batch_size} leaves no room to mix; use a batch of 2 or more.")
    return min(max(round(batch_size * share), 1), batch_size - 1)


def joined_samples(first: SampleSet, second: SampleSet) -> SampleSet:
    """Return one SampleSet of `first`'s samples then `second`'s (index len(first) + i is `second`'s i)."""
    n = len(first)

    def load_many(indices: list[int]) -> list[Any]:
        head = first.take([i for i in indices if i < n])
        tail = second.take([i - n for i in indices if i >= n])
        picked = iter(head), iter(tail)
        return [next(picked[i >= n]) for i in indices]

    return SampleSet(lengths=first.lengths + second.lengths, load=lambda i: first.load(i) if i < n else second.load(i - n),
                     n_bytes=first.n_bytes + second.n_bytes, filtered=first.filtered + second.filtered, load_many=load_many)


class ReplayBatcher:
    """Batches of `Batcher`'s interface over `joined_samples(new, replay)`: each rank's batch is its share of a
    length-bucketed global batch of (`batch_size` - `replayed`) × world new-language samples plus its
    `replayed` of the global batch's `replayed` × world base-language ones (indices offset by `len(new)`),
    taken in turn from one seeded shuffle of the replay clips, the same on every rank, drawn anew each time it
    runs out. The position is both sides' positions (the replay side's counts clips over all ranks)."""

    def __init__(self, new_lengths: list[int], replay_lengths: list[int], batch_size: int, replayed: int, seed: int,
                 rank: int = 0, world: int = 1) -> None:
        self.main = Batcher(new_lengths, batch_size - replayed, seed, rank, world)
        self.offset = len(new_lengths)
        self.lengths = new_lengths + replay_lengths
        self.replayed = replayed
        self.rank = rank
        self.world = world
        self.seed = seed * 1_000_003 + 7919
        self.count = len(replay_lengths)
        self.drawn = 0  # replay clips handed out so far (over all rounds and ranks)

    @property
    def epoch(self) -> int:
        """Return the new-language side's epoch."""
        return self.main.epoch

    @property
    def resized_from(self) -> dict[str, int] | None:
        """Return the new-language side's `Batcher.resized_from`."""
        return self.main.resized_from

    def _replay(self, start: int) -> list[int]:
        """Return this rank's `replayed` replay indices of the global draw at position `start` of the endless
        shuffled stream."""
        picked = []
        first = start + self.rank * self.replayed
        for position in range(first, first + self.replayed):
            round_, index = divmod(position, self.count)
            order = torch.randperm(self.count, generator=torch.Generator().manual_seed(self.seed + round_)).tolist()
            picked.append(self.offset + order[index])
        return picked

    def __iter__(self) -> Iterator[list[int]]:
        step = self.replayed * self.world
        for new in self.main:
            batch = new + self._replay(self.drawn)
            self.drawn += step
            yield batch

    def upcoming(self, count: int) -> list[list[int]]:
        """Return up to `count` batches that follow the current position within the new-language epoch."""
        step = self.replayed * self.world
        return [new + self._replay(self.drawn + k * step) for k, new in enumerate(self.main.upcoming(count))]

    def padding_share(self, epoch: int = 0) -> float:
        """Return the padding share of the new-language side's batches of `epoch`."""
        return self.main.padding_share(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Return the new-language position and how many replay clips were drawn."""
        return {**self.main.state_dict(), "replay_drawn": self.drawn}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved position (a checkpoint of a run without replay starts the replay stream at 0)."""
        self.main.load_state_dict(state)
        self.drawn = int(state.get("replay_drawn", 0))


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
