"""Sharded feature extraction: which clips a shard builds, and one shard process per device.

One feature cache may be built by several processes — on one machine one per device
(`preprocess --devices cuda:0,cuda:1`), on several machines as shard jobs (`preprocess --shard I/N`)
— all writing into the same folder through the one engine (`core.data.feature_cache`). The manifest
is cut into the batches a single process forms (`batch_size` consecutive rows); batch b belongs to
shard b mod N. Each clip is therefore featurised in the same company as in a single build, so its
item's bytes are the same even where a featuriser's floats depend on the batch. Shard I/N run with k
devices is the k shards I/(N·k), (I+N)/(N·k), … which together hold exactly the batches of I/N.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable

from core.errors import InputError, InternalError, LinguaForgeError

_SPEC = re.compile(r"(\d+)/(\d+)")  # matched whole (fullmatch)
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
MAX_SHARDS = 100_000  # shards of one cache (N of I/N)
MAX_DEVICES = 16  # processes one `preprocess --devices` starts


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0 ≤ index < count): the batches b with b mod count == index."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def label(self) -> str:
        """The shard in a file name (`1of4`)."""
        return f"{self.index}of{self.count}"

    def holds(self, batch: int) -> bool:
        """Return True when batch number `batch` of the manifest belongs to this shard."""
        return batch % self.count == self.index

    def split(self, parts: int) -> list["Shard"]:
        """Return the `parts` shards that together hold exactly this shard's batches."""
        return [Shard(self.index + self.count * j, self.count * parts) for j in range(parts)]


def parse_shard(text: str) -> Shard:
    """Return the Shard of a spec `I/N` (0 ≤ I < N).

    Raises InputError naming the spec and the form it must take.
    """
    match = _SPEC.fullmatch(str(text).strip())
    index, count = (int(match.group(1)), int(match.group(2))) if match else (-1, 0)
    if not 0 <= index < count <= MAX_SHARDS:
        raise InputError(f"{text!r} is not a shard: give I/N with 0 ≤ I < N ≤ {MAX_SHARDS:,}, the shard's number and the "
                         "number of shards (two shards are 0/2 and 1/2).")
    return Shard(index, count)


def parse_devices(text: str) -> list[str]:
    """Return the devices of a comma-separated list (`cpu`, `cuda`, `cuda:N`; a device may repeat), at most
    MAX_DEVICES of them (one process each).

    Raises InputError naming the first entry that is not a device, or the count when there are too many.
    """
    devices = [part.strip() for part in str(text).split(",")]
    if len(devices) > MAX_DEVICES:
        raise InputError(f"{len(devices)} devices: one process is started per device, at most {MAX_DEVICES}. "
                         "List fewer devices (cuda:0,cuda:1 — or cpu,cpu).")
    for device in devices:
        if not _DEVICE.fullmatch(device):
            raise InputError(f"{device!r} is not a device; list cpu, cuda or cuda:N separated by commas "
                             "(cuda:0,cuda:1 — or cpu,cpu for two CPU processes).")
    return devices


def check_devices(devices: list[str]) -> None:
    """Raise InputError when a CUDA device in `devices` is not on this machine."""
    wanted = [d for d in devices if d.startswith("cuda")]
    if not wanted:
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for device in wanted:
        number = int(device.partition(":")[2] or 0)
        if number >= count:
            present = ", ".join(f"cuda:{i}" for i in range(count)) or "none"
            raise InputError(f"--devices {device}: not on this machine (CUDA devices: {present}). "
                             "Name devices it has, or cpu.")


#: builds one shard on one device and returns its `CacheInfo`: called as build(shard=…, device=…)
ShardBuild = Callable[..., Any]


def _run_shard(build: ShardBuild, shard: Shard, device: str, threads: int) -> Any:
    """Build `shard` on `device` in a process of its own (the CPU's cores shared out by `threads`)."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    else:
        torch.set_num_threads(threads)
    return build(shard=shard, device=device)


def run_on_devices(build: ShardBuild, devices: list[str], shard: Shard | None = None) -> list[Any]:
    """Return the `CacheInfo` of each device's shard: `shard` (all clips when None) split over `devices`,
    one spawned process per device, all at once.

    Every shard runs to its end even when another fails; then the first error is raised (the finished
    shards' items stay and are reused by the next build). Raises InternalError when a process dies.
    """
    parts = (shard or Shard(0, 1)).split(len(devices))
    if len(devices) == 1:
        return [build(shard=parts[0] if shard is not None else None, device=devices[0])]
    threads = max(1, (os.cpu_count() or 1) // len(devices))
    results: list[Any] = []
    errors: list[LinguaForgeError] = []
    try:
        with ProcessPoolExecutor(len(devices), mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_run_shard, build, part, device, threads) for part, device in zip(parts, devices)]
            for future in futures:
                try:
                    results.append(future.result())
                except LinguaForgeError as exc:
                    errors.append(exc)
    except BrokenProcessPool as exc:
        raise InternalError(f"a shard process died ({exc}); run the same command again: the clips already built are kept.") from exc
    if errors:
        raise errors[0]
    return results
