"""The stand-in's side of RocketMQ's remoting frame, written apart from the sidecar's client
(sidecar/remoting/protocol.py) so that the two check each other against the protocol rather
than share a misreading.

A frame: total length (4, big-endian, the bytes after it), header length (4: serialization in
the high byte, 0 JSON / 1 ROCKETMQ, the length in the low three), header, body. The stand-in
reads JSON headers (what the client sends) and answers in either serialization, as a broker
configured with ``rocketmq.serialize.type`` does.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import struct
from dataclasses import dataclass, field

JSON = 0
ROCKETMQ = 1
RESPONSE_FLAG = 1
# The stand-in's own cap on a request (the client sends small ones).
REQUEST_BYTES_MAX = 1024 * 1024


@dataclass
class Request:
    code: int
    opaque: int
    version: int
    language: str
    ext: dict[str, str]
    body: bytes


@dataclass
class Answer:
    code: int
    remark: str | None = None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request; None at a clean end of the connection."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError:
        return None
    (length,) = struct.unpack(">i", head)
    if not 4 <= length <= REQUEST_BYTES_MAX:
        raise ValueError(f"request frame length {length}")
    frame = await reader.readexactly(length)
    (marked,) = struct.unpack_from(">i", frame)
    if marked >> 24 != JSON:
        raise ValueError(f"request header serialization {marked >> 24}, expected JSON")
    header_length = marked & 0xFFFFFF
    header = json.loads(frame[4 : 4 + header_length])
    for name in ("code", "opaque", "version", "flag", "language"):
        if name not in header:
            raise ValueError(f"request header without {name}: {header}")
    ext = header.get("extFields", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in ext.items()):
        raise ValueError(f"extFields must map strings to strings: {ext}")
    return Request(
        header["code"], header["opaque"], header["version"], header["language"], ext,
        frame[4 + header_length :],
    )  # fmt: skip


def answer_frame(answer: Answer, opaque: int, serialization: int) -> bytes:
    if serialization == JSON:
        fields: dict[str, object] = {
            "code": answer.code, "flag": RESPONSE_FLAG, "language": "JAVA", "opaque": opaque,
            "serializeTypeCurrentRPC": "JSON", "version": 479,
        }  # fmt: skip
        if answer.remark is not None:
            fields["remark"] = answer.remark
        if answer.ext:
            fields["extFields"] = answer.ext
        header = json.dumps(fields).encode()
    else:
        header = _binary_header(answer, opaque)
    return (
        struct.pack(">ii", 4 + len(header) + len(answer.body), (serialization << 24) | len(header))
        + header
        + answer.body
    )


def _binary_header(answer: Answer, opaque: int) -> bytes:
    remark = (answer.remark or "").encode()
    ext = b"".join(
        struct.pack(">h", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode()))
        + v.encode()
        for k, v in answer.ext.items()
    )  # fmt: skip
    return (
        struct.pack(">hbhii", answer.code, 0, 479, opaque, RESPONSE_FLAG)
        + struct.pack(">i", len(remark)) + remark
        + struct.pack(">i", len(ext)) + ext
    )  # fmt: skip


def signed_correctly(ext: dict[str, str], body: bytes, secret_key: str) -> bool:
    """RocketMQ's ACL check: HMAC-SHA1 over the sorted extFields values but the signature's,
    then the body, Base64."""
    content = "".join(ext[k] for k in sorted(ext) if k != "Signature").encode() + body
    expected = base64.b64encode(hmac.new(secret_key.encode(), content, hashlib.sha1).digest())
    return hmac.compare_digest(expected.decode(), ext.get("Signature", ""))
