"""RocketMQ's remoting command: the frame every NameServer and broker request and answer is.

A frame on the wire (big-endian)::

    length (4)          bytes after this field: 4 + header + body
    header length (4)   the header's byte count in the low 24 bits; the high byte says how the
                        header is serialized: 0 JSON, 1 ROCKETMQ (binary)
    header              the command's fields: code, language, version, opaque, flag, remark,
                        extFields (a string → string map carrying the request's own fields)
    body                the rest: a route's JSON, stored messages, a table ...

``flag`` bit 0 marks an answer, bit 1 a one-way request (none is sent here). An answer carries
its request's ``opaque``, so answers may come in any order on one connection. Requests are sent
with a JSON header; a broker answers in the serialization it is configured for (JSON unless
``rocketmq.serialize.type`` says ROCKETMQ), so both are read.

With credentials the request is signed as RocketMQ's ACL client hook signs it: ``AccessKey`` is
added to extFields, and ``Signature`` is the Base64 HMAC-SHA1, under the secret key, of every
extFields value in key order followed by the body.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import struct
from dataclasses import dataclass, field

from rocketbox_api.credentials import Credentials
from sidecar.remoting.errors import RemotingProtocolError

# Request codes (RocketMQ's RequestCode).
GET_BROKER_CONFIG = 26
GET_BROKER_RUNTIME_INFO = 28
QUERY_MESSAGE = 12
GET_ROUTEINFO_BY_TOPIC = 105
# Response codes (RemotingSysResponseCode, ResponseCode).
SUCCESS = 0
SYSTEM_ERROR = 1
REQUEST_CODE_NOT_SUPPORTED = 3
NO_PERMISSION = 16
TOPIC_NOT_EXIST = 17
QUERY_NOT_FOUND = 22

SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
RESPONSE_FLAG = 0b01
ONEWAY_FLAG = 0b10
# LanguageCode: the JSON header names it, the binary header numbers it.
LANGUAGE = "PYTHON"
LANGUAGE_CODES = {0: "JAVA", 1: "CPP", 2: "DOTNET", 3: "PYTHON", 7: "OTHER", 9: "GO", 12: "RUST"}
# MQVersion.Version.V4_9_4's ordinal: from this version on a NameServer answers routes in
# standard JSON (quoted map keys) whether or not the request asks for it.
REMOTING_VERSION = 401

# The largest frame read: RocketMQ's own (com.rocketmq.remoting.frameMaxLength), which a real
# broker's clients are held to as well.
FRAME_BYTES_MAX = 16 * 1024 * 1024
LENGTH = struct.Struct(">i")
FRAME_HEAD = struct.Struct(">ii")
_BINARY_HEAD = struct.Struct(">hbhii")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER_LENGTH_MASK = 0xFFFFFF

ACCESS_KEY_FIELD = "AccessKey"
SIGNATURE_FIELD = "Signature"


@dataclass(frozen=True, slots=True)
class RemotingCommand:
    code: int
    opaque: int
    flag: int = 0
    ext_fields: dict[str, str] = field(default_factory=dict)
    remark: str | None = None
    body: bytes = b""
    version: int = REMOTING_VERSION
    language: str = LANGUAGE

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)


_opaques = itertools.count(1)


def next_opaque() -> int:
    """A request id unique among this process's requests in flight (it wraps at 2**31)."""
    return next(_opaques) & 0x7FFFFFFF


def request(
    code: int,
    ext_fields: dict[str, str],
    body: bytes = b"",
    credentials: Credentials | None = None,
) -> RemotingCommand:
    fields = dict(ext_fields)
    if credentials is not None:
        fields[ACCESS_KEY_FIELD] = credentials.access_key
        fields[SIGNATURE_FIELD] = signature(fields, body, credentials.secret_key)
    return RemotingCommand(code=code, opaque=next_opaque(), ext_fields=fields, body=body)


