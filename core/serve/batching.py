"""A bounded request queue and the one worker thread that speaks it in batches.

`submit` puts a job into the queue and returns a Future, or raises `QueueFull` when `limit` jobs
are already waiting (the batch being spoken does not count) and `Unavailable` once the queue is
closed. The worker waits for a job, then takes every job waiting, up to `max_batch` in all, and
hands them to `speak` in one call; while that call runs, new jobs queue up for the next batch.
Cancelling a waiting job's Future (its client went away) takes it out of the queue at once, freeing
its place; a job being spoken is marked running, so its Future can no longer be cancelled (the
engine stops it through the job itself). `close` refuses new jobs, fails the waiting ones with
`Unavailable`, lets the batch being spoken finish and stops the worker.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Generic, TypeVar

from core.errors import LinguaForgeError

Job = TypeVar("Job")


class QueueFull(LinguaForgeError):
    """The queue holds its limit of waiting requests."""


class Unavailable(LinguaForgeError):
    """The server is shutting down and takes no more requests."""


class BatchQueue(Generic[Job]):
    """Jobs waiting for `speak(list of jobs) -> list of results or exceptions`, spoken in batches."""

    def __init__(self, speak: Callable[[list[Job]], list[Any]], limit: int, max_batch: int) -> None:
        self._speak = speak
        self._waiting: deque[tuple[Job, Future[Any]]] = deque()
        self.limit = limit
        self.max_batch = max_batch
        self.batch_sizes: list[int] = []
        self._closed = False
        self._stopping = False
        self._changed = threading.Condition()
        self._worker = threading.Thread(target=self._run, name="speech-batches", daemon=True)
        self._worker.start()

    def submit(self, job: Job) -> Future[Any]:
        """Queue `job`; return the Future of its result (cancel it to withdraw a job still waiting).

        Raises QueueFull when `limit` jobs wait already, Unavailable after `close`.
        """
        future: Future[Any] = Future()
        with self._changed:
            if self._closed:
                raise Unavailable("the server is shutting down; it takes no more requests.")
            if len(self._waiting) >= self.limit:
                raise QueueFull(f"{self.limit} requests are waiting already (the queue limit); retry later.")
            self._waiting.append((job, future))
            self._changed.notify()
        future.add_done_callback(self._withdraw)
        return future

    def _withdraw(self, future: Future[Any]) -> None:
        if future.cancelled():
            with self._changed:
                for item in self._waiting:
                    if item[1] is future:
                        self._waiting.remove(item)
                        break

    @property
    def closed(self) -> bool:
        """Return True once `close` was called."""
        return self._closed

    @property
    def waiting(self) -> int:
        """Return the number of jobs waiting for a batch."""
        return len(self._waiting)

    def close(self, timeout: float | None = None) -> None:
        """Refuse new jobs, fail the waiting ones with Unavailable, and stop the worker after its batch."""
        with self._changed:
            self._closed = self._stopping = True
            waiting = list(self._waiting)
            self._waiting.clear()
            self._changed.notify()
        for _job, future in waiting:
            if future.set_running_or_notify_cancel():
                future.set_exception(Unavailable("the server shut down before this request was spoken."))
        self._worker.join(timeout)

    def _take_batch(self) -> list[tuple[Job, Future[Any]]] | None:
        with self._changed:
            while True:
                while not self._waiting and not self._stopping:
                    self._changed.wait()
                if self._stopping:
                    return None
                batch = []
                while self._waiting and len(batch) < self.max_batch:
                    job, future = self._waiting.popleft()
                    if future.set_running_or_notify_cancel():
                        batch.append((job, future))
                if batch:
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
