"""SendMessage at the front: an official client's messages through the sidecar's intake.

Each ``apache.rocketmq.v2.Message`` becomes an OutboxMessage under the app's own message id (so
the app's logs, the broker and the reconciliation agree), and passes the same boundary as a
rocketbox.v1 message (sidecar/server.py's ``accept``: admission control, the shutting down
refusal, metrics, the ledger, INTERNAL on a bug). Its answer, in the protocol's words:

- STORED: OK, with what the broker answered: its message id, queue offset and transaction id;
- SPOOLED: OK, with the message id and ``offset = -1``. This is the product's promise: the
  message is durable in the outbox and will be delivered; its offset is not known yet (it is the
  broker's, given when the resend stores it). Both official clients hand the offset to the app
  as it is (a Python SendReceipt's ``offset``, a Node one's ``offset``), and -1 is what
  RocketMQ itself uses for "no offset", so an app that logs it cannot take it for a real one;
- REJECTED: the protocol's code (codes.py) and a message naming the field and the limit.

One message (what both clients send): the top-level status is its entry's, the only one the
Python client reads (docs/rocketmq-protocol.md §4.2). Several: one entry each, in order, and the
top-level status their shared one, or MULTIPLE_RESULTS. A request over the sidecar's limits
(``send_batch_entries_max`` messages, ``send_batch_bytes_max`` bytes of bodies) is refused as a
whole before any message is started, every entry answered with that refusal.

The message's type must agree with its properties, as the proxy checks them
(MESSAGE_PROPERTY_CONFLICT_WITH_TYPE): FIFO needs a message group, DELAY a delivery time, NORMAL
neither. TRANSACTION messages are not the outbox's: a half message must reach the broker now, and
only the broker can later commit it or check back with the app, so a request of TRANSACTION
messages is forwarded to the broker as it came (bytes and the app's metadata); one mixing them
with other types is refused (BAD_REQUEST).

Namespaces: the sidecar sends with its own producer identity under its own ``--namespace``: the
outbox and the producer that drains it belong to one namespace, and a spooled message carries no
namespace of its own to be resent under. So a request naming another namespace (the
``x-mq-namespace`` header, or a topic's ``resource_namespace``) is refused, naming both, rather
than stored in a namespace the app did not ask for.

``body_encoding`` GZIP: the outbox and the producer carry bodies as IDENTITY (rocketbox's broker
stores a body as given and delivers it as IDENTITY), so a GZIP body is decompressed here, bounded
by the body limit, and sent on as IDENTITY: a consumer receives the very bytes the app gave its
SDK, as it would through a proxy, whose consumers decompress. A body that does not decompress is
refused (BAD_REQUEST naming body_encoding); no body is ever changed in meaning.
"""

from __future__ import annotations

import asyncio
import functools
import zlib
from collections.abc import Coroutine, Sequence
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from rocketmq.grpc_protocol import Code, definition_pb2
from rocketmq.grpc_protocol import service_pb2 as spb

from outbox.entry import OutboxMessage
from rocketbox_api.message_rules import BODY_BYTES_MAX
from rocketbox_api.tracing import traced_properties
from sidecar.clock import now_ms
from sidecar.errors import SendRejectedError
from sidecar.intake import Stored
from sidecar.ledger import SentAnswer
from sidecar.rocketmq_front.codes import reason, rocketmq_code
from sidecar.rocketmq_front.upstream import Upstream, forwarded_metadata, remaining_s
from sidecar.server import Outcome, SidecarService
from sidecar.tracing import call_trace
from sidecar.validation import validate_timestamp

Context = grpc.aio.ServicerContext[Any, Any]
NAMESPACE_HEADER = "x-mq-namespace"
# What a spooled message's entry says of its queue offset: not known yet (module docstring).
SPOOLED_OFFSET = -1
# zlib's window bits that accept a gzip or a zlib header (the Python client reads both).
GZIP_OR_ZLIB_WBITS = 32 + zlib.MAX_WBITS
OK = definition_pb2.Status(code=Code.OK, message="OK")


