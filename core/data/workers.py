"""Per-clip work in worker processes, results in order: the import's and the feature cache's parallelism.

`ordered_map(function, args, items, workers)` yields `function(*args, item)` for each item in order —
in this process when `workers` ≤ 1, else in a pool of `workers` processes that receive `args` once
each and run one intra-op torch thread (the processes are the parallelism; a clip's tensors are small).
"""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any, Callable, Iterable, Iterator

_TASK: tuple[Callable[..., Any], tuple[Any, ...]] | None = None


def pool_context(preload: tuple[str, ...] = ()) -> multiprocessing.context.BaseContext:
    """Return `fork` while this process runs a single thread, else `forkserver` (or `spawn`).

    Forking a process that runs other threads (a job worker, TensorBoard writers, a web server, a
    progress bar's monitor) can copy a lock one of them holds, and the pool worker then waits on it
    forever. The fork server imports `preload` (and torch) once when it starts, so its workers start
    in milliseconds instead of importing them each.
    """
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", *preload])  # takes effect when this process first starts its fork server
    return context


def _init_worker(function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    import torch

    global _TASK
    torch.set_num_threads(1)
    _TASK = (function, args)


def _run(item: Any) -> Any:
    assert _TASK is not None, "pool worker used before its initializer ran"
    function, args = _TASK
    return function(*args, item)


def ordered_map(function: Callable[..., Any], args: tuple[Any, ...], items: Iterable[Any], workers: int) -> Iterator[Any]:
    """Yield `function(*args, item)` for each of `items`, in order: here, or in `workers` processes.

    `function` must be a module-level function and `args` picklable; `items` is consumed as the
    workers take them (a generator is never read ahead by more than the pipe holds).
    """
    if workers <= 1:
        yield from (function(*args, item) for item in items)
        return
    with pool_context((function.__module__,)).Pool(workers, initializer=_init_worker, initargs=(function, args)) as pool:
        yield from pool.imap(_run, items)
