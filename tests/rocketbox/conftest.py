"""Fixtures of the `rocketbox outbox` tests: an outbox URL on each backend, and a broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.outbox.conftest import backend_url
from tests.rocketbox.outbox_cli_support import CLI_BACKENDS
from tests.sidecar.sidecar_process import BROKER_ARGS


@pytest.fixture(params=CLI_BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request.param, tmp_path) as outbox_url:
        yield outbox_url


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("broker"), *BROKER_ARGS)
    yield b
    b.kill()
