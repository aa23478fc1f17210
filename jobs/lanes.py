"""A worker's work slots, one pool per lane, so light jobs never wait behind long ones.

Every job kind belongs to one lane: `journey` (the quickstarts, which only wait on their stage jobs),
`light` (imports, corpus and tokenizer work, inspections, checks, exports, release pulls: seconds of CPU or waiting
on the disk and the network, not minutes of compute) or
`heavy` (training, features, speech, evaluation: everything else). Each lane has its own slots
(`queue.workers` heavy, `queue.light_workers` light, `queue.journey_workers` journey); the worker runs
one thread per slot of every lane. A job starts only when a slot of its lane is free (a light job also takes a
free heavy slot: idle capacity serves it, while its own slot keeps it from ever waiting behind long work) and,
for a GPU kind, its GPU slots (`jobs.slots`); otherwise it stays queued, its record naming what it waits for
(`JobStore.wait_for`), and is tried again a second later.
"""

from __future__ import annotations

import threading
from typing import Any

JOURNEY = "journey"
LIGHT = "light"
HEAVY = "heavy"
DEVICE = "device"  # what a GPU kind waits for once its lane has room: `jobs.slots`
LANES = (HEAVY, LIGHT, JOURNEY)
LANE_SETTINGS = {HEAVY: ("queue.workers", 2), LIGHT: ("queue.light_workers", 1), JOURNEY: ("queue.journey_workers", 1)}
LIGHT_KINDS = (
    "dataset.import", "dataset.filter", "dataset.split", "corpus.collect", "tokenizer.train", "tokenizer.extend",
    "tokenizer.merge", "tokenizer.sweep", "tokenizer.inspect", "tokenizer.encode", "checkpoint.inspect", "doctor",
    "export", "embeddings.extend", "cache.list", "cache.clean", "models.pull",
)
BORROWS = {LIGHT: (LIGHT, HEAVY), HEAVY: (HEAVY,), JOURNEY: (JOURNEY,)}  # the lanes a job of each lane may run in
SLOT_WORDS = {HEAVY: "work slot", LIGHT: "light-work slot", JOURNEY: "journey slot", DEVICE: "device slot"}


def lane_of(kind: str) -> str:
    """Return the lane of job `kind`: `journey` for `quickstart.*`, `light` for LIGHT_KINDS, else `heavy`."""
    if kind.startswith("quickstart."):
        return JOURNEY
    return LIGHT if kind in LIGHT_KINDS else HEAVY


def lane_counts(settings: Any, heavy: int | None = None) -> dict[str, int]:
    """Return each lane's slot count from `settings` (`heavy` overrides `queue.workers`); each at least 1."""
    counts = {lane: int(settings.get(key, default) or default) for lane, (key, default) in LANE_SETTINGS.items()}
    if heavy:
        counts[HEAVY] = int(heavy)
    return {lane: max(1, count) for lane, count in counts.items()}


class WorkSlots:
    """The free slots of each lane in one worker process (thread-safe)."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = dict(counts)
        self._busy = {lane: 0 for lane in counts}
        self._lock = threading.Lock()

    @property
    def total(self) -> int:
        """Return the slots of every lane together: the worker's thread count."""
        return sum(self.counts.values())

    def take(self, lane: str) -> str | None:
        """Take a free slot for a job of `lane`, in its own lane first, then in a lane it may borrow (BORROWS);
        return the lane taken, None (nothing taken) when all are busy."""
        with self._lock:
            for candidate in BORROWS[lane]:
                if self._busy[candidate] < self.counts[candidate]:
                    self._busy[candidate] += 1
                    return candidate
            return None

    def give_back(self, lane: str) -> None:
        """Free a slot of the lane `take` returned."""
        with self._lock:
            self._busy[lane] -= 1
