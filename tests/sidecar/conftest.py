"""The broker every sidecar test sends to: a real process, topics created on first use, and a
FIFO topic ``Fifo`` (``restart`` in sidecar_process.py brings it back on its old port)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.sidecar.sidecar_process import BROKER_ARGS


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", *BROKER_ARGS)
    yield b
    b.kill()
