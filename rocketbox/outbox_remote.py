"""``rocketbox outbox``'s way to change an outbox a running sidecar holds: ask that sidecar, over
rocketbox.v1.OutboxAdminService (proto/rocketbox/v1/outbox_admin.proto).

Which sidecar: ``--sidecar HOST:PORT`` (ROCKETBOX_SIDECAR) when given, for any backend; else,
for a RocksDB outbox, the live holder its holder file names (outbox/holder.py). A holder file
whose pid no longer runs is stale and ignored: the outbox is then opened directly.

A change the server bounds per call (ADMIN_CHANGE_ENTRIES_MAX entries) is made here in as many
calls as it takes: named ids in chunks, ``--all`` page by page; the counts add up. Every call has
a deadline: a holder that does not answer is an error naming it, never a hang.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc

from outbox.admin import ATTEMPTS_BUCKETS, STATE_ORDER, Breakdown, Depth
from outbox.entry import EntryState, OutboxStats, SpoolCause
from rocketbox_api.v1 import outbox_admin_pb2 as pb
from rocketbox_api.v1 import outbox_admin_pb2_grpc

CALL_DEADLINE_S = 30.0
# What one call may name: the server's ADMIN_CHANGE_ENTRIES_MAX (sidecar/outbox_admin_service.py).
IDS_PER_CALL_MAX = 1_000
_UNREACHABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class SidecarAdminError(Exception):
    """A call to the sidecar failed; ``unreachable`` when it could not be reached in time."""

    def __init__(self, message: str, unreachable: bool) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class SidecarOutbox:
    """The outbox a running sidecar holds, changed through it. ``who`` names it in errors:
    "held by rocketbox sidecar pid 1234, admin at 127.0.0.1:8081", say."""

    def __init__(
        self,
        endpoint: str,
        who: str,
        deadline_s: float = CALL_DEADLINE_S,
        token: str | None = None,
    ) -> None:
        """``token``: the bearer token a sidecar started with one asks for."""
        self.endpoint = endpoint
        self._metadata = None if token is None else (("authorization", f"Bearer {token}"),)
        self.who = who
        self._deadline_s = deadline_s
        self._channel = grpc.insecure_channel(endpoint)
        self._stub = outbox_admin_pb2_grpc.OutboxAdminServiceStub(self._channel)
        # Calls the sidecar answered: none means nothing was changed through it.
        self.answered = 0

    def close(self) -> None:
        self._channel.close()

    def retry_now(self, message_ids: Sequence[str] | None) -> int:
        return self._change(self._stub.RetryNow, pb.RetryNowRequest, message_ids)

    def requeue(self, message_ids: Sequence[str] | None) -> int:
        return self._change(self._stub.Requeue, pb.RequeueRequest, message_ids)

    def stats(self) -> tuple[int, OutboxStats, Breakdown]:
        """(the sidecar's clock, the totals, the breakdown) as outbox_render.stats_json takes."""
        answer: pb.StatsResponse = self._call(self._stub.Stats, pb.StatsRequest())
        return from_stats_response(answer)

    def _change(
        self, method: Callable[..., Any], request_type: Any, message_ids: Sequence[str] | None
    ) -> int:
        changed = 0
        if message_ids is not None:
            ids = list(dict.fromkeys(message_ids))  # once each: counts stay exact
            for start in range(0, len(ids), IDS_PER_CALL_MAX):
                chunk = ids[start : start + IDS_PER_CALL_MAX]
                selection = pb.EntrySelection(message_ids=chunk)
                changed += int(self._call(method, request_type(selection=selection)).change.changed)
            return changed
        after_seq = 0
        while True:
            selection = pb.EntrySelection(all=True, after_seq=after_seq)
            change = self._call(method, request_type(selection=selection)).change
            changed += int(change.changed)
            if not change.HasField("next_after_seq"):
                return changed
            after_seq = int(change.next_after_seq)

    def _call(self, method: Callable[..., Any], request: Any) -> Any:
        try:
            answer = method(request, timeout=self._deadline_s, metadata=self._metadata)
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
            if code in _UNREACHABLE_CODES:
                raise SidecarAdminError(
                    f"the outbox is {self.who}, not answering ({code.name}: {details})",
                    unreachable=True,
                ) from e
            raise SidecarAdminError(
                f"the sidecar at {self.endpoint} refused: {code.name}: {details}",
                unreachable=False,
            ) from e
        self.answered += 1
        return answer


def from_stats_response(answer: pb.StatsResponse) -> tuple[int, OutboxStats, Breakdown]:
    def ms(field: str) -> int | None:
        return getattr(answer, field).ToMilliseconds() if answer.HasField(field) else None

    stats = OutboxStats(
        pending=answer.pending,
        in_flight=answer.in_flight,
        delivered=answer.delivered,
        dead=answer.dead,
        bytes=answer.body_bytes,
        oldest_pending_created_ms=ms("oldest_pending_create_time"),
        next_due_ms=ms("next_due_time"),
    )
    attempts = {state: {label: 0 for _, _, label in ATTEMPTS_BUCKETS} for state in STATE_ORDER}
    for histogram in answer.attempts:
        for bucket in histogram.buckets:
            attempts[EntryState(histogram.state)][bucket.label] = bucket.entries
    depth = {
        (EntryState(r.state), r.topic, SpoolCause(r.cause)): Depth(r.entries, r.body_bytes)
        for r in answer.depth
    }
    return answer.read_time.ToMilliseconds(), stats, Breakdown(answer.scanned, depth, attempts)
