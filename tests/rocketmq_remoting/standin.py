"""A stand-in Apache RocketMQ NameServer and brokers on their remoting ports, written from the
protocol: real asyncio TCP servers on 127.0.0.1, port 0 each, serving what the sidecar's index
lookup asks (sidecar/remoting/).

- The NameServer answers GET_ROUTEINFO_BY_TOPIC (105) with TopicRouteData: every stand-in broker
  as a group whose master (broker id 0) is that broker's address, or TOPIC_NOT_EXIST (17) for a
  topic outside ``topics`` when that is set. ``fastjson_keys`` writes ``brokerAddrs`` as an old
  NameServer does, its keys unquoted; ``masterless`` lists groups routed without a master.
- A broker answers QUERY_MESSAGE (12) from what it holds: the messages of its name that its
  ``source`` gives, each a commitlog record encoded by rocketbox's own store codec
  (broker/store/codec), stored under its topic, or, a delayed message still ``waiting``, under
  ``rmq_sys_wheel_timer`` with its own in ``REAL_TOPIC`` / ``REAL_QID``. A unique key query
  (``_UNIQUE_KEY_QUERY``) returns at most 32, newest first, within the time range; ``collide``
  returns every message it holds, whatever its key or topic, as hash collisions in a real index
  (which keeps a hash of ``topic#key``, not the key) would. The time range is matched as an
  IndexFile matches it: against the store time in whole seconds after the file's first.
  GET_BROKER_RUNTIME_INFO (28) reports ``commitLogMaxOffset`` and ``dispatchBehindBytes``;
  GET_BROKER_CONFIG (26) ``messageIndexEnable``. Anything else is REQUEST_CODE_NOT_SUPPORTED (3).
- Dispatch lag: the newest ``undispatched`` messages are not in the index yet; each runtime info
  answer is followed by one more dispatched (none while ``dispatch_stuck``).
- Faults: ``answer_code`` answers every request so, ``fail_next`` the next few SYSTEM_ERROR;
  ``refused_codes`` and ``refused_topics`` answer those requests NO_PERMISSION, as an ACL would;
  ``hang`` reads requests, answers none;
  ``serialization`` answers in ROCKETMQ's binary header; ``credentials`` requires every request
  signed with them (NO_PERMISSION otherwise); ``stop()`` closes the port.

Each server records the request codes it was asked (``asked``), how many connections it took
(``accepted``) and how many are open (``open_connections``). Handlers run on the loop of the
test that started them: no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from broker.store.codec.encode import encode_message, finish_record
from broker.store.codec.message import MessageExtBrokerInner
from rocketbox_api.credentials import Credentials
from tests.rocketmq_remoting.wire import JSON, Answer, Request, answer_frame, read_request
from tests.rocketmq_remoting.wire import signed_correctly as signed

TIMER_TOPIC = "rmq_sys_wheel_timer"
QUERY_MAX_NUM = 32
SYSTEM_ERROR = 1
NO_PERMISSION = 16
TOPIC_NOT_EXIST = 17
QUERY_NOT_FOUND = 22
NOT_SUPPORTED = 3
STORE_HOST = ("127.0.0.1", 10911)


@dataclass(frozen=True)
class HeldMessage:
    topic: str
    message_id: str
    queue_id: int = 0
    queue_offset: int = 0
    store_timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    broker_name: str = "broker-a"
    # A delayed message before its time: held under the timer topic.
    waiting: bool = False
    body: bytes = b"payload"


# What the stand-in brokers hold, in store order; a later call returns the same, perhaps with more
# at its end (a broker's commitlog only grows).
MessageSource = Callable[[], Sequence[HeldMessage]]


class _Server:
    def __init__(self) -> None:
        self.port = 0
        self.asked: list[int] = []
        self.accepted = 0
        self.answer_code: int | None = None
        self.hang = False
        self.serialization = JSON
        self.credentials: Credentials | None = None
        # Requests of these codes, and queries of these topics, answered NO_PERMISSION (an ACL
        # that grants the sidecar less than everything).
        self.refused_codes: set[int] = set()
        self.refused_topics: set[str] = set()
        # The next this many requests answered SYSTEM_ERROR, whatever they ask.
        self.fail_next = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close the port and every connection (the port is kept for a later ``start``)."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._connections):
                writer.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        self.accepted += 1
        try:
            while (request := await read_request(reader)) is not None:
                self.asked.append(request.code)
                if self.hang:
                    continue
                writer.write(
                    answer_frame(self._answer(request), request.opaque, self.serialization)
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away: nothing to answer
        finally:
            self._connections.discard(writer)
            writer.close()

    def _answer(self, request: Request) -> Answer:
        if self.answer_code is not None:
            return Answer(self.answer_code, "scripted answer")
        if self.fail_next > 0:
            self.fail_next -= 1
            return Answer(SYSTEM_ERROR, "scripted failure")
        if self.credentials is not None and not (
            request.ext.get("AccessKey") == self.credentials.access_key
            and signed(request.ext, request.body, self.credentials.secret_key)
        ):
            return Answer(NO_PERMISSION, "signature does not match")
        if request.code in self.refused_codes or request.ext.get("topic") in self.refused_topics:
            return Answer(NO_PERMISSION, "no permission")
        return self.handle(request)

    def handle(self, request: Request) -> Answer:
        raise NotImplementedError


class StandInBroker(_Server):
    def __init__(self, name: str, source: MessageSource) -> None:
        super().__init__()
        self.name = name
        self._source = source
        self.index_enabled = True
        self.undispatched = 0
        self.dispatch_stuck = False
        self.collide = False
        # What this broker holds, in store order: (message, stored topic, record bytes); the
        # source's entries read so far, and where each (stored topic, id) is.
        self._records: list[tuple[HeldMessage, str, bytes]] = []
        self._read = 0
        self._by_key: dict[tuple[str, str], list[int]] = {}
        self._bytes = 0

    def _sync(self) -> None:
        """Encode what the source appended since the last request (it only ever appends)."""
        held = self._source()
        for m in held[self._read :]:
            if m.broker_name != self.name:
                continue
            properties = {"UNIQ_KEY": m.message_id, "WAIT": "true"}
            topic, queue_id = m.topic, m.queue_id
            if m.waiting:
                properties |= {"REAL_TOPIC": m.topic, "REAL_QID": str(m.queue_id)}
                topic, queue_id = TIMER_TOPIC, 0
            inner = MessageExtBrokerInner(
                topic=topic, body=m.body, queue_id=queue_id, properties=properties,
                born_timestamp_ms=m.store_timestamp_ms, born_host=("127.0.0.1", 50000),
                store_host=STORE_HOST,
            )  # fmt: skip
            record = finish_record(
                encode_message(inner, 0), m.queue_offset, self._bytes, m.store_timestamp_ms
            )
            self._by_key.setdefault((topic, m.message_id), []).append(len(self._records))
            self._records.append((m, topic, record))
            self._bytes += len(record)
        self._read = len(held)

    def _index_time_ms(self, store_timestamp_ms: int) -> int:
        """A store time as an index entry keeps it: whole seconds after the index file's first
        store time (one file here, begun by the first record)."""
        begin_ms = self._records[0][0].store_timestamp_ms
        return begin_ms + (store_timestamp_ms - begin_ms) // 1000 * 1000

    def _indexed_count(self) -> int:
        return len(self._records) - min(self.undispatched, len(self._records))

    def handle(self, request: Request) -> Answer:
        if request.code == 12:
            return self._query(request)
        if request.code == 28:
            self._sync()
            behind = sum(len(r) for _, _, r in self._records[self._indexed_count() :])
            table = {
                "commitLogMaxOffset": str(self._bytes),
                "dispatchBehindBytes": str(behind),
                "brokerVersionDesc": "V5_3_3",
            }
            if self.undispatched and not self.dispatch_stuck:
                self.undispatched -= 1
            return Answer(0, body=json.dumps({"table": table}).encode())
        if request.code == 26:
            enabled = "true" if self.index_enabled else "false"
            text = f"brokerName={self.name}\nmessageIndexEnable={enabled}\nlistenPort=10911\n"
            return Answer(0, ext={"version": "{}"}, body=text.encode())
        return Answer(NOT_SUPPORTED, f" request type {request.code} not supported")

    def _query(self, request: Request) -> Answer:
        ext = request.ext
        topic, key = ext["topic"], ext["key"]
        begin, end = int(ext["beginTimestamp"]), int(ext["endTimestamp"])
        max_num = QUERY_MAX_NUM if ext.get("_UNIQUE_KEY_QUERY") == "true" else int(ext["maxNum"])
        self._sync()
        indexed = self._indexed_count() if self.index_enabled else 0
        if self.collide:
            found = list(range(indexed))
        else:
            found = [i for i in self._by_key.get((topic, key), []) if i < indexed]
        hits = [
            self._records[i][2]
            for i in reversed(found)
            if begin <= self._index_time_ms(self._records[i][0].store_timestamp_ms) <= end
        ][:max_num]
        last = {"indexLastUpdateTimestamp": "0", "indexLastUpdatePhyoffset": "0"}
        if not hits:
            return Answer(
                QUERY_NOT_FOUND, "can not find message, maybe time range not correct", last
            )
        return Answer(0, None, last, b"".join(hits))


class StandInNamesrv(_Server):
    def __init__(self, brokers: dict[str, StandInBroker]) -> None:
        super().__init__()
        self._brokers = brokers
        self.topics: set[str] | None = None
        self.fastjson_keys = False
        self.masterless: set[str] = set()

    def handle(self, request: Request) -> Answer:
        if request.code != 105:
            return Answer(NOT_SUPPORTED, f" request type {request.code} not supported")
        topic = request.ext["topic"]
        if self.topics is not None and topic not in self.topics:
            return Answer(
                TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}"
            )
        datas = [
            {"brokerAddrs": {} if name in self.masterless else {"0": b.address},
             "brokerName": name, "cluster": "DefaultCluster", "enableActingMaster": False}
            for name, b in self._brokers.items()
        ]  # fmt: skip
        queues = [
            {"brokerName": name, "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
             "writeQueueNums": 4}
            for name in self._brokers
        ]  # fmt: skip
        text = json.dumps({"brokerDatas": datas, "filterServerTable": {}, "queueDatas": queues})
        if self.fastjson_keys:
            text = text.replace('{"0":', "{0:")
        return Answer(0, body=text.encode())


@dataclass
class RemotingCluster:
    namesrv: StandInNamesrv
    brokers: dict[str, StandInBroker] = field(default_factory=dict)

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.address


@contextlib.asynccontextmanager
async def remoting_cluster(
    source: MessageSource, broker_names: tuple[str, ...] = ("broker-a",)
) -> AsyncIterator[RemotingCluster]:
    """A NameServer and one stand-in broker per name, serving until the block ends."""
    brokers = {name: StandInBroker(name, source) for name in broker_names}
    cluster = RemotingCluster(StandInNamesrv(brokers), brokers)
    servers: list[_Server] = [cluster.namesrv, *brokers.values()]
    try:
        for server in servers:
            await server.start()
        yield cluster
    finally:
        for server in servers:
            await server.stop()
