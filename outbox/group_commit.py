"""Group commit: many concurrent ``put`` callers share one durable write.

A durable write (an fsynced WAL record, a MySQL commit, a Redis round trip) costs about the same
for one entry as for a hundred, so callers hand their entries to one committer thread and wait; it
takes everything queued (up to ``group_commit_batch_max`` requests) and makes it durable in one
backend call. A lone caller pays one write, as without grouping; under load the batches grow by
themselves, with no timer adding latency.

Each request keeps its own all-or-nothing answer: the backend's ``commit`` returns, per request,
either its stored entries or the exception that refused it (OutboxFullError for one request does
not refuse its neighbours).

A caller with many requests at once (``put_groups``: a batch of spools) hands them over together
with ``submit_many``: they are queued as one bundle, and the committer never splits a bundle, so
up to ``batch_max`` of them share one write whatever other callers do meanwhile; a larger call is
cut into bundles of ``batch_max``.

``BatchCommitter`` is the same machinery for any request and answer type (the MySQL outbox also
groups its ``mark_delivered`` calls); ``GroupCommitter`` is it for ``put``.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from outbox.entry import OutboxEntry
from outbox.errors import OutboxError, OutboxUnavailableError

GROUP_COMMIT_BATCH_MAX = 256
# Requests waiting for the committer; a submit beyond it blocks its caller (back-pressure).
GROUP_COMMIT_QUEUE_MAX = 10_000

Result = list[OutboxEntry] | BaseException
Commit = Callable[[Sequence[Sequence[OutboxEntry]]], Sequence[Result]]

RequestT = TypeVar("RequestT")
AnswerT = TypeVar("AnswerT")


@dataclass(slots=True)
class _Bundle(Generic[RequestT, AnswerT]):
    """Requests queued together, never split; one future answers them all (a Future costs
    microseconds to make: one per request would be felt at tens of thousands a second)."""

    requests: Sequence[RequestT]
    done: Future[list[AnswerT | BaseException]] = field(default_factory=Future)


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
        # A bundle is at most batch_max requests: it must always fit in an empty queue.
        assert 1 <= batch_max <= queue_max, (batch_max, queue_max)
        self._commit = commit
        self._batch_max = batch_max
        self._queue_max = queue_max
        # Bundles in submission order, and how many requests they hold together.
        self._bundles: collections.deque[_Bundle[RequestT, AnswerT]] = collections.deque()
        self._queued = 0
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, request: RequestT) -> AnswerT:
        """Block until ``request`` is committed (its answer) or refused (raises)."""
        (answer,) = self.submit_many([request])
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def submit_many(self, requests: Sequence[RequestT]) -> list[AnswerT | BaseException]:
        """Block until every request is committed or refused; the answer or the exception of
        each, in order. Up to ``batch_max`` of them share one commit."""
        if self._closed:
            raise OutboxUnavailableError("outbox is closed")
        queued: list[_Bundle[RequestT, AnswerT]] = []
        answers: list[AnswerT | BaseException] = []
        for start in range(0, len(requests), self._batch_max):
            bundle: _Bundle[RequestT, AnswerT] = _Bundle(requests[start : start + self._batch_max])
            size = len(bundle.requests)
            with self._changed:
                while not self._closed and self._queued + size > self._queue_max:
                    self._changed.wait()
                if self._closed:  # closed while this caller waited for room
                    closed = OutboxUnavailableError("outbox is closed")
                    bundle.done.set_result([closed] * (len(requests) - start))
                    queued.append(bundle)
                    break
                self._bundles.append(bundle)
                self._queued += size
                self._changed.notify_all()
            queued.append(bundle)
        for bundle in queued:
            answers += bundle.done.result()
        return answers

    def close(self) -> None:
        """Commit what is queued, then stop the thread."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._bundles and not self._closed:
                    self._changed.wait()
                if not self._bundles:
                    return  # closed, and everything queued is committed
                batch = [self._bundles.popleft()]
                requests = list(batch[0].requests)
                while self._bundles and len(requests) + len(self._bundles[0].requests) <= (
                    self._batch_max
                ):
                    batch.append(self._bundles.popleft())
                    requests += batch[-1].requests
                self._queued -= len(requests)
                self._changed.notify_all()  # room for callers waiting to queue
            self._commit_batch(batch, requests)

    def _commit_batch(
        self, batch: list[_Bundle[RequestT, AnswerT]], requests: list[RequestT]
    ) -> None:
        results: Sequence[AnswerT | BaseException]
        try:
            results = self._commit(requests)
        except BaseException as e:  # every waiter must get an answer
            results = [e] * len(requests)
        assert len(results) == len(requests), "commit must answer every request"
        start = 0
        for bundle in batch:
            end = start + len(bundle.requests)
            bundle.done.set_result(list(results[start:end]))
            start = end


class GroupCommitter(BatchCommitter[Sequence[OutboxEntry], list[OutboxEntry]]):
    """``put``'s group commit: ``put(entries, check)`` blocks until they are durable (their
    stored form) or refused (raises)."""

    def put(
        self, entries: Sequence[OutboxEntry], check: Callable[[Sequence[OutboxEntry]], None]
    ) -> list[OutboxEntry]:
        """``Outbox.put`` through this committer: ``check`` (the backend's own checks of a put)
        raises for a refused request; an empty one is answered at once."""
        check(entries)
        if not entries:
            return []
        return self.submit(list(entries))

    def put_groups(
        self,
        requests: Sequence[Sequence[OutboxEntry]],
        check: Callable[[Sequence[OutboxEntry]], None],
    ) -> list[list[OutboxEntry] | OutboxError]:
        """``Outbox.put_groups`` through this committer: every request first passes ``check``
        (the backend's own checks of a put: a ValueError is the caller's bug and raises; an
        OutboxError refuses that request alone), empty ones are answered at once, and the rest
        are submitted together. An answer that is no OutboxError (a bug of ours) raises."""
        answers: list[list[OutboxEntry] | OutboxError] = []
        submitted: list[int] = []
        for index, entries in enumerate(requests):
            try:
                check(entries)
            except OutboxError as e:
                answers.append(e)
                continue
            answers.append([])
            if entries:
                submitted.append(index)
        results: Sequence[list[OutboxEntry] | BaseException]
        try:
            results = self.submit_many([requests[index] for index in submitted])
        except OutboxError as e:  # closed: an answer for every request, as a failed commit
            results = [e] * len(submitted)
        for index, result in zip(submitted, results, strict=True):
            if isinstance(result, OutboxError):
                answers[index] = result
            elif isinstance(result, BaseException):
                raise result
            else:
                answers[index] = result
        return answers
