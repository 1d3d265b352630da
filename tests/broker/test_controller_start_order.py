"""The broker takes its store directory's lock before it binds a port.

Proves, on a real BrokerController in this process: a second broker on a held directory is
refused by the lock (StoreLockedError naming the holder's pid), whether or not its port is
free; a broker whose gRPC or metrics port is taken fails with ListenError naming the listener
and the address, and gives the directory's lock back (a later start takes it).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from broker.broker_controller import BrokerController
from broker.config import BrokerConfig
from broker.store.errors import StoreLockedError
from broker.store.store_lock import StoreLock
from rocketbox_api.listen import GRPC, METRICS, ListenError
from tests.broker.broker_process import small_store_config


def config(store_dir: Path, listen_port: int = 0, metrics_port: int | None = None) -> BrokerConfig:
    return BrokerConfig(
        store=small_store_config(store_dir),
        listen_port=listen_port,
        metrics_host=None if metrics_port is None else "127.0.0.1",
        metrics_port=metrics_port or 0,
    )


async def start_and_stop(cfg: BrokerConfig) -> None:
    controller = BrokerController(cfg)
    await controller.start()
    await controller.shutdown()


def test_a_held_directory_is_refused_before_the_port_is_looked_at(
    tmp_path: Path, squatter: int
) -> None:
    cfg = config(tmp_path, listen_port=squatter)
    tmp_path.mkdir(exist_ok=True)
    # flock locks belong to an open file: a second one, in this very process, is refused.
    holder = StoreLock(cfg.store.lock_file_path, tmp_path)
    holder.acquire()
    try:
        with pytest.raises(StoreLockedError) as refused:
            asyncio.run(start_and_stop(cfg))
    finally:
        holder.release()
    assert f"(pid {os.getpid()})" in str(refused.value)


@pytest.mark.parametrize("listener", [GRPC, METRICS])
def test_a_taken_port_names_its_listener_and_gives_the_lock_back(
    tmp_path: Path, squatter: int, listener: str
) -> None:
    if listener == GRPC:
        cfg = config(tmp_path, listen_port=squatter)
    else:
        cfg = config(tmp_path, metrics_port=squatter)
    with pytest.raises(ListenError) as refused:
        asyncio.run(start_and_stop(cfg))
    assert (refused.value.listener, refused.value.address) == (
        listener,
        f"127.0.0.1:{squatter}",
    )
    asyncio.run(start_and_stop(config(tmp_path)))  # the lock was given back
