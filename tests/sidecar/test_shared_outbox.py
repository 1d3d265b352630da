"""Two sidecars sharing one outbox (the real Redis, the real MariaDB) never send an entry twice.

Both spool while the broker is down; when it is back, both resend pools drain the same outbox at
once. Every message must then be in the broker exactly once: a claim leased to one sidecar is
never taken by the other.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy

from tests.broker.broker_process import BrokerProcess, wait_until
from tests.services import mysql_url, redis_url, unique_name
from tests.sidecar.sidecar_process import SidecarProcess, message, outcome, send, stored_copies

MESSAGES_PER_SIDECAR = 100
DELIVERY_DEADLINE_S = 60.0


@pytest.fixture(params=["redis", "mysql"])
def shared_outbox_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "redis":
        prefix = unique_name("rocketbox_test")
        yield f"{redis_url()}?prefix={prefix}"
        client = redis.Redis.from_url(redis_url())
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
        return
    table = unique_name("outbox")
    yield f"{mysql_url()}?table={table}"
    engine = sqlalchemy.create_engine(mysql_url())
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text(f"DROP TABLE IF EXISTS `{table}`, `{table}_counters`"))
    engine.dispose()


def delivered_count(sidecar: SidecarProcess) -> int:
    """What the sidecar's resend pool says it delivered, from its last log line."""
    [count] = re.findall(r"sidecar stopped: (\d+) delivered", sidecar.output())
    return int(count)


def test_two_sidecars_on_one_outbox_never_send_an_entry_twice(
    tmp_path: Path, shared_outbox_url: str
) -> None:
    broker = BrokerProcess(tmp_path / "broker", "--auto-create-topic")
    port = broker.port
    broker.stop()
    # Small claims, so that the two pools take turns on the same entries' neighbourhood.
    sidecars = [
        SidecarProcess(f"127.0.0.1:{port}", shared_outbox_url, "--claim-batch-max=5")
        for _ in range(2)
    ]
    back: BrokerProcess | None = None
    try:
        ids: list[str] = []
        for sidecar in sidecars:
            with sidecar.client() as stub:
                for i in range(MESSAGES_PER_SIDECAR):
                    result = send(stub, message("Orders", f"{sidecar.port}/{i}".encode()))
                    assert outcome(result) == "spooled", result
                    ids.append(result.message_id)
        back = BrokerProcess(broker.data_dir, "--auto-create-topic", "--listen-port", str(port))
        endpoint = back.endpoint
        wait_until(
            lambda: all(stored_copies(endpoint, i) for i in ids), DELIVERY_DEADLINE_S,
            "both sidecars to drain the shared outbox",
        )  # fmt: skip
        for sidecar in sidecars:
            sidecar.stop()
        copies = {i: len(stored_copies(endpoint, i)) for i in ids}
        twice = {i: n for i, n in copies.items() if n != 1}
        assert not twice, f"sent more than once: {twice}"
        delivered_by = [delivered_count(s) for s in sidecars]
        assert sum(delivered_by) == len(ids), delivered_by
        assert min(delivered_by) > 0, f"only one sidecar drained: {delivered_by}"
    finally:
        for sidecar in sidecars:
            sidecar.kill()
        if back is not None:
            back.kill()
