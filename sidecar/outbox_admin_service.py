"""rocketbox.v1.OutboxAdminService: the running sidecar's outbox, administered through it
(proto/rocketbox/v1/outbox_admin.proto says what each call promises).

Thin: validate the selection → call the contract through the sidecar's AsyncOutbox → answer. A
change is bounded by ``ADMIN_CHANGE_ENTRIES_MAX`` per call (named ids, or one page read in seq
order), and answers the outbox's own count of what changed; the CLI pages through an ``all``.
After a change the resend pool is woken: the entries made due are sent now, not at its next poll.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from outbox.admin import Breakdown
from outbox.entry import EntryState, OutboxStats
from outbox.errors import OutboxError
from rocketbox_api.v1 import outbox_admin_pb2 as pb
from rocketbox_api.v1 import outbox_admin_pb2_grpc
from sidecar.async_outbox import AsyncOutbox
from sidecar.clock import now_ms

# Entries one change call may name, or read as its page: bounds the call's time and its lock
# holding in the backend (a RocksDB change runs under the store's lock).
ADMIN_CHANGE_ENTRIES_MAX = 1_000
# Depth rows one Stats answer carries (one per state, topic and cause): bounds the answer's size.
STATS_DEPTH_ROWS_MAX = 1_000
# seq is a signed 64-bit integer in every backend (MySQL's BIGINT).
SEQ_MAX = 2**63 - 1
# A message id is at most 128 characters (sidecar.proto); a longer one cannot be in the outbox.
MESSAGE_ID_CHARS_MAX = 128

Change = Callable[[Sequence[str], int], Awaitable[int]]


class OutboxAdminService(outbox_admin_pb2_grpc.OutboxAdminServiceServicer):  # type: ignore[misc]  # the generated servicer base is untyped
    def __init__(self, outbox: AsyncOutbox, wake: Callable[[], None]) -> None:
        self._outbox = outbox
        self._wake = wake

    async def RetryNow(  # noqa: N802 - the API's name
        self, request: pb.RetryNowRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RetryNowResponse:
        change = await self._change(
            request.selection, EntryState.PENDING, self._outbox.retry_now, context
        )
        return pb.RetryNowResponse(change=change)

    async def Requeue(  # noqa: N802 - the API's name
        self, request: pb.RequeueRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RequeueResponse:
        change = await self._change(
            request.selection, EntryState.DEAD, self._outbox.requeue, context
        )
        return pb.RequeueResponse(change=change)

    async def Stats(  # noqa: N802 - the API's name
        self, request: pb.StatsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.StatsResponse:
        read_ms = now_ms()
        try:
            stats = await self._outbox.stats(read_ms)
            found = await self._outbox.breakdown()
        except OutboxError as e:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, f"the outbox: {e}")
        return stats_response(read_ms, stats, found)

    async def _change(
        self,
        selection: pb.EntrySelection,
        state: EntryState,
        change: Change,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.EntryChange:
        ids = list(selection.message_ids)
        await _check_selection(selection, ids, context)
        next_after_seq: int | None = None
        try:
            if selection.all:
                page = await self._outbox.scan(state, selection.after_seq, ADMIN_CHANGE_ENTRIES_MAX)
                ids = [e.message.message_id for e in page]
                if len(page) == ADMIN_CHANGE_ENTRIES_MAX:
                    next_after_seq = page[-1].seq
            changed = await change(ids, now_ms()) if ids else 0
        except OutboxError as e:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, f"the outbox: {e}")
        if changed:
            self._wake()
        return pb.EntryChange(changed=changed, selected=len(ids), next_after_seq=next_after_seq)


async def _check_selection(
    selection: pb.EntrySelection, ids: list[str], context: grpc.aio.ServicerContext[Any, Any]
) -> None:
    problem = ""
    if bool(ids) == selection.all:
        problem = "selection: name entries in message_ids, or set all (one of the two)"
    elif len(ids) > ADMIN_CHANGE_ENTRIES_MAX:
        problem = (
            f"selection.message_ids: has {len(ids)} ids; the limit is {ADMIN_CHANGE_ENTRIES_MAX}"
        )
    elif selection.after_seq > SEQ_MAX:
        problem = f"selection.after_seq: is {selection.after_seq}; the limit is {SEQ_MAX}"
    elif not selection.all and selection.after_seq:
        problem = "selection.after_seq: pages an all selection; named ids take none"
    elif any(not i or len(i) > MESSAGE_ID_CHARS_MAX for i in ids):
        problem = f"selection.message_ids: an id is empty or over {MESSAGE_ID_CHARS_MAX} characters"
    if problem:
        await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, problem)


def stats_response(read_ms: int, stats: OutboxStats, found: Breakdown) -> pb.StatsResponse:
    rows = [
        pb.DepthRow(
            state=state.value,
            topic=topic,
            cause=cause.value,
            entries=depth.entries,
            body_bytes=depth.body_bytes,
        )
        for (state, topic, cause), depth in found.depth.items()
    ]
    return pb.StatsResponse(
        read_time=_timestamp(read_ms),
        pending=stats.pending,
        in_flight=stats.in_flight,
        delivered=stats.delivered,
        dead=stats.dead,
        body_bytes=stats.bytes,
        oldest_pending_create_time=_timestamp(stats.oldest_pending_created_ms),
        next_due_time=_timestamp(stats.next_due_ms),
        scanned=found.scanned,
        depth=rows[:STATS_DEPTH_ROWS_MAX],
        depth_rows_left_out=max(0, len(rows) - STATS_DEPTH_ROWS_MAX),
        attempts=[
            pb.AttemptsHistogram(
                state=state.value,
                buckets=[pb.AttemptsBucket(label=k, entries=v) for k, v in buckets.items()],
            )
            for state, buckets in found.attempts.items()
        ],
    )


def _timestamp(ms: int | None) -> Timestamp | None:
    if ms is None:
        return None
    t = Timestamp()
    t.FromMilliseconds(ms)
    return t


async def _abort(
    context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, details: str
) -> NoReturn:
    await context.abort(code, details)
    raise AssertionError("abort returns only by raising")
