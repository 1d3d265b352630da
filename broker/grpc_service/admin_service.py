"""``rocketbox.admin.v1.BrokerAdmin``: topics, stored messages, forced flow control and consumer
groups, for operators (the ``rocketbox topic|message|flow-control|group`` commands). See
proto/rocketbox/admin/v1/broker_admin.proto for the contract.

Thin: validate, call TopicConfigManager / GroupConfigManager / DefaultMessageStore /
PopMessageService / ForcedFlowControl / ClientRegistry, convert. Protobuf types stop in this
module. Faults are translated into gRPC status codes in one place, ``_answer``:
MessageIllegalError → INVALID_ARGUMENT (its text names the field and the limit),
TopicNotFoundError → NOT_FOUND, TopicExistsError → ALREADY_EXISTS, a retriable store or broker
fault → UNAVAILABLE, any other → FAILED_PRECONDITION. Outcomes without an exception of their own
(no such message, no such group, a group that exists) are answered where they are found.

Store lookups are synchronous, bounded (``*_MAX``) and fast, so they run on the event loop, as do
PopMessageService's calls (its state belongs to the loop); topic and group table changes fsync a
file, so they run in a thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final, TypeVar

import grpc

from broker.broadcast_members import progress_key
from broker.consumer_progress import progress_keys, topic_progress
from broker.errors import BrokerError, TopicExistsError, TopicNotFoundError
from broker.flow_control import ForcedFlowControl
from broker.group_config import (
    RETRY_MAX_TIMES_DEFAULT,
    GroupConfig,
    GroupConfigManager,
    dlq_topic,
    model_name,
    validate_group_name,
)
from broker.grpc_service.admin_converter import (
    FROM_PB_TYPE,
    QUERY_KEY_BYTES_MAX,
    QUERY_MAX_NUM_DEFAULT,
    TO_PB_CLIENT_TYPE,
    to_pb_group,
    to_pb_ha_state,
    to_pb_topic,
    to_pb_topic_progress,
    validate_message_id,
    validate_reset,
    within_budget,
)
from broker.grpc_service.client_registry import ClientRegistry
from broker.ha.replication import HAState
from broker.pop_message import PopMessageService
from broker.store.errors import MessageIllegalError, StoreError
from broker.store.message_reader import QUERY_MESSAGE_NUMS_MAX
from broker.store.message_store import DefaultMessageStore
from broker.topic_config import (
    TopicConfig,
    TopicConfigManager,
    validate_topic_name,
)
from rocketbox_api.admin.v1 import broker_admin_pb2 as apb
from rocketbox_api.admin.v1 import broker_admin_pb2_grpc
from rocketbox_api.message_rules import shown

LOG = logging.getLogger(__name__)

ADMIN_SERVICE_NAME: Final = apb.DESCRIPTOR.services_by_name["BrokerAdmin"].full_name
Context = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")
# A message answered SEND_OK is in the commitlog at once and in the index once the dispatcher has
# read it, moments later. GetMessage first waits, this long at most, for the dispatch of all that
# was appended before it came: "not found" then means not stored, which a sender deciding
# whether to send again (the sidecar's resend pool) relies on. Past it: UNAVAILABLE, ask again.
GET_MESSAGE_DISPATCH_WAIT_MS = 2_000
_DISPATCH_POLL_S = 0.001


class BrokerAdminService(broker_admin_pb2_grpc.BrokerAdminServicer):  # type: ignore[misc]  # untyped stubs
    def __init__(
        self,
        store: DefaultMessageStore,
        topics: TopicConfigManager,
        forced_flow_control: ForcedFlowControl,
        groups: GroupConfigManager,
        pop: PopMessageService,
        clients: ClientRegistry,
        write_refusal: str | None = None,
        ha_state: Callable[[], HAState] | None = None,
    ) -> None:
        """``write_refusal``: why this broker (a SLAVE) takes no topic or group writes: its
        configs are its master's, copied (FAILED_PRECONDITION, naming the reason)."""
        self._write_refusal = write_refusal
        self._ha_state = ha_state
        self._store = store
        self._topics = topics
        self._forced = forced_flow_control
        self._groups = groups
        self._pop = pop
        self._clients = clients

    # -- topics ------------------------------------------------------------------------------
    async def CreateTopic(  # noqa: N802 - the API's name
        self, request: apb.CreateTopicRequest, context: Context
    ) -> apb.CreateTopicResponse:
        await self._refuse_writes(context)
        kind = FROM_PB_TYPE.get(request.message_type)
        if kind is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"message_type: {request.message_type} is not a MessageType",
            )
        queue_nums = request.queue_nums if request.HasField("queue_nums") else None
        tc = await _answer(
            context, lambda: self._topics.create(request.topic, queue_nums, kind), in_thread=True
        )
        return apb.CreateTopicResponse(topic=to_pb_topic(tc))

    async def ListTopics(  # noqa: N802 - the protocol's method name
        self, request: apb.ListTopicsRequest, context: Context
    ) -> apb.ListTopicsResponse:
        return apb.ListTopicsResponse(topics=[to_pb_topic(tc) for tc in self._topics.list()])

    async def DescribeTopic(  # noqa: N802 - the protocol's method name
        self, request: apb.DescribeTopicRequest, context: Context
    ) -> apb.DescribeTopicResponse:
        tc = await _answer(context, lambda: self._configured_topic(request.topic))
        queues = [
            apb.QueueOffsets(
                queue_id=queue_id,
                min_queue_offset=self._store.get_min_offset_in_queue(tc.topic_name, queue_id),
                max_queue_offset=self._store.get_max_offset_in_queue(tc.topic_name, queue_id),
            )
            for queue_id in range(tc.queue_nums)
        ]
        forced = self._forced.broker_wide or tc.topic_name in self._forced.topics
        return apb.DescribeTopicResponse(
            topic=to_pb_topic(tc), queues=queues, flow_control_forced=forced
        )

    async def DeleteTopic(  # noqa: N802 - the protocol's method name
        self, request: apb.DeleteTopicRequest, context: Context
    ) -> apb.DeleteTopicResponse:
        await self._refuse_writes(context)
        await _answer(context, lambda: validate_topic_name(request.topic))
        tc = await _answer(context, lambda: self._topics.delete(request.topic), in_thread=True)
        return apb.DeleteTopicResponse(topic=to_pb_topic(tc))

    def _configured_topic(self, topic: str) -> TopicConfig:
        # System topics are never in the topic table: the name check would only hide NOT_FOUND.
        validate_topic_name(topic, allow_system=True)
        tc = self._topics.find(topic)
        if tc is None:
            raise TopicNotFoundError(f"topic {topic!r} does not exist")
        return tc

    # -- messages ----------------------------------------------------------------------------
    async def GetMessage(  # noqa: N802 - the protocol's method name
        self, request: apb.GetMessageRequest, context: Context
    ) -> apb.GetMessageResponse:
        msg_id = request.message_id
        await _answer(context, lambda: validate_message_id(msg_id))
        if not await self._dispatched(self._store.max_phy_offset):
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"the message index is {self._store.dispatch_behind_bytes} bytes behind the "
                f"commitlog after {GET_MESSAGE_DISPATCH_WAIT_MS} ms; ask again",
            )
        copies = await _answer(context, lambda: self._store.query_message_by_id(msg_id))
        if not copies:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no stored message with id {msg_id}")
        messages, truncated = within_budget(sorted(copies, key=lambda m: m.commit_log_offset))
        return apb.GetMessageResponse(messages=messages, truncated=truncated)

    async def _dispatched(self, phy_offset: int) -> bool:
        """Wait until every record below ``phy_offset`` is in the index (False: not in time)."""
        store = self._store
        loop = asyncio.get_running_loop()
        deadline_s = loop.time() + GET_MESSAGE_DISPATCH_WAIT_MS / 1000.0
        # The end first, then how far behind it dispatch is: a lower bound of what is dispatched.
        while store.max_phy_offset - store.dispatch_behind_bytes < phy_offset:
            if loop.time() >= deadline_s:
                return False
            await asyncio.sleep(_DISPATCH_POLL_S)
        return True

    async def QueryMessage(  # noqa: N802 - the protocol's method name
        self, request: apb.QueryMessageRequest, context: Context
    ) -> apb.QueryMessageResponse:
        topic, key = request.topic, request.key
        max_num = request.max_num or QUERY_MAX_NUM_DEFAULT
        await _answer(context, lambda: self._validate_query(topic, key, max_num))
        found = await _answer(context, lambda: self._store.query_message(topic, key, max_num))
        messages, truncated = within_budget(found)
        return apb.QueryMessageResponse(messages=messages, truncated=truncated)

    def _validate_query(self, topic: str, key: str, max_num: int) -> None:
        validate_topic_name(topic, allow_system=True)
        # A deleted topic's messages stay stored until retention: they may still be asked for.
        if self._topics.find(topic) is None and not self._store.consume_queue_store.queue_ids(
            topic
        ):
            raise TopicNotFoundError(f"topic {topic!r} does not exist and holds no messages")
        if not key or " " in key or not key.isprintable():
            raise MessageIllegalError("key", "no spaces or control characters", shown(key))
        if len(key.encode()) > QUERY_KEY_BYTES_MAX:
            raise MessageIllegalError(
                "key", f"{QUERY_KEY_BYTES_MAX} bytes", f"is {len(key.encode())} bytes"
            )
        if not 1 <= max_num <= QUERY_MESSAGE_NUMS_MAX:
            raise MessageIllegalError("max_num", f"1..{QUERY_MESSAGE_NUMS_MAX}", f"is {max_num}")

    # -- flow control ------------------------------------------------------------------------
    async def SetFlowControl(  # noqa: N802 - the protocol's method name
        self, request: apb.SetFlowControlRequest, context: Context
    ) -> apb.SetFlowControlResponse:
        topic = request.topic if request.HasField("topic") else None
        if topic is not None:
            if request.on:
                await _answer(context, lambda: self._configured_topic(topic))
            else:
                await _answer(context, lambda: validate_topic_name(topic, allow_system=True))
        self._forced.set(request.on, topic)
        return apb.SetFlowControlResponse(
            broker_wide=self._forced.broker_wide, topics=sorted(self._forced.topics)
        )

    # -- consumer groups ---------------------------------------------------------------------
    async def ListGroups(  # noqa: N802 - the protocol's method name
        self, request: apb.ListGroupsRequest, context: Context
    ) -> apb.ListGroupsResponse:
        return apb.ListGroupsResponse(groups=[to_pb_group(gc) for gc in self._groups.list()])

    async def DescribeGroup(  # noqa: N802 - the protocol's method name
        self, request: apb.DescribeGroupRequest, context: Context
    ) -> apb.DescribeGroupResponse:
        gc = await self._configured_group(request.group, context)
        group = gc.group_name
        topics = [self._progress(group, topic) for topic in self._pop.progress.topics_of(group)]
        dlq = dlq_topic(group)
        dlq_count = sum(
            self._store.get_max_offset_in_queue(dlq, queue_id)
            for queue_id in self._store.consume_queue_store.queue_ids(dlq)
        )
        return apb.DescribeGroupResponse(
            group=to_pb_group(gc),
            members=self._members(group),
            topics=topics,
            dlq_topic=dlq,
            dlq_message_count=dlq_count,
            broadcast_members=self._broadcast_members(gc, None),
        )

    async def CreateGroup(  # noqa: N802 - the protocol's method name
        self, request: apb.CreateGroupRequest, context: Context
    ) -> apb.CreateGroupResponse:
        await self._refuse_writes(context)
        retries = (
            request.retry_max_times
            if request.HasField("retry_max_times")
            else RETRY_MAX_TIMES_DEFAULT
        )
        gc = await _answer(
            context,
            lambda: self._create_group(request.group, request.orderly, retries, request.broadcast),
            in_thread=True,
        )
        if gc is None:
            found = self._groups.find(request.group)
            model = f" ({model_name(found)})" if found is not None else ""
            await context.abort(
                grpc.StatusCode.ALREADY_EXISTS,
                f"group {request.group!r} exists{model}: its settings and consume model do not "
                "change under its consumers",
            )
        return apb.CreateGroupResponse(group=to_pb_group(gc))

    async def DeleteGroup(  # noqa: N802 - the protocol's method name
        self, request: apb.DeleteGroupRequest, context: Context
    ) -> apb.DeleteGroupResponse:
        await self._refuse_writes(context)
        gc = await self._configured_group(request.group, context)
        if connected := self._clients.consumers_of(gc.group_name):
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"group {gc.group_name!r} has consumers connected ({len(connected)}): stop them "
                "first (their next request would create the group again, with the defaults)",
            )
        await asyncio.to_thread(self._groups.delete, gc.group_name)  # gone already: the same
        return apb.DeleteGroupResponse(group=to_pb_group(gc))

    async def ResetOffset(  # noqa: N802 - the protocol's method name
        self, request: apb.ResetOffsetRequest, context: Context
    ) -> apb.ResetOffsetResponse:
        await self._refuse_writes(context)
        await _answer(context, lambda: validate_reset(request))
        gc = await self._configured_group(request.group, context)
        tc = await _answer(context, lambda: self._configured_topic(request.topic))
        group, topic = gc.group_name, tc.topic_name
        for queue_id in range(tc.queue_nums):
            if request.to == apb.RESET_TARGET_FIRST:
                queue_offset = self._store.get_min_offset_in_queue(topic, queue_id)
            elif request.to == apb.RESET_TARGET_LAST:
                queue_offset = self._store.get_max_offset_in_queue(topic, queue_id)
            else:
                queue_offset = self._store.get_offset_in_queue_by_time(
                    topic, queue_id, request.timestamp_ms
                )
            for key in progress_keys(self._pop, gc):  # every member of a broadcast group
                self._pop.reset_offset(key, topic, queue_id, queue_offset)
        if gc.consume_broadcast_enable:
            return apb.ResetOffsetResponse(broadcast_members=self._broadcast_members(gc, topic))
        return apb.ResetOffsetResponse(progress=self._progress(group, topic))

    def _broadcast_members(self, gc: GroupConfig, topic: str | None) -> list[apb.BroadcastMember]:
        """A broadcast group's members with their progress (in ``topic`` only, when given)."""
        members = self._pop.progress.members
        out = []
        for m in members.members(gc.group_name):
            key = progress_key(gc.group_name, m.id)
            topics = self._pop.progress.topics_of(key) if topic is None else [topic]
            out.append(
                apb.BroadcastMember(
                    member_id=m.id,
                    client_id=m.client,
                    host=m.host,
                    last_seen_ms=m.seen_ms,
                    left=members.has_left(m),
                    topics=[self._progress(key, t) for t in topics],
                )
            )
        return out

    async def GetHAState(  # noqa: N802 - the API's name
        self, request: apb.GetHAStateRequest, context: Context
    ) -> apb.GetHAStateResponse:
        if self._ha_state is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this broker has no HA state")
        return to_pb_ha_state(self._ha_state())

    async def _refuse_writes(self, context: Context) -> None:
        if self._write_refusal is not None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, self._write_refusal)

    async def _configured_group(self, group: str, context: Context) -> GroupConfig:
        await _answer(context, lambda: validate_group_name(group))
        gc = self._groups.find(group)
        if gc is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"group {group!r} does not exist")
        return gc

    def _create_group(
        self, group: str, orderly: bool, retry_max_times: int, broadcast: bool
    ) -> GroupConfig | None:
        """The new group, or None when it exists (also when a consumer's first use created it
        between the look-up and the create)."""
        if self._groups.find(group) is not None:
            return None
        try:
            return self._groups.create(
                group, orderly, retry_max_times, consume_broadcast_enable=broadcast
            )
        except MessageIllegalError:
            if self._groups.find(group) is not None:
                return None
            raise

    def _progress(self, group: str, topic: str) -> apb.GroupTopicProgress:
        queues = topic_progress(self._store, self._topics, self._pop, group, topic)
        return to_pb_topic_progress(topic, queues)

    def _members(self, group: str) -> list[apb.GroupMember]:
        return [
            apb.GroupMember(
                client_id=s.client_id,
                client_type=TO_PB_CLIENT_TYPE.get(s.client_type, apb.CLIENT_TYPE_UNSPECIFIED),
            )
            for s in self._clients.consumers_of(group)
        ]


async def _answer(context: Context, call: Callable[[], T], *, in_thread: bool = False) -> T:
    """``call()``, with its faults answered as gRPC status codes (the only translation)."""
    try:
        return await asyncio.to_thread(call) if in_thread else call()
    except MessageIllegalError as e:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
    except TopicNotFoundError as e:
        await context.abort(grpc.StatusCode.NOT_FOUND, str(e))
    except TopicExistsError as e:
        await context.abort(grpc.StatusCode.ALREADY_EXISTS, str(e))
    except (StoreError, BrokerError) as e:
        LOG.warning("admin call failed: %s", e)
        code = grpc.StatusCode.UNAVAILABLE if e.retriable else grpc.StatusCode.FAILED_PRECONDITION
        await context.abort(code, str(e))
