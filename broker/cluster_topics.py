"""A topic auto-created in a cluster is created on every master of the cluster, not only on the
broker a client asked (RocketMQ's `mqadmin updateTopic -c <cluster>`, done for the client).

Without it a topic first used through one broker would live on that group alone: every send of
it would land there, and the cluster would spread nothing. The broker asked creates the topic
itself (SendMessageService.resolve_topic), then asks each other master for it through its admin
service; each registers it at once (a topic change triggers a registration), so the route names
every group within a registration round. A master that does not answer is logged and skipped: it
does not hold the topic until someone creates it there, and the route names the groups that do.
With --auth, the request is signed with the broker's bootstrap admin credentials (the peers
share them: a cluster is one deployment); without them a peer with --auth refuses it, logged.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from broker.broker_outer_api import BrokerOuterAPI, NamesrvUnreachableError
from broker.config import MASTER_ID
from broker.grpc_service.admin_converter import TO_PB_TYPE
from broker.topic_config import TopicConfig
from rocketbox_api.admin.v1 import broker_admin_pb2 as apb
from rocketbox_api.admin.v1 import broker_admin_pb2_grpc
from rocketbox_api.credentials import Credentials, Signer
from rocketbox_api.rate_limited_log import RateLimitedLog

LOG = logging.getLogger(__name__)
# Each peer's CreateTopic: a client's QueryRoute waits for these.
PEER_CREATE_DEADLINE_S = 2.0


class ClusterTopics:
    def __init__(
        self,
        outer_api: BrokerOuterAPI,
        cluster_name: str,
        broker_name: str,
        credentials: Credentials | None = None,
    ) -> None:
        self._signer = Signer(credentials)
        self._outer_api = outer_api
        self._cluster_name = cluster_name
        self._broker_name = broker_name
        self._failed = RateLimitedLog(LOG, logging.WARNING)

    async def create_on_peers(self, tc: TopicConfig) -> None:
        """Create ``tc`` on every other master of this broker's cluster (existing: fine)."""
        try:
            info = await self._outer_api.get_broker_cluster_info()
        except NamesrvUnreachableError as e:
            self._failed.log("topic %s created here alone: %s", tc.topic_name, e)
            return
        peers = [
            b.broker_addr
            for b in info.brokers
            if b.cluster_name == self._cluster_name
            and b.broker_id == MASTER_ID
            and b.broker_name != self._broker_name
        ]
        request = apb.CreateTopicRequest(
            topic=tc.topic_name,
            queue_nums=tc.queue_nums,
            message_type=TO_PB_TYPE[tc.message_type],
        )
        await asyncio.gather(*(self._create(address, request) for address in peers))

    async def _create(self, address: str, request: apb.CreateTopicRequest) -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            try:
                await broker_admin_pb2_grpc.BrokerAdminStub(channel).CreateTopic(
                    request,
                    timeout=PEER_CREATE_DEADLINE_S,
                    metadata=self._signer.metadata(),
                )
            except grpc.aio.AioRpcError as e:
                if e.code() is not grpc.StatusCode.ALREADY_EXISTS:
                    self._failed.log(
                        "topic %s not created on %s: %s %s",
                        request.topic,
                        address,
                        e.code().name,
                        e.details(),
                    )
