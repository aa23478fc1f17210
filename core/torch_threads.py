"""Torch's intra-op threads for work made of small tensors.

A clip's resampling, a codec feature or a speaker embedding over a few seconds of audio is too small to split across
cores: the extra intra-op threads only spin, and on a busy machine they wait for one another (measured: Resemblyzer's
embedding of a 2.6 s clip took 0.91 s with two threads and 0.15 s with one at load 9; docs/benchmarks.md).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the block with `threads` intra-op threads, then restore the process's count."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
