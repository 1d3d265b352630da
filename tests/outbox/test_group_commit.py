"""The group committer (outbox/group_commit.py) on its own, with a commit function that records
what it was given. It proves:

- the requests of one ``submit_many`` are committed together, whatever other callers queue
  meanwhile: a bundle is never split nor mixed beyond ``batch_max``;
- a call of more than ``batch_max`` requests takes one commit per ``batch_max`` of them, and
  every answer comes back in order;
- each request gets its own answer or exception; a commit that raises answers every request of
  its batch with that exception; ``submit`` raises what ``submit_many`` would answer;
- ``close`` commits what is queued first; a caller still waiting for room in the queue, and
  every caller after it, gets OutboxUnavailableError.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest

from outbox.errors import OutboxUnavailableError
from outbox.group_commit import BatchCommitter

DEADLINE_S = 30.0


class Recorder:
    """A commit function: answers each request with its own text upper-cased, refuses those
    starting with "bad", and blocks on a request "block" until ``unblock``."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.blocked = threading.Event()
        self._go = threading.Event()

    def commit(self, requests: Sequence[str]) -> list[str | BaseException]:
        self.batches.append(list(requests))
        if "block" in requests:
            self.blocked.set()
            assert self._go.wait(DEADLINE_S)
        if "explode" in requests:
            raise RuntimeError("the backend failed")
        return [ValueError(r) if r.startswith("bad") else r.upper() for r in requests]

    def unblock(self) -> None:
        self._go.set()


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.001)


def in_thread(target: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run ``target`` on a thread of its own; the list receives its result or exception."""
    result: list[object] = []

    def run() -> None:
        try:
            result.append(target())
        except Exception as e:  # the test looks at it
            result.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_a_submit_many_is_committed_together_whatever_else_is_queued() -> None:
    recorder = Recorder()
    committer = BatchCommitter(recorder.commit, "test", batch_max=5, queue_max=100)
    try:
        blocker, _ = in_thread(lambda: committer.submit("block"))
        assert recorder.blocked.wait(DEADLINE_S)
        a, a_answers = in_thread(lambda: committer.submit_many(["a1", "a2", "a3"]))
        b, b_answers = in_thread(lambda: committer.submit_many(["b1", "b2", "b3", "b4"]))
        wait_until(lambda: committer._queued == 7)
        recorder.unblock()
        for thread in (blocker, a, b):
            thread.join(DEADLINE_S)
        assert a_answers == [["A1", "A2", "A3"]]
        assert b_answers == [["B1", "B2", "B3", "B4"]]
        # 3 + 4 > 5: two commits, each one caller's requests, whole.
        assert recorder.batches[0] == ["block"]
        assert sorted(recorder.batches[1:]) == [["a1", "a2", "a3"], ["b1", "b2", "b3", "b4"]]
    finally:
        recorder.unblock()
        committer.close()


def test_more_requests_than_a_batch_take_one_commit_per_batch_in_order() -> None:
    recorder = Recorder()
    committer = BatchCommitter(recorder.commit, "test", batch_max=5, queue_max=100)
    try:
        requests = [f"r{n}" for n in range(12)]
        assert committer.submit_many(requests) == [r.upper() for r in requests]
        assert [len(batch) for batch in recorder.batches] == [5, 5, 2]
    finally:
        committer.close()


def test_each_request_gets_its_own_answer_and_a_failed_commit_answers_its_batch() -> None:
    recorder = Recorder()
    committer = BatchCommitter(recorder.commit, "test", batch_max=5, queue_max=100)
    try:
        answers = committer.submit_many(["ok1", "bad2", "ok3"])
        assert answers[0] == "OK1"
        assert isinstance(answers[1], ValueError)
        assert answers[2] == "OK3"
        with pytest.raises(ValueError, match="bad4"):
            committer.submit("bad4")
        failed = committer.submit_many(["x", "explode", "y"])
        assert all(isinstance(a, RuntimeError) for a in failed)
        assert committer.submit("after") == "AFTER"  # the committer lives on
    finally:
        committer.close()


def test_close_commits_what_is_queued_then_refuses() -> None:
    recorder = Recorder()
    committer = BatchCommitter(recorder.commit, "test", batch_max=2, queue_max=2)
    blocker, _ = in_thread(lambda: committer.submit("block"))
    assert recorder.blocked.wait(DEADLINE_S)
    queued, queued_answers = in_thread(lambda: committer.submit_many(["q1", "q2"]))
    wait_until(lambda: committer._queued == 2)  # the queue is full now
    waiting, waiting_answers = in_thread(lambda: committer.submit_many(["w1"]))
    closer, _ = in_thread(committer.close)
    wait_until(lambda: committer._closed)
    recorder.unblock()
    for thread in (blocker, queued, waiting, closer):
        thread.join(DEADLINE_S)
        assert not thread.is_alive()
    assert queued_answers == [["Q1", "Q2"]]  # queued before the close: committed
    # Answered so if it was waiting for room, raised if it came after the close.
    (refused,) = waiting_answers
    if isinstance(refused, list):
        (refused,) = refused
    assert isinstance(refused, OutboxUnavailableError)
    assert ["w1"] not in recorder.batches
    with pytest.raises(OutboxUnavailableError):
        committer.submit("late")
    committer.close()  # twice is fine
