"""A broker advertised by host name (a pod's stable DNS name in the chart) still stores: every
record holds its store host as an IP address, so the name is resolved once at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import store_host_address
from broker.errors import BrokerConfigError
from tests.broker.broker_process import BrokerProcess
from tests.broker.grpc_service.test_producer import message, producer

pytestmark = pytest.mark.slow


def test_an_address_is_kept_and_a_name_is_resolved() -> None:
    assert store_host_address("10.1.2.3") == "10.1.2.3"
    assert store_host_address("::1") == "::1"
    assert store_host_address("localhost") in ("127.0.0.1", "::1")
    with pytest.raises(BrokerConfigError, match=r"no-such-host\.invalid"):
        store_host_address("no-such-host.invalid")


def test_a_broker_advertised_by_name_stores_what_it_is_sent(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", "--advertise-host=localhost", "--topic=Named:2")
    try:
        with producer(broker.endpoint, ("Named",)) as p:
            receipt = p.send(message("Named", b"by name"))
        assert receipt.message_id
    finally:
        broker.stop()
