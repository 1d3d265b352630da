"""The three questions put to a RocketMQ broker, each one request on its remoting port (10911).

- QUERY_MESSAGE with ``_UNIQUE_KEY_QUERY``: the messages its IndexFile lists under
  ``topic#key`` stored within [beginTimestamp, endTimestamp] (store time, the broker's clock),
  at most the broker's ``defaultQueryMaxNum`` (32), newest index files first. The index keeps a
  hash of the key, not the key: another message may come back, so the caller matches each
  record's own ``UNIQ_KEY`` and topic. SUCCESS carries the records (records.py);
  QUERY_NOT_FOUND means none.
- GET_BROKER_RUNTIME_INFO: a KVTable (``{"table": {name: value}}``) whose
  ``commitLogMaxOffset`` is where the commitlog ends and ``dispatchBehindBytes`` how far behind
  it the dispatcher (ReputMessageService, which builds the consume queues and the index) is.
- GET_BROKER_CONFIG: the broker's settings as ``name=value`` lines; ``messageIndexEnable=false``
  means no index is built and no query can find anything.

``BrokerAnswers`` shares one broker's answers among the lookups (shared.py): where its commitlog
ended, for each lookup that began before the request went out; its ``messageIndexEnable`` for
``BROKER_CONFIG_CACHE_MS``, and only while the connection it was read on is the one in use (a
broker that restarted, perhaps with other settings, is asked again).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rocketbox_api.credentials import Credentials
from sidecar.remoting.connection import RemotingConnection
from sidecar.remoting.errors import RemotingAnswerError, RemotingProtocolError
from sidecar.remoting.protocol import (
    GET_BROKER_CONFIG,
    GET_BROKER_RUNTIME_INFO,
    QUERY_MESSAGE,
    QUERY_NOT_FOUND,
    SUCCESS,
    RemotingCommand,
    request,
)
from sidecar.remoting.records import StoredRecord, decode_records
from sidecar.remoting.route import loads_fastjson
from sidecar.remoting.shared import SharedAnswer

UNIQUE_KEY_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
# The broker replaces maxNum by its defaultQueryMaxNum for a unique key query; the field must
# be there all the same.
QUERY_MAX_NUM = 32
# endTimestamp: no end (Long.MAX_VALUE, as RocketMQ's own clients ask): a store time is the
# broker's clock, which the sidecar's cannot bound.
END_TIMESTAMP_NONE = 2**63 - 1
MESSAGE_INDEX_ENABLE = "messageIndexEnable"
COMMIT_LOG_MAX_OFFSET = "commitLogMaxOffset"
DISPATCH_BEHIND_BYTES = "dispatchBehindBytes"
# How long a broker's messageIndexEnable answer is taken as still true. The setting changes with
# a restart (a new connection asks again) or an admin's updateBrokerConfig, seen this late.
BROKER_CONFIG_CACHE_MS = 30_000


@dataclass(frozen=True, slots=True)
class CommitLogProgress:
    max_offset: int
    # Where the dispatcher is: every record before it is in the index. The broker reports how
    # far behind its confirm offset the dispatcher is, and reads that after the max offset: so
    # this is never more than the truth while the two are one (the default). A broker in
    # controller mode whose replicas lag confirms less than it holds; this then reads the
    # dispatcher further on than it is, by the unconfirmed bytes.
    dispatched_offset: int


async def _ask(
    connection: RemotingConnection,
    code: int,
    fields: dict[str, str],
    deadline: float,
    credentials: Credentials | None,
    also_ok: int = SUCCESS,
) -> RemotingCommand:
    answer = await connection.invoke(request(code, fields, credentials=credentials), deadline)
    if answer.code not in (SUCCESS, also_ok):
        raise RemotingAnswerError(str(connection.address), code, answer.code, answer.remark)
    return answer


async def query_uniq_key(
    connection: RemotingConnection,
    topic: str,
    key: str,
    begin_timestamp_ms: int,
    deadline: float,
    credentials: Credentials | None,
) -> list[StoredRecord]:
    """The records the broker's index lists for ``key`` in ``topic`` (hash matches included)."""
    fields = {
        "topic": topic,
        "key": key,
        "maxNum": str(QUERY_MAX_NUM),
        "beginTimestamp": str(begin_timestamp_ms),
        "endTimestamp": str(END_TIMESTAMP_NONE),
        UNIQUE_KEY_QUERY_FLAG: "true",
    }
    answer = await _ask(connection, QUERY_MESSAGE, fields, deadline, credentials, QUERY_NOT_FOUND)
    if answer.code == QUERY_NOT_FOUND:
        return []
    return decode_records(answer.body, str(connection.address))


async def commit_log_progress(
    connection: RemotingConnection, deadline: float, credentials: Credentials | None
) -> CommitLogProgress:
    answer = await _ask(connection, GET_BROKER_RUNTIME_INFO, {}, deadline, credentials)
    address = str(connection.address)
    try:
        table = loads_fastjson(answer.body.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise RemotingProtocolError(f"{address}: runtime info does not decode: {e}") from e
    values = table.get("table") if isinstance(table, dict) else None
    if not isinstance(values, dict):
        raise RemotingProtocolError(f"{address}: runtime info without its table")
    try:
        max_offset = int(values[COMMIT_LOG_MAX_OFFSET])
        behind = int(values[DISPATCH_BEHIND_BYTES])
    except (KeyError, TypeError, ValueError) as e:
        raise RemotingProtocolError(
            f"{address}: runtime info lacks {COMMIT_LOG_MAX_OFFSET} or {DISPATCH_BEHIND_BYTES}"
        ) from e
    return CommitLogProgress(max_offset, max_offset - behind)


async def index_enabled(
    connection: RemotingConnection, deadline: float, credentials: Credentials | None
) -> bool:
    answer = await _ask(connection, GET_BROKER_CONFIG, {}, deadline, credentials)
    try:
        text = answer.body.decode()
    except UnicodeDecodeError as e:
        raise RemotingProtocolError(f"{connection.address}: broker config is not text") from e
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == MESSAGE_INDEX_ENABLE:
            return value.strip().lower() == "true"
    raise RemotingProtocolError(f"{connection.address}: broker config lacks {MESSAGE_INDEX_ENABLE}")


class BrokerAnswers:
    """One broker's answers shared among the lookups."""

    def __init__(self, credentials: Credentials | None) -> None:
        self.credentials = credentials
        self._progress: SharedAnswer[CommitLogProgress] = SharedAnswer()
        self._index_enabled: tuple[RemotingConnection, SharedAnswer[bool]] | None = None

    async def progress(
        self, connection: RemotingConnection, not_before: float, deadline: float
    ) -> tuple[CommitLogProgress, float]:
        """Where the commitlog ends and the dispatcher is, asked at or after ``not_before``, and
        when it was asked."""
        return await self._progress.get(
            lambda: commit_log_progress(connection, deadline, self.credentials),
            not_before,
            deadline,
        )

    async def index_enabled(self, connection: RemotingConnection, deadline: float) -> bool:
        if self._index_enabled is None or self._index_enabled[0] is not connection:
            self._index_enabled = (connection, SharedAnswer())
        not_before = asyncio.get_running_loop().time() - BROKER_CONFIG_CACHE_MS / 1000.0
        enabled, _ = await self._index_enabled[1].get(
            lambda: index_enabled(connection, deadline, self.credentials), not_before, deadline
        )
        return enabled