class FrontSend:
    def __init__(self, service: SidecarService, upstream: Upstream, namespace: str) -> None:
        self._service = service
        self._upstream = upstream
        self._namespace = namespace

    async def send_message(self, raw: bytes, context: Context) -> bytes:
        """The SendMessage handler: bytes in, so a TRANSACTION request is forwarded as it came."""
        try:
            request = spb.SendMessageRequest.FromString(raw)
        except DecodeError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"SendMessageRequest: {e}")
            raise  # abort raises; for the type checker
        messages = request.messages
        types = {m.system_properties.message_type for m in messages}
        if definition_pb2.TRANSACTION in types and len(types) == 1:
            return await self._forward(raw, context)
        refusal = self._refusal(request, context, types)
        if refusal is not None:
            entries = [_refused_entry(refusal, m) for m in messages]
            return bytes(_answer(entries, refusal).SerializeToString())
        trace = call_trace(context)
        outcomes = await asyncio.gather(
            *(self._accept(m, trace) for m in messages), return_exceptions=True
        )
        answers: list[Outcome] = []
        for m, outcome in zip(messages, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                answers.append(self._service.failed(outcome, m.system_properties.message_id))
            else:
                answers.append(outcome)
        sent: list[SentAnswer] = [a.sent for a in answers if a.sent is not None]
        self._service.record_when_done(context, sent)
        return bytes(_answer([_entry(a) for a in answers]).SerializeToString())

    def _accept(
        self, m: definition_pb2.Message, trace: dict[str, str] | None
    ) -> Coroutine[Any, Any, Outcome]:
        return self._service.accept(
            functools.partial(_app_message_id, m),
            functools.partial(to_outbox_message, m, trace=trace),
        )

    def _refusal(
        self, request: spb.SendMessageRequest, context: Context, types: set[int]
    ) -> spb.SendResultEntry | None:
        """Why the request is refused as a whole, before any of its messages is started."""
        messages = request.messages
        if not messages:
            return _refused(Code.MESSAGE_CORRUPTED, "messages: is empty (1 message at least)")
        if definition_pb2.TRANSACTION in types:
            return _refused(
                Code.BAD_REQUEST,
                "messages: TRANSACTION messages cannot share a request with other types "
                "(a half message goes to the broker now, the others through the outbox)",
            )
        given = _namespace_given(context, messages)
        if given != self._namespace:
            return _refused(
                Code.BAD_REQUEST,
                f"namespace: the request names namespace {given!r}; this sidecar sends to "
                f"namespace {self._namespace!r} (its --namespace): its outbox and producer "
                "belong to one namespace",
            )
        limit = self._service.batch_refusal(len(messages), sum(len(m.body) for m in messages))
        if limit is not None:
            return _refused(rocketmq_code(limit), reason(limit))
        return None

    async def _forward(self, raw: bytes, context: Context) -> bytes:
        try:
            return await self._upstream.unary("SendMessage")(
                raw, timeout=remaining_s(context), metadata=forwarded_metadata(context)
            )
        except grpc.aio.AioRpcError as e:
            await context.abort(e.code(), e.details() or "")
            raise  # abort raises; for the type checker


def _app_message_id(m: definition_pb2.Message) -> str:
    return str(m.system_properties.message_id)


def _namespace_given(context: Context, messages: Sequence[definition_pb2.Message]) -> str:
    """The namespace the request names: its header (Python sends it always, Node when set), else
    its topics' ``resource_namespace``; a topic naming another than the header is a conflict,
    answered as that other one."""
    header = None
    for key, value in context.invocation_metadata() or ():
        if key == NAMESPACE_HEADER:
            header = value if isinstance(value, str) else value.decode()
    for m in messages:
        named = m.topic.resource_namespace
        if header is None:
            header = named
        elif named and named != header:
            return str(named)
    return str(header or "")


def to_outbox_message(
    m: definition_pb2.Message, message_id: str, trace: dict[str, str] | None = None
) -> OutboxMessage:
    """The app's message under its own id, with the call's ``trace`` context (W3C
    ``traceparent`` metadata) unless it has its own; raises SendRejectedError naming the field at
    fault (the rest is intake's validation, sidecar/validation.py)."""
    sp = m.system_properties
    group = sp.message_group if sp.HasField("message_group") else None
    delivery_ms = None
    if sp.HasField("delivery_timestamp"):
        # Python clients send whole seconds (docs/rocketmq-protocol.md §5.5): kept as sent, never
        # rounded further.
        t = sp.delivery_timestamp
        validate_timestamp("delivery_time", t.seconds, t.nanos)
        delivery_ms = t.ToMilliseconds()
    check_type(sp.message_type, group, delivery_ms)
    born_ms = now_ms()
    if sp.HasField("born_timestamp"):
        t = sp.born_timestamp
        validate_timestamp("born_timestamp", t.seconds, t.nanos)
        born_ms = t.ToMilliseconds()
    return OutboxMessage(
        topic=m.topic.name,
        body=decoded_body(m.body, sp.body_encoding),
        message_id=message_id,
        tag=sp.tag if sp.HasField("tag") else None,
        keys=tuple(sp.keys),
        message_group=group,
        delivery_timestamp_ms=delivery_ms,
        properties=traced_properties(m.user_properties, trace),
        born_timestamp_ms=born_ms,
    )


def check_type(message_type: int, group: str | None, delivery_ms: int | None) -> None:
    """The type against the properties, as the proxy checks them. An unspecified type is the
    one the clients themselves would choose from the properties."""
    if message_type == definition_pb2.NORMAL and group is None and delivery_ms is None:
        return  # the common case, decided in one comparison
    name = _type_name(message_type)
    if message_type == definition_pb2.FIFO and not group:
        raise SendRejectedError("message_type", "is FIFO but the message has no message_group")
    if message_type == definition_pb2.DELAY and delivery_ms is None:
        raise SendRejectedError("message_type", "is DELAY but the message has no delivery time")
    if message_type != definition_pb2.FIFO and group is not None and message_type:
        raise SendRejectedError("message_type", f"is {name} but the message has a message_group")
    if message_type != definition_pb2.DELAY and delivery_ms is not None and message_type:
        raise SendRejectedError("message_type", f"is {name} but the message has a delivery time")
    if message_type not in ACCEPTED_TYPES:
        raise SendRejectedError(
            "message_type",
            f"{name} is not sent through the sidecar's outbox (it takes NORMAL, FIFO and DELAY "
            "messages; TRANSACTION ones are forwarded to the broker)",
            rocketmq_code=Code.UNSUPPORTED,
        )


def _type_name(message_type: int) -> str:
    if message_type in TYPE_NAMES:
        return str(definition_pb2.MessageType.Name(message_type))
    return str(message_type)


TYPE_NAMES = frozenset(definition_pb2.MessageType.values())
ACCEPTED_TYPES = frozenset(
    {
        definition_pb2.MESSAGE_TYPE_UNSPECIFIED,
        definition_pb2.NORMAL,
        definition_pb2.FIFO,
        definition_pb2.DELAY,
    }
)


def decoded_body(body: bytes, encoding: int) -> bytes:
    """The body as IDENTITY (module docstring); a GZIP one decompressed, at most BODY_BYTES_MAX
    bytes of it, so a small request cannot make the sidecar hold a huge one."""
    if encoding != definition_pb2.GZIP:
        return body
    inflater = zlib.decompressobj(GZIP_OR_ZLIB_WBITS)
    try:
        plain = inflater.decompress(body, BODY_BYTES_MAX + 1)
    except zlib.error as e:
        raise SendRejectedError(
            "body_encoding", f"is GZIP but the body does not inflate: {e}"
        ) from e
    if len(plain) > BODY_BYTES_MAX:
        raise SendRejectedError(
            "body", f"inflates to more than {BODY_BYTES_MAX} bytes; the limit is {BODY_BYTES_MAX}"
        )
    if not inflater.eof:
        raise SendRejectedError("body_encoding", "is GZIP but the body is cut short")
    return plain


def _refused(code: int, message: str) -> spb.SendResultEntry:
    return spb.SendResultEntry(status=definition_pb2.Status(code=code, message=message))


def _refused_entry(refusal: spb.SendResultEntry, m: definition_pb2.Message) -> spb.SendResultEntry:
    return spb.SendResultEntry(status=refusal.status, message_id=m.system_properties.message_id)


def _entry(outcome: Outcome) -> spb.SendResultEntry:
    answer = outcome.answer
    if isinstance(answer, SendRejectedError):
        status = definition_pb2.Status(code=rocketmq_code(answer), message=reason(answer))
        return spb.SendResultEntry(status=status, message_id=outcome.message_id)
    if isinstance(answer, Stored):
        # The broker's own answer, passed on as it gave it (sidecar/producer.py's SendReceipt).
        r = answer.receipt
        return spb.SendResultEntry(
            status=OK,
            message_id=r.message_id,
            offset=r.queue_offset,
            transaction_id=r.transaction_id,
        )
    return spb.SendResultEntry(status=OK, message_id=outcome.message_id, offset=SPOOLED_OFFSET)


def _answer(
    entries: list[spb.SendResultEntry], whole: spb.SendResultEntry | None = None
) -> spb.SendMessageResponse:
    """The response: the entries, and the top-level status (module docstring)."""
    if whole is not None:
        status = whole.status
    elif len({e.status.code for e in entries}) == 1:
        status = entries[0].status
    else:
        status = definition_pb2.Status(
            code=Code.MULTIPLE_RESULTS, message="the messages' results differ: see each entry"
        )
    return spb.SendMessageResponse(status=status, entries=entries)
