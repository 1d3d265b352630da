"""The broker's registrations with its NameServers (RocketMQ's registerBrokerAll and its
scheduled task in BrokerController).

With ``namesrv_addr`` set, the broker registers with each NameServer at once on start, every
``register_broker_interval_ms``, and as soon as a topic is created, changed or deleted (the topic
table tells ``request_register``, from whatever thread changed it); a clean shutdown
unregisters it, so its routes go at once rather than after the NameServer's expiry. One round
runs at a time. A NameServer that is down is logged, at most a line per interval per NameServer
(RateLimitedLog), and never stops the broker: it is asked again next round.

A registration carries the broker's place (cluster, group, id, role), its addresses (gRPC, and a
master's HA listener), every topic with its queue count, permission and message type, the
commitlog's max offset, and a data version bumped by every topic change. A slave learns its
group's master from the answers and tells the controller when that changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from broker.background import BackgroundTasks
from broker.broker_outer_api import BrokerOuterAPI
from broker.config import BrokerConfig, BrokerRole
from broker.topic_config import TopicConfigManager, TopicMessageType
from rocketbox_api.deadlines import wait_event
from rocketbox_api.namesrv.v1 import namesrv_pb2 as npb
from rocketbox_api.rate_limited_log import RateLimitedLog

LOG = logging.getLogger(__name__)

ROLES = {
    BrokerRole.ASYNC_MASTER: npb.BROKER_ROLE_ASYNC_MASTER,
    BrokerRole.SYNC_MASTER: npb.BROKER_ROLE_SYNC_MASTER,
    BrokerRole.SLAVE: npb.BROKER_ROLE_SLAVE,
}
MESSAGE_TYPES = {
    TopicMessageType.NORMAL: npb.MESSAGE_TYPE_NORMAL,
    TopicMessageType.FIFO: npb.MESSAGE_TYPE_FIFO,
    TopicMessageType.DELAY: npb.MESSAGE_TYPE_DELAY,
    TopicMessageType.TRANSACTION: npb.MESSAGE_TYPE_TRANSACTION,
    TopicMessageType.MIXED: npb.MESSAGE_TYPE_MIXED,
}

MasterChanged = Callable[[str | None, str | None], None]


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class RegisterBrokerService:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        max_phy_offset: Callable[[], int],
        ha_address: Callable[[], str | None],
        on_master_changed: MasterChanged,
    ) -> None:
        self._config = config
        self._topics = topics
        self._max_phy_offset = max_phy_offset
        self._ha_address = ha_address
        self._on_master_changed = on_master_changed
        self.outer_api = BrokerOuterAPI(config.namesrv_addr)
        self.broker_addr = ""
        self._data_version = (time.time_ns() // 1_000_000, 0)
        self._changed = asyncio.Event()
        self._round = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._master: tuple[str | None, str | None] | None = None
        self._failures = {
            addr: RateLimitedLog(LOG, logging.WARNING, config.register_broker_interval_ms / 1000)
            for addr in config.namesrv_addr
        }

    def start(self, tasks: BackgroundTasks, broker_port: int) -> None:
        self.broker_addr = host_port(self._config.route_host, broker_port)
        self._loop = asyncio.get_running_loop()
        self._task = tasks.start(self._run(), "register broker")

    def request_register(self) -> None:
        """A topic changed: register again now (callable from any thread)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._topics_changed)

    def _topics_changed(self) -> None:
        self._data_version = (time.time_ns() // 1_000_000, self._data_version[1] + 1)
        self._changed.set()

    async def _run(self) -> None:
        interval_s = self._config.register_broker_interval_ms / 1000
        while True:
            self._changed.clear()
            await self.register_broker_all()
            await wait_event(self._changed, interval_s)

    async def register_broker_all(self) -> bool:
        """One round: register with every NameServer; whether any accepted it."""
        async with self._round:
            outcomes = await self.outer_api.register_broker_all(self._request())
        accepted = [o.response for o in outcomes if o.response is not None]
        for o in outcomes:
            if o.error is not None:
                self._failures[o.namesrv_addr].log(
                    "registering with NameServer %s failed: %s: %s (asked again in %s ms)",
                    o.namesrv_addr,
                    o.error.code().name,
                    o.error.details(),
                    self._config.register_broker_interval_ms,
                )
        if self._config.is_slave and accepted:
            named = [r for r in accepted if r.master_addr]
            master = (named[0].master_addr, named[0].ha_server_addr or None) if named else None
            self._master_is(master or (None, None))
        return bool(accepted)

    def _master_is(self, master: tuple[str | None, str | None]) -> None:
        if master == self._master:
            return
        self._master = master
        LOG.info("the group's master is now %s (HA %s)", master[0], master[1])
        self._on_master_changed(*master)

    def _request(self) -> npb.RegisterBrokerRequest:
        cfg = self._config
        perm = npb.PERMISSION_READ if cfg.is_slave else npb.PERMISSION_READ_WRITE
        return npb.RegisterBrokerRequest(
            cluster_name=cfg.broker_cluster_name,
            broker_name=cfg.broker_name,
            broker_id=cfg.broker_id,
            broker_addr=self.broker_addr,
            ha_server_addr=self._ha_address() or "",
            role=ROLES[cfg.broker_role],
            topics=[
                npb.TopicConfig(
                    topic_name=t.topic_name,
                    queue_nums=t.queue_nums,
                    perm=perm,
                    message_type=MESSAGE_TYPES[t.message_type],
                )
                for t in self._topics.list()
            ],
            max_phy_offset=self._max_phy_offset(),
            data_version=npb.DataVersion(
                timestamp_ms=self._data_version[0], counter=self._data_version[1]
            ),
        )

    async def stop(self) -> None:
        """Stop registering, and unregister from every NameServer (a failure is logged)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            cfg = self._config
            failed = await self.outer_api.unregister_broker_all(
                npb.UnregisterBrokerRequest(
                    cluster_name=cfg.broker_cluster_name,
                    broker_name=cfg.broker_name,
                    broker_id=cfg.broker_id,
                    broker_addr=self.broker_addr,
                )
            )
            for why in failed:
                LOG.warning("unregistering from NameServer %s failed", why)
        await self.outer_api.close()
