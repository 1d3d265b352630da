"""The sidecar's remoting codec (sidecar/remoting/protocol.py, records.py, route.py) against the
stand-in's own (wire.py) and rocketbox's store codec: frames both ways, both header
serializations, the signature, fastjson's route quirk, and commitlog records of both magic codes
and both host kinds; bad bytes are refused with an error naming what and where, never guessed."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.store.codec.encode import encode_message, finish_record
from broker.store.codec.message import MessageExtBrokerInner
from rocketbox_api.credentials import Credentials
from sidecar.channels import Endpoint
from sidecar.remoting.connection import connect
from sidecar.remoting.errors import RemotingClosedError, RemotingProtocolError
from sidecar.remoting.lookup import begin_timestamp_ms
from sidecar.remoting.protocol import (
    FRAME_BYTES_MAX,
    QUERY_MESSAGE,
    decode,
    encode,
    frame_length,
    request,
)
from sidecar.remoting.records import MESSAGE_MAGIC_CODE_V2, decode_records
from sidecar.remoting.route import loads_fastjson, parse_route
from tests.rocketmq_remoting.wire import (
    JSON,
    ROCKETMQ,
    Answer,
    answer_frame,
    read_request,
    signed_correctly,
)

ADDRESS = "127.0.0.1:10911"


def test_a_request_frame_is_what_a_rocketmq_server_reads() -> None:
    sent = request(QUERY_MESSAGE, {"topic": "Orders", "key": "K"}, body=b"xyz")

    async def read_back() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(encode(sent))
        reader.feed_eof()
        got = await read_request(reader)
        assert got is not None
        assert (got.code, got.opaque, got.version, got.language) == (12, sent.opaque, 401, "PYTHON")
        assert (got.ext, got.body) == ({"topic": "Orders", "key": "K"}, b"xyz")

    asyncio.run(read_back())


@pytest.mark.parametrize("serialization", [JSON, ROCKETMQ])
def test_an_answer_decodes_from_either_header_serialization(serialization: int) -> None:
    frame = answer_frame(
        Answer(22, "can not find message", {"indexLastUpdateTimestamp": "0"}, b"body"),
        opaque=77,
        serialization=serialization,
    )
    length = frame_length(frame[:4], ADDRESS)
    got = decode(frame[4:], ADDRESS)
    assert length == len(frame) - 4
    assert (got.code, got.opaque, got.is_response, got.remark, got.body) == (
        22, 77, True, "can not find message", b"body",
    )  # fmt: skip
    assert got.ext_fields == {"indexLastUpdateTimestamp": "0"}


def test_a_signed_request_passes_rocketmqs_check() -> None:
    credentials = Credentials("sidecar", "s3cret")
    signed = request(12, {"topic": "Orders", "key": "K"}, b"body", credentials)
    assert signed.ext_fields["AccessKey"] == "sidecar"
    assert signed_correctly(signed.ext_fields, b"body", "s3cret")
    assert not signed_correctly(signed.ext_fields, b"other body", "s3cret")


def header_frame(header: bytes, serialization: int = 0, body: bytes = b"") -> bytes:
    return struct.pack(">i", (serialization << 24) | len(header)) + header + body


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (header_frame(b"{not json"), "JSON header does not decode"),
        (header_frame(b"[1]"), "not an object"),
        (header_frame(b'{"code":"0","opaque":1}'), "code is not a number"),
        (header_frame(b'{"code":0}'), "opaque is not a number"),
        (header_frame(b'{"code":0,"opaque":1,"extFields":[1]}'), "extFields or remark"),
        (struct.pack(">i", 99) + b"{}", "header length 99 past the frame's 2 bytes"),
        (header_frame(b"{}", serialization=2), "unknown header serialization 2"),
        (header_frame(b"\x00\x00\x00", serialization=1), "binary header does not decode"),
        (
            header_frame(struct.pack(">hbhiii", 0, 0, 0, 1, 1, 0) + struct.pack(">i", 50), 1),
            "extFields length 50 out of range",
        ),
    ],
)
def test_bad_headers_are_refused_naming_the_fault(payload: bytes, says: str) -> None:
    with pytest.raises(RemotingProtocolError, match=says):
        decode(payload, ADDRESS)


def test_frame_lengths_outside_the_limit_are_refused() -> None:
    for length in (3, FRAME_BYTES_MAX, -1):
        with pytest.raises(RemotingProtocolError, match="outside 4"):
            frame_length(struct.pack(">i", length), ADDRESS)


def test_a_server_sending_an_oversized_frame_fails_the_request_not_the_memory() -> None:
    async def main() -> None:
        async def oversized(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(struct.pack(">i", FRAME_BYTES_MAX + 1))
            await w.drain()
            w.close()

        server = await asyncio.start_server(oversized, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            deadline = asyncio.get_running_loop().time() + 5
            async with connect(Endpoint("127.0.0.1", port), deadline) as connection:
                with pytest.raises(RemotingProtocolError, match="frame length"):
                    await connection.invoke(request(28, {}), deadline)
                with pytest.raises(RemotingProtocolError):
                    await connection.invoke(request(28, {}), deadline)  # not used again
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_a_server_closing_the_connection_fails_the_request_in_flight() -> None:
    async def main() -> None:
        async def closes(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.close()

        server = await asyncio.start_server(closes, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            deadline = asyncio.get_running_loop().time() + 5
            async with connect(Endpoint("127.0.0.1", port), deadline) as connection:
                with pytest.raises(RemotingClosedError):
                    await connection.invoke(request(28, {}), deadline)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_fastjson_keys_are_quoted_and_strings_left_alone() -> None:
    text = '{"brokerDatas":[{"brokerAddrs":{0:"a:1",1:"b:2"},"brokerName":"x{0:y,1:z}"}]}'
    assert loads_fastjson(text) == {
        "brokerDatas": [{"brokerAddrs": {"0": "a:1", "1": "b:2"}, "brokerName": "x{0:y,1:z}"}]
    }
    [group] = parse_route(text.encode(), ADDRESS)
    assert (group.broker_name, group.master) == ("x{0:y,1:z}", Endpoint("a", 1))


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{", "does not decode"),
        (b'{"queueDatas":[]}', "no brokerDatas list"),
        (b'{"brokerDatas":[{"brokerName":"a"}]}', "without name or addresses"),
        (b'{"brokerDatas":[{"brokerName":"a","brokerAddrs":{"0":"nohost"}}]}', "broker a"),
    ],
)
def test_bad_routes_are_refused(body: bytes, says: str) -> None:
    with pytest.raises(RemotingProtocolError, match=says):
        parse_route(body, ADDRESS)


def record(topic: str, message_id: str, host: str, queue_offset: int, phy_offset: int) -> bytes:
    inner = MessageExtBrokerInner(
        topic=topic, body=b"b" * 100, queue_id=3, born_host=(host, 1), store_host=(host, 10911),
        properties={"UNIQ_KEY": message_id, "KEYS": "k1 k2"}, born_timestamp_ms=1,
    )  # fmt: skip
    return finish_record(encode_message(inner, 0), queue_offset, phy_offset, 1_700_000_000_123)


def as_magic_v2(v1: bytes, host_bytes: int) -> bytes:
    """The same record with magic V2: the topic's length in two bytes, the size one more.
    ``host_bytes``: 8 for IPv4 hosts, 20 for IPv6."""
    body_length_at = 48 + host_bytes + 8 + host_bytes + 4 + 8
    (body_length,) = struct.unpack_from(">i", v1, body_length_at)
    topic_at = body_length_at + 4 + body_length
    v2 = v1[:topic_at] + b"\x00" + v1[topic_at:]
    return struct.pack(">ii", len(v2), MESSAGE_MAGIC_CODE_V2) + v2[8:]


def test_records_of_both_magic_codes_and_both_host_kinds_decode() -> None:
    first = record("Orders", "ID-1", "10.0.0.1", 5, 0)
    second = as_magic_v2(record("Orders", "ID-2", "::1", 6, len(first)), host_bytes=20)
    decoded = decode_records(first + second, ADDRESS)
    assert [(r.topic, r.message_id, r.queue_id, r.queue_offset) for r in decoded] == [
        ("Orders", "ID-1", 3, 5), ("Orders", "ID-2", 3, 6),
    ]  # fmt: skip
    assert decoded[0].properties["KEYS"] == "k1 k2"
    assert decoded[1].phy_offset == len(first)
    assert decoded[0].store_timestamp_ms == 1_700_000_000_123


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda r: r[:-5], "runs past"),
        (lambda r: r[:4] + b"\x00\x00\x00\x00" + r[8:], "magic code"),
        (lambda r: r + b"\x00\x00", "record at byte"),
    ],
)
def test_a_damaged_answer_is_refused_not_half_read(damage: object, says: str) -> None:
    good = record("Orders", "ID-1", "10.0.0.1", 5, 0)
    assert callable(damage)
    with pytest.raises(RemotingProtocolError, match=says):
        decode_records(damage(good), ADDRESS)


def test_the_time_range_starts_at_the_v1_ids_time_less_the_skew_and_a_second() -> None:
    seconds = 0x12345678
    v1 = f"01{'AB' * 6}{'0102'}{seconds:08X}{7:08X}"
    stamped_ms = (1_609_459_200 + seconds) * 1000
    assert begin_timestamp_ms(v1, 60_000, now_ms=stamped_ms) == stamped_ms - 61_000
    assert begin_timestamp_ms(v1.lower(), 0, now_ms=stamped_ms) == stamped_ms - 1_000
    assert begin_timestamp_ms(v1, 60_000, now_ms=stamped_ms - 3_600_000) == 0, "ahead of now"
    assert begin_timestamp_ms("C0A8010100002A9F0000000000000001", 60_000, stamped_ms) == 0
    assert begin_timestamp_ms("app-order-1", 60_000, stamped_ms) == 0
    assert begin_timestamp_ms(v1, 10**15, stamped_ms) == 0, "never before the epoch"
