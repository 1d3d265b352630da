"""The chaos suite's load generator: a plan's messages sent to a sidecar through its real gRPC
API (rocketbox.v1 Send, SendBatch and SendStream at once), and a record of every answer.

Promises:
- every planned message is sent at most once, under its planned id: never retried, since a
  retry of a message whose call failed may store it twice, and the suite counts the duplicates
  the sidecar and the broker make, not the app's;
- every message sent gets exactly one line in ``answers.jsonl``: STORED, SPOOLED, REJECTED (the
  sidecar said so: a Rejection, or a call status carrying the sidecar's rich error details), or
  NO_ANSWER (the call failed as a whole: the connection broke, the deadline passed; such a
  message may or may not be stored);
- the STORED and SPOOLED answers also go to ``acks.jsonl`` in the sidecar's ack-ledger format
  (sidecar/ledger.py), which ``rocketbox reconcile --acks`` reads;
- calls wait for the sidecar to be reachable (gRPC's wait-for-ready) within their deadline, so a
  sidecar that is down pauses the load rather than failing every message; a rejection with a
  retry-after pauses its lane that long (at most RETRY_AFTER_MAX_S), as an app would.

The load runs on its own thread and event loop; the scenario reads its progress (``answered``)
from another thread to time its faults.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import json
import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import grpc
from google.rpc import code_pb2, error_details_pb2, status_pb2

from chaos.plan import Api, Plan, PlannedMessage
from rocketbox_api.v1 import sidecar_pb2 as api
from rocketbox_api.v1 import sidecar_pb2_grpc

LOG = logging.getLogger(__name__)
ANSWERS_FILE = "answers.jsonl"
ACKS_FILE = "acks.jsonl"
CALL_DEADLINE_S = 30.0
# A stream may live as long as the whole load; this bounds a sidecar that never comes back.
LOAD_DEADLINE_S_DEFAULT = 900.0
# A retry-after longer than this is cut: the load must go on for the scenario to end.
RETRY_AFTER_MAX_S = 2.0
STATUS_DETAILS_KEY = "grpc-status-details-bin"
# A sidecar restarted on its old port is found again within about this long.
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


class Answer(enum.StrEnum):
    STORED = "STORED"
    SPOOLED = "SPOOLED"
    REJECTED = "REJECTED"
    NO_ANSWER = "NO_ANSWER"


class LoadGenerator:
    """Sends ``plan`` to the sidecar at ``target`` and writes ``answers.jsonl`` and
    ``acks.jsonl`` under ``out_dir``. ``start`` returns at once; ``wait`` for the end."""

    def __init__(
        self,
        target: str,
        plan: Plan,
        out_dir: Path,
        *,
        call_deadline_s: float = CALL_DEADLINE_S,
        load_deadline_s: float = LOAD_DEADLINE_S_DEFAULT,
    ) -> None:
        self.target = target
        self.plan = plan
        self.out_dir = out_dir
        self.call_deadline_s = call_deadline_s
        self.load_deadline_s = load_deadline_s
        self.counts: dict[Answer, int] = dict.fromkeys(Answer, 0)
        self.sent = 0
        self.started_s = 0.0
        self.finished_s = 0.0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="chaos-load", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main_task: asyncio.Task[None] | None = None
        self._answers: IO[str] | None = None
        self._acks: IO[str] | None = None
        self._stub: Any = None

    # The scenario's side (another thread).

    @property
    def answered(self) -> int:
        return sum(self.counts.values())

    @property
    def done(self) -> bool:
        return self.started_s > 0 and not self._thread.is_alive()

    def start(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.started_s = time.monotonic()
        self._thread.start()

    def wait(self, deadline_s: float) -> bool:
        """True once the load has ended (every planned message sent and answered, or given up)."""
        self._thread.join(deadline_s)
        return not self._thread.is_alive()

    def cancel(self) -> None:
        """Stop sending; what is in flight is recorded NO_ANSWER."""
        loop, task = self._loop, self._main_task
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._thread.is_alive():
            self.cancel()
            self._thread.join(self.call_deadline_s * 2)

    @property
    def rate_per_s(self) -> float:
        elapsed = (self.finished_s or time.monotonic()) - self.started_s
        return self.answered / elapsed if elapsed > 0 else 0.0

    # The load's thread.

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except asyncio.CancelledError:
            LOG.info("the load was cancelled")
        except BaseException as e:  # kept for the scenario's report, never lost in a thread
            LOG.exception("the load generator failed")
            self.error = e
        finally:
            self.finished_s = time.monotonic()

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._main_task = asyncio.current_task()
        with (
            (self.out_dir / ANSWERS_FILE).open("w", encoding="utf-8") as answers,
            (self.out_dir / ACKS_FILE).open("w", encoding="utf-8") as acks,
        ):
            self._answers, self._acks = answers, acks
            async with grpc.aio.insecure_channel(self.target, options=CHANNEL_OPTIONS) as channel:
                self._stub = sidecar_pb2_grpc.SidecarServiceStub(channel)
                try:
                    async with asyncio.timeout(self.load_deadline_s), asyncio.TaskGroup() as tg:
                        lanes = self.plan.lanes
                        for lane in range(lanes.send_workers):
                            tg.create_task(self._send_lane(self.plan.lane(Api.SEND, lane)))
                        for lane in range(lanes.batch_workers):
                            tg.create_task(self._batch_lane(self.plan.lane(Api.SEND_BATCH, lane)))
                        for lane in range(lanes.streams):
                            tg.create_task(self._stream_lane(self.plan.lane(Api.SEND_STREAM, lane)))
                except TimeoutError:
                    LOG.error("the load did not end within %s s", self.load_deadline_s)

    async def _send_lane(self, messages: list[PlannedMessage]) -> None:
        for m in messages:
            self.sent += 1
            try:
                response = await self._stub.Send(
                    api.SendRequest(message=to_proto(m)),
                    timeout=self.call_deadline_s,
                    wait_for_ready=True,
                )
            except grpc.aio.AioRpcError as e:
                pause_s = self._call_failed([m], e)
            except asyncio.CancelledError:
                self._record(m, Answer.NO_ANSWER, error="the load was cancelled")
                raise
            else:
                pause_s = self._result(m, response.result)
            if pause_s:
                await asyncio.sleep(pause_s)

    async def _batch_lane(self, messages: list[PlannedMessage]) -> None:
        size = self.plan.lanes.batch_messages_max
        for start in range(0, len(messages), size):
            batch = messages[start : start + size]
            self.sent += len(batch)
            try:
                response = await self._stub.SendBatch(
                    api.SendBatchRequest(messages=[to_proto(m) for m in batch]),
                    timeout=self.call_deadline_s,
                    wait_for_ready=True,
                )
            except grpc.aio.AioRpcError as e:
                pause_s = self._call_failed(batch, e)
            except asyncio.CancelledError:
                for m in batch:
                    self._record(m, Answer.NO_ANSWER, error="the load was cancelled")
                raise
            else:
                pause_s = self._batch_results(batch, list(response.results))
            if pause_s:
                await asyncio.sleep(pause_s)

    def _batch_results(self, batch: list[PlannedMessage], results: list[api.SendResult]) -> float:
        pause_s = 0.0
        for i, m in enumerate(batch):
            if i < len(results):
                pause_s = max(pause_s, self._result(m, results[i]))
            else:
                self._record(
                    m, Answer.NO_ANSWER, error=f"SendBatch answered {len(results)} of {len(batch)}"
                )
        return pause_s

    async def _stream_lane(self, messages: list[PlannedMessage]) -> None:
        pending = collections.deque(messages)
        while pending:
            await self._one_stream(pending)

    async def _one_stream(self, pending: collections.deque[PlannedMessage]) -> None:
        """One SendStream for as many of ``pending`` as it carries; a broken stream leaves its
        unanswered messages NO_ANSWER and the rest for the next stream."""
        loop = asyncio.get_running_loop()
        call = self._stub.SendStream(wait_for_ready=True)
        unanswered: dict[int, PlannedMessage] = {}
        slots = asyncio.Semaphore(self.plan.lanes.stream_in_flight_max)
        resume_at = [0.0]

        async def write() -> None:
            try:
                while pending:
                    await slots.acquire()
                    if (delay_s := resume_at[0] - loop.time()) > 0:
                        await asyncio.sleep(delay_s)
                    m = pending.popleft()
                    unanswered[m.index] = m
                    self.sent += 1
                    await call.write(api.SendStreamRequest(request_id=m.index, message=to_proto(m)))
            except Exception as e:  # the call ended under the write: the reader sees how
                LOG.debug("SendStream write: %r", e)
            # Half-close in any case, so that the reader ends once the answers are in, even
            # when a write failed without ending the call.
            with contextlib.suppress(Exception):
                await call.done_writing()

        writer = asyncio.create_task(write())
        why = "the stream ended without answering it"
        try:
            async for response in call:
                m = unanswered.pop(response.request_id, None)
                if m is None:
                    LOG.error("SendStream answered request_id %s, never sent", response.request_id)
                    continue
                if pause_s := self._result(m, response.result):
                    resume_at[0] = loop.time() + pause_s
                slots.release()
        except grpc.aio.AioRpcError as e:
            why = describe(e)
        except asyncio.CancelledError:
            why = "the load was cancelled"
            raise
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            call.cancel()
            for m in unanswered.values():
                self._record(m, Answer.NO_ANSWER, error=why)

    def _call_failed(self, messages: Iterable[PlannedMessage], e: grpc.aio.AioRpcError) -> float:
        """A call's error status: the sidecar's own rejection when it carries the sidecar's rich
        error details (every Rejected does), else the call failed on its way (NO_ANSWER)."""
        status = rich_status(e)
        if status is None:
            for m in messages:
                self._record(m, Answer.NO_ANSWER, error=describe(e))
            return 0.0
        retry_after_ms, field = 0, ""
        for detail in status.details:
            if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                info = error_details_pb2.RetryInfo()
                detail.Unpack(info)
                retry_after_ms = info.retry_delay.ToMilliseconds()
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                field = ",".join(v.field for v in bad.field_violations)
        for m in messages:
            self._record(
                m, Answer.REJECTED, code=e.code().name, field=field, reason=status.message,
                retry_after_ms=retry_after_ms,
            )  # fmt: skip
        return min(retry_after_ms / 1000, RETRY_AFTER_MAX_S)

    def _result(self, m: PlannedMessage, result: api.SendResult) -> float:
        """Records one SendResult; the pause its retry-after asks for."""
        extra: dict[str, Any] = {}
        if result.message_id != m.message_id:
            extra["answered_message_id"] = result.message_id
        kind = result.WhichOneof("outcome")
        if kind == "stored":
            s = result.stored
            self._record(
                m, Answer.STORED, queue_id=s.queue_id, queue_offset=s.queue_offset,
                durable=s.durable, attempts=s.attempts, broker_name=s.broker_name, **extra,
            )  # fmt: skip
        elif kind == "spooled":
            p = result.spooled
            cause = api.SpoolCause.Name(p.cause).removeprefix("SPOOL_CAUSE_")
            self._record(m, Answer.SPOOLED, cause=cause, maybe_stored=p.maybe_stored, **extra)
        elif kind == "rejected":
            r = result.rejected
            retry_after_ms = r.retry_after.ToMilliseconds()
            self._record(
                m, Answer.REJECTED, code=code_pb2.Code.Name(r.code), field=r.field,
                reason=r.reason, retry_after_ms=retry_after_ms, **extra,
            )  # fmt: skip
            return min(retry_after_ms / 1000, RETRY_AFTER_MAX_S)
        else:
            self._record(m, Answer.NO_ANSWER, error="a result without an outcome", **extra)
        return 0.0

    def _record(self, m: PlannedMessage, answer: Answer, **fields: Any) -> None:
        assert self._answers is not None
        assert self._acks is not None
        time_ms = time.time_ns() // 1_000_000
        line: dict[str, Any] = {
            "message_id": m.message_id, "topic": m.topic, "index": m.index, "api": m.api.value,
            "group": m.group, "group_seq": m.group_seq, "state": answer.value,
            "time_ms": time_ms, **fields,
        }  # fmt: skip
        self._answers.write(json.dumps(line, separators=(",", ":")) + "\n")
        ack = ack_line(m, answer, time_ms, fields)
        if ack is not None:
            self._acks.write(json.dumps(ack, separators=(",", ":")) + "\n")
        self.counts[answer] += 1


def ack_line(
    m: PlannedMessage, answer: Answer, time_ms: int, fields: dict[str, Any]
) -> dict[str, Any] | None:
    """The ack-ledger line of an answer (sidecar/ledger.py's format), or None: only STORED and
    SPOOLED are acknowledgements."""
    line: dict[str, Any] = {"message_id": m.message_id, "topic": m.topic, "time_ms": time_ms}
    if answer is Answer.STORED:
        return line | {
            "state": "STORED",
            "queue_id": fields["queue_id"],
            "queue_offset": fields["queue_offset"],
            "durable": fields["durable"],
        }
    if answer is Answer.SPOOLED:
        return line | {"state": "SPOOLED", "cause": fields["cause"]}
    return None


def to_proto(m: PlannedMessage) -> api.Message:
    message = api.Message(topic=m.topic, body=m.body(), message_id=m.message_id)
    if m.group is not None:
        message.message_group = m.group
    return message


def rich_status(e: grpc.aio.AioRpcError) -> status_pb2.Status | None:
    """The google.rpc.Status the server attached to a failed call, if any."""
    for key, value in e.trailing_metadata() or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return None


def describe(e: grpc.aio.AioRpcError) -> str:
    return f"{e.code().name}: {e.details()}"


def read_answers(out_dir: Path) -> list[dict[str, Any]]:
    """Every line of a load's ``answers.jsonl``."""
    with (out_dir / ANSWERS_FILE).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
