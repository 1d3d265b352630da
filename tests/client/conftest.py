"""What the client's tests talk to: the sidecar tests' broker (a real process, topics created on
first use; the fixture is imported from tests/sidecar/conftest.py, not copied) and a real sidecar
in front of it with an in-memory outbox."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.sidecar.conftest import broker
from tests.sidecar.sidecar_process import SidecarProcess

__all__ = ["broker", "sidecar"]


@pytest.fixture
def sidecar(broker: BrokerProcess) -> Iterator[SidecarProcess]:
    s = SidecarProcess(broker.endpoint, "memory://")
    yield s
    s.stop()
