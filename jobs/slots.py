"""A worker's GPU slots: which GPU kinds' jobs may run at once, and on which devices.

`queue.gpu_slots` N gives N slots; slot i is the i-th device of the worker's own
`CUDA_VISIBLE_DEVICES` when it has one (cycling when it lists fewer), else device i. A job of a GPU
kind takes as many slots as it runs processes (`nproc`: one per GPU under torchrun) — all at once or
none — and its command sees only those devices (`CUDA_VISIBLE_DEVICES`), so two jobs never share a
GPU and a job's ranks `LOCAL_RANK` 0…nproc-1 land on its own devices.
"""

from __future__ import annotations

import threading


class GpuSlots:
    """`count` GPU slots over the devices of `visible` (a `CUDA_VISIBLE_DEVICES` value, or None)."""

    def __init__(self, count: int, visible: str | None = None) -> None:
        listed = [device.strip() for device in (visible or "").split(",") if device.strip()]
        self.count = count
        self.devices = [listed[i % len(listed)] if listed else str(i) for i in range(count)]
        self._free = list(range(count))
        self._lock = threading.Lock()

    def take(self, needed: int) -> list[str] | None:
        """Return the devices of `needed` free slots, now taken; None (nothing taken) when fewer are free."""
        with self._lock:
            if len(self._free) < needed:
                return None
            taken, self._free = self._free[:needed], self._free[needed:]
        return [self.devices[i] for i in taken]

    def give_back(self, devices: list[str]) -> None:
        """Free the slots `take` returned as `devices`."""
        with self._lock:
            for device in devices:
                slot = next(i for i, d in enumerate(self.devices) if d == device and i not in self._free)
                self._free.append(slot)
            self._free.sort()
