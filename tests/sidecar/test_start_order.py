"""The sidecar opens its outbox (a RocksDB outbox's lock) before it binds a port, and a taken
port is a ListenError naming the listener and the address.

Proves, on a real Sidecar in this process: a gRPC, metrics or RocketMQ front port another socket
holds fails ``start`` with ListenError (the CLI's one line, rocketbox/start_checks.py), not grpc's
RuntimeError; and the outbox was opened first (its directory exists by then). The CLI names the
front's option for it: ``--rocketmq-listen`` in ``rocketbox sidecar`` and ``up`` alike (a port
taken between the CLI's own check and the bind).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rocketbox.start_checks import (
    SIDECAR_LISTEN_OPTIONS,
    UP_SIDECAR_LISTEN_OPTIONS,
    listen_refused,
)
from rocketbox_api.listen import GRPC, METRICS, ROCKETMQ, ListenError
from sidecar.channels import Endpoint
from sidecar.config import SidecarConfig
from sidecar.producer import ProducerConfig
from sidecar.sidecar import Sidecar


async def start(config: SidecarConfig) -> None:
    sidecar = Sidecar(config)
    try:
        await sidecar.start()
    finally:
        if hasattr(sidecar, "outbox"):
            await sidecar.outbox.close()
        if hasattr(sidecar, "producer"):
            await sidecar.producer.close()


@pytest.mark.parametrize("listener", [GRPC, METRICS, ROCKETMQ])
def test_a_taken_port_is_a_listen_error_after_the_outbox_is_open(
    tmp_path: Path, squatter: int, listener: str
) -> None:
    outbox_dir = tmp_path / "outbox"
    config = SidecarConfig(
        producer=ProducerConfig(access_points=(Endpoint("127.0.0.1", 1),)),
        outbox_url=f"rocksdb://{outbox_dir}",
        listen_port=squatter if listener == GRPC else 0,
        metrics_host="127.0.0.1" if listener == METRICS else None,
        metrics_port=squatter if listener == METRICS else 0,
        rocketmq_listen_host="127.0.0.1" if listener == ROCKETMQ else None,
        rocketmq_listen_port=squatter if listener == ROCKETMQ else 0,
    )
    with pytest.raises(ListenError) as refused:
        asyncio.run(start(config))
    assert (refused.value.listener, refused.value.address) == (listener, f"127.0.0.1:{squatter}")
    assert (outbox_dir / "CURRENT").is_file(), "the outbox (its lock) comes before the ports"


def test_a_taken_front_port_names_its_option_in_sidecar_and_up(
    tmp_path: Path, squatter: int
) -> None:
    config = SidecarConfig(
        producer=ProducerConfig(access_points=(Endpoint("127.0.0.1", 1),)),
        outbox_url=f"rocksdb://{tmp_path / 'outbox'}",
        listen_port=0,
        rocketmq_listen_host="127.0.0.1",
        rocketmq_listen_port=squatter,
    )
    with pytest.raises(ListenError) as refused:
        asyncio.run(start(config))
    for options in (SIDECAR_LISTEN_OPTIONS, UP_SIDECAR_LISTEN_OPTIONS):
        assert listen_refused(refused.value, options).message == (
            f"--rocketmq-listen 127.0.0.1:{squatter} is in use (another rocketbox?); stop it or "
            "choose another port"
        )