def signature(ext_fields: dict[str, str], body: bytes, secret_key: str) -> str:
    content = "".join(v for k, v in sorted(ext_fields.items()) if k != SIGNATURE_FIELD)
    digest = hmac.new(secret_key.encode(), content.encode() + body, hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def encode(command: RemotingCommand) -> bytes:
    """The whole frame, length first, with a JSON header."""
    header: dict[str, object] = {
        "code": command.code,
        "language": command.language,
        "version": command.version,
        "opaque": command.opaque,
        "flag": command.flag,
        "serializeTypeCurrentRPC": "JSON",
    }
    if command.remark is not None:
        header["remark"] = command.remark
    if command.ext_fields:
        header["extFields"] = command.ext_fields
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    length = 4 + len(header_bytes) + len(command.body)
    if length + 4 > FRAME_BYTES_MAX:
        raise RemotingProtocolError(f"a frame of {length + 4} bytes is over {FRAME_BYTES_MAX}")
    head = FRAME_HEAD.pack(length, (SERIALIZE_JSON << 24) | len(header_bytes))
    return head + header_bytes + command.body


def frame_length(prefix: bytes, address: str) -> int:
    """The byte count after the 4-byte length ``prefix``, checked against the limits."""
    length: int = LENGTH.unpack(prefix)[0]
    if not 4 <= length <= FRAME_BYTES_MAX - 4:
        raise RemotingProtocolError(
            f"{address}: frame length {length} outside 4..{FRAME_BYTES_MAX - 4}"
        )
    return length


def decode(payload: bytes, address: str) -> RemotingCommand:
    """A command from the bytes after a frame's length field."""
    (marked,) = _I32.unpack_from(payload)
    serialize_type = (marked >> 24) & 0xFF
    header_length = marked & _HEADER_LENGTH_MASK
    if header_length > len(payload) - 4:
        raise RemotingProtocolError(
            f"{address}: header length {header_length} past the frame's {len(payload) - 4} bytes"
        )
    header = payload[4 : 4 + header_length]
    body = payload[4 + header_length :]
    if serialize_type == SERIALIZE_JSON:
        return _json_header(header, body, address)
    if serialize_type == SERIALIZE_ROCKETMQ:
        return _binary_header(header, body, address)
    raise RemotingProtocolError(f"{address}: unknown header serialization {serialize_type}")


def _json_header(header: bytes, body: bytes, address: str) -> RemotingCommand:
    try:
        fields = json.loads(header)
    except (UnicodeDecodeError, ValueError) as e:
        raise RemotingProtocolError(f"{address}: JSON header does not decode: {e}") from e
    if not isinstance(fields, dict):
        raise RemotingProtocolError(f"{address}: JSON header is not an object")
    ext = fields.get("extFields") or {}
    remark = fields.get("remark")
    if not isinstance(ext, dict) or not (remark is None or isinstance(remark, str)):
        raise RemotingProtocolError(f"{address}: JSON header's extFields or remark: {fields}")
    return RemotingCommand(
        code=_int_field(fields, "code", None, address),
        opaque=_int_field(fields, "opaque", None, address),
        flag=_int_field(fields, "flag", 0, address),
        ext_fields={str(k): _text(v) for k, v in ext.items()},
        remark=remark,
        body=body,
        version=_int_field(fields, "version", 0, address),
        language=str(fields.get("language", "JAVA")),
    )


def _int_field(fields: dict[str, object], name: str, default: int | None, address: str) -> int:
    value = fields.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise RemotingProtocolError(f"{address}: JSON header's {name} is not a number: {value!r}")
    return value


def _text(value: object) -> str:
    """An extFields value as RocketMQ means it: a string (JSON may carry a number or a bool)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _binary_header(header: bytes, body: bytes, address: str) -> RemotingCommand:
    """RocketMQSerializable's layout: code (2), language (1), version (2), opaque (4), flag (4),
    remark (4-byte length + UTF-8), extFields (4-byte length, then per entry a 2-byte key length,
    the key, a 4-byte value length, the value)."""
    try:
        code, language, version, opaque, flag = _BINARY_HEAD.unpack_from(header)
        at = _BINARY_HEAD.size
        remark, at = _binary_string(header, at, _I32)
        (ext_length,) = _I32.unpack_from(header, at)
        at += 4
        end = at + ext_length
        if ext_length < 0 or end > len(header):
            raise RemotingProtocolError(f"{address}: extFields length {ext_length} out of range")
        ext: dict[str, str] = {}
        while at < end:
            key, at = _binary_string(header, at, _I16)
            value, at = _binary_string(header, at, _I32)
            ext[key or ""] = value or ""
        if at != end:
            raise RemotingProtocolError(f"{address}: extFields overran their length")
    except (struct.error, UnicodeDecodeError) as e:
        raise RemotingProtocolError(f"{address}: binary header does not decode: {e}") from e
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        ext_fields=ext,
        remark=remark,
        body=body,
        version=version,
        language=LANGUAGE_CODES.get(language, "OTHER"),
    )


def _binary_string(buf: bytes, at: int, length_field: struct.Struct) -> tuple[str | None, int]:
    (length,) = length_field.unpack_from(buf, at)
    at += length_field.size
    if length < 0 or at + length > len(buf):
        raise struct.error(f"a string of {length} bytes at {at} runs past the header")
    if length == 0:
        return None, at
    return buf[at : at + length].decode(), at + length
