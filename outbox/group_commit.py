"""Group commit: many concurrent ``put`` callers share one durable write.

A durable write (an fsynced WAL record, a MySQL commit, a Redis round trip) costs about the same
for one entry as for a hundred, so callers hand their entries to one committer thread and wait; it
takes everything queued (up to ``group_commit_batch_max`` requests) and makes it durable in one
backend call. A lone caller pays one write, as without grouping; under load the batches grow by
themselves, with no timer adding latency.

Each request keeps its own all-or-nothing answer: the backend's ``commit`` returns, per request,
either its stored entries or the exception that refused it (OutboxFullError for one request does
not refuse its neighbours).

``BatchCommitter`` is the same machinery for any request and answer type (the MySQL outbox also
groups its ``mark_delivered`` calls); ``GroupCommitter`` is it for ``put``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from outbox.entry import OutboxEntry
from outbox.errors import OutboxUnavailableError

GROUP_COMMIT_BATCH_MAX = 256
# Requests waiting for the committer; a put beyond it blocks its caller (back-pressure).
GROUP_COMMIT_QUEUE_MAX = 10_000

Result = list[OutboxEntry] | BaseException
Commit = Callable[[Sequence[Sequence[OutboxEntry]]], Sequence[Result]]

RequestT = TypeVar("RequestT")
AnswerT = TypeVar("AnswerT")


@dataclass(slots=True)
class _Request(Generic[RequestT, AnswerT]):
    request: RequestT
    done: Future[AnswerT] = field(default_factory=Future)


class BatchCommitter(Generic[RequestT, AnswerT]):
    """Runs ``commit`` on one thread for batches of concurrent requests; ``commit`` answers each
    request with its answer or the exception that refused it."""

    def __init__(
        self,
        commit: Callable[[Sequence[RequestT]], Sequence[AnswerT | BaseException]],
        name: str,
        batch_max: int = GROUP_COMMIT_BATCH_MAX,
        queue_max: int = GROUP_COMMIT_QUEUE_MAX,
    ) -> None:
        self._commit = commit
        self._batch_max = batch_max
        self._queue: queue.Queue[_Request[RequestT, AnswerT] | None] = queue.Queue(
            maxsize=queue_max
        )
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, request: RequestT) -> AnswerT:
        """Block until ``request`` is committed (its answer) or refused (raises)."""
        if self._closed:
            raise OutboxUnavailableError("outbox is closed")
        pending: _Request[RequestT, AnswerT] = _Request(request)
        self._queue.put(pending)
        return pending.done.result()

    def close(self) -> None:
        """Commit what is queued, then stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < self._batch_max:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            self._commit_batch(batch)

    def _commit_batch(self, batch: list[_Request[RequestT, AnswerT]]) -> None:
        try:
            results = self._commit([r.request for r in batch])
        except BaseException as e:  # every waiter must get an answer
            for r in batch:
                r.done.set_exception(e)
            return
        assert len(results) == len(batch), "commit must answer every request"
        for r, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                r.done.set_exception(result)
            else:
                r.done.set_result(result)


class GroupCommitter(BatchCommitter[Sequence[OutboxEntry], list[OutboxEntry]]):
    """``put``'s group commit: ``submit(entries)`` blocks until they are durable (their stored
    form) or refused (raises)."""
