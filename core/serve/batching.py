"""A bounded request queue and the one worker thread that speaks it in batches.

`submit` puts a job into the queue and returns a Future, or raises `QueueFull` when `limit` jobs
are already waiting (the batch being spoken does not count) and `Unavailable` once the queue is
closed. The worker waits for a job, then takes every job waiting, up to `max_batch` in all, and
hands them to `speak` in one call; while that call runs, new jobs queue up for the next batch.
`close` refuses new jobs, fails the waiting ones with `Unavailable`, lets the batch being spoken
finish and stops the worker.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, Generic, TypeVar

from core.errors import LinguaForgeError

Job = TypeVar("Job")


class QueueFull(LinguaForgeError):
    """The queue holds its limit of waiting requests."""


class Unavailable(LinguaForgeError):
    """The server is shutting down and takes no more requests."""


_STOP = object()


class BatchQueue(Generic[Job]):
    """Jobs waiting for `speak(list of jobs) -> list of results or exceptions`, spoken in batches."""

    def __init__(self, speak: Callable[[list[Job]], list[Any]], limit: int, max_batch: int) -> None:
        self._speak = speak
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=limit)
        self.limit = limit
        self.max_batch = max_batch
        self.batch_sizes: list[int] = []
        self._closed = False
        self._lock = threading.Lock()
        self._worker = threading.Thread(target=self._run, name="speech-batches", daemon=True)
        self._worker.start()

    def submit(self, job: Job) -> Future[Any]:
        """Queue `job`; return the Future of its result.

        Raises QueueFull when `limit` jobs wait already, Unavailable after `close`.
        """
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise Unavailable("the server is shutting down; it takes no more requests.")
            try:
                self._queue.put_nowait((job, future))
            except queue.Full:
                raise QueueFull(f"{self.limit} requests are waiting already (the queue limit); retry later.") from None
        return future

    @property
    def closed(self) -> bool:
        """Return True once `close` was called."""
        return self._closed

    @property
    def waiting(self) -> int:
        """Return the number of jobs waiting for a batch."""
        return self._queue.qsize()

    def close(self, timeout: float | None = None) -> None:
        """Refuse new jobs, fail the waiting ones with Unavailable, and stop the worker after its batch."""
        with self._lock:
            self._closed = True
            while True:
                try:
                    _job, future = self._queue.get_nowait()
                except queue.Empty:
                    break
                future.set_exception(Unavailable("the server shut down before this request was spoken."))
        self._queue.put(_STOP)
        self._worker.join(timeout)

    def _take_batch(self) -> list[tuple[Job, Future[Any]]] | None:
        first = self._queue.get()
        if first is _STOP:
            return None
        batch = [first]
        while len(batch) < self.max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                self._queue.put(_STOP)
                break
            batch.append(item)
        return batch

    def _run(self) -> None:
        while (batch := self._take_batch()) is not None:
            self.batch_sizes.append(len(batch))
            try:
                results = self._speak([job for job, _ in batch])
            except Exception as exc:  # a failure of the whole call answers each request of the batch
                results = [exc] * len(batch)
            for (_job, future), result in zip(batch, results):
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)
