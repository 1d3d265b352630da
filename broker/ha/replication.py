"""A broker's HA role in one object: what the BrokerController builds, binds, starts and stops.

A master with an HA listener runs an HAService (and, as a SYNC_MASTER, hooks its
``replica_wait`` into the store's puts); a slave runs an HAClient toward its master's HA address,
given (``ha_master_address``) or learned from its registrations (``on_master_changed``); a
stand-alone broker runs neither and pays nothing.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from broker.background import BackgroundTasks
from broker.config import BrokerConfig, BrokerRole
from broker.ha.ha_client import HAClient
from broker.ha.ha_service import HAService
from broker.ha.protocol import cancel_and_wait
from broker.ha.slave_synchronize import SlaveSynchronize
from broker.store.message_store import DefaultMessageStore

LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SlaveState:
    address: str  # the slave's end of the HA connection, HOST:PORT
    ack_offset: int  # its last report: the end of the log it holds
    lag_bytes: int  # this master's log end minus ack_offset


@dataclass(frozen=True, slots=True)
class HAState:
    """What ``rocketbox cluster list``, the admin service and the metrics read."""

    role: BrokerRole
    max_phy_offset: int
    ha_address: str | None  # a master's HA listener
    master_ha_address: str | None  # a slave's master
    master_connected: bool  # a slave: connected to its master now
    behind_master_bytes: int  # a slave: the master's end it heard of minus its own end
    slaves: tuple[SlaveState, ...] = field(default=())


class Replication:
    def __init__(self, config: BrokerConfig, store: DefaultMessageStore) -> None:
        self._config = config
        self._store = store
        self.service: HAService | None = None
        self.client: HAClient | None = None
        self._client_task: asyncio.Task[None] | None = None
        # Why this broker takes no writes (a SLAVE): sends, transactions, dead letters and
        # admin writes are refused with it, and so is any put on its store.
        self.write_refusal: str | None = None
        if config.is_slave:
            self.write_refusal = (
                f"{config.broker_name}-{config.broker_id} is a SLAVE; send to its master"
            )
            store.refuse_puts(self.write_refusal)
            self.client = HAClient(
                store, config.ha_master_address, config.ha_send_heartbeat_interval_ms,
                config.ha_housekeeping_interval_ms, config.ha_transfer_batch_bytes,
                config.slave_sync_interval_ms,
            )  # fmt: skip
        elif config.ha_listen_host is not None:
            self.service = HAService(config, store)

    async def bind(self) -> None:
        """Bind the HA listener (a master with one); OSError when its address is taken."""
        if self.service is not None:
            await self.service.bind()

    async def start(self, tasks: BackgroundTasks, configs: SlaveSynchronize) -> None:
        """Serve slaves, or start copying the master; the store is recovered and the configs
        loaded by now: ``configs`` is what a master hands its slaves and a slave takes."""
        if self.client is not None:
            self.client.on_config = configs.apply
        if self.service is not None:
            self.service.config_source = configs.snapshot
            configs.watch(self.service.config_changed)
            await self.service.start()
            if self._config.broker_role is BrokerRole.SYNC_MASTER:
                self._store.replica_wait = self.service.replica_wait
        if self.client is not None:
            self._client_task = tasks.start(self.client.run(), "ha-client")

    async def stop(self) -> None:
        self._store.replica_wait = None
        if self._client_task is not None:
            await cancel_and_wait([self._client_task])
            self._client_task = None
        if self.service is not None:
            await self.service.stop()

    def ha_address(self) -> str | None:
        return self.service.address or None if self.service is not None else None

    def on_master_changed(self, master_ha_address: str | None) -> None:
        if self.client is not None:
            self.client.set_master(master_ha_address)

    def state(self) -> HAState:
        max_offset = self._store.commit_log.max_offset
        slaves: tuple[SlaveState, ...] = ()
        if self.service is not None:
            slaves = tuple(
                SlaveState(
                    c.slave_address, c.slave_ack_offset, max(0, max_offset - c.slave_ack_offset)
                )
                for c in sorted(self.service.connections, key=lambda c: c.slave_address)
                if c.slave_ack_offset >= 0
            )
        client = self.client
        return HAState(
            self._config.broker_role,
            max_offset,
            self.ha_address(),
            client.master_ha_address if client is not None else None,
            client.connected if client is not None else False,
            client.behind_bytes if client is not None else 0,
            slaves,
        )
