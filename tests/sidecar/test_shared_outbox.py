"""Two sidecars sharing one outbox (the real Redis, the real MariaDB) never send an entry twice.

Both spool while the broker throttles (its flow control on): their connections to it stay up, so
once it takes sends again both probe it within an interval and both resend pools drain the same
outbox at once (a broker down and back would leave each pool's return to its channel's reconnect
back-off, and one pool could drain everything first). Every message must then be in the broker
exactly once: a claim leased to one sidecar is never taken by the other. And a FIFO group one
sidecar spooled is fenced in the other too."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy

from outbox.factory import open_outbox
from rocketbox_api.v1 import sidecar_pb2 as api
from sidecar.clock import now_ms
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.prometheus import metrics_port, sample, scrape
from tests.services import free_port, mysql_url, redis_url, unique_name
from tests.sidecar.sidecar_process import (
    SidecarProcess,
    message,
    outcome,
    send,
    set_flow_control,
    stored_copies,
)

pytestmark = pytest.mark.slow

# Enough that one pool's drain outlasts the other's reconnection to the returned broker (its
# gRPC channel's reconnect back-off, at most 2 s) and its first probe.
MESSAGES_PER_SIDECAR = 300
DELIVERY_DEADLINE_S = 60.0
B_METRICS_LINE = re.compile(r"sidecar metrics on [^\s]+:(\d+)")


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
        tables = f"`{table}`, `{table}_counters`, `{table}_stats`"
        connection.execute(sqlalchemy.text(f"DROP TABLE IF EXISTS {tables}"))
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
    set_flow_control(broker.endpoint, True)
    # The two pools must compete for this test to prove anything. Small claims sent one at a
    # time, so that a drain takes many rounds, and a short poll, so that the other pool looks
    # in between: with the defaults the pool that first saw the broker back could drain all
    # the backlog before the other's next poll (seen on CI). No pull-in: the sidecar that first sees
    # the broker back would make its own spools due at once and drain them alone.
    sidecars = [
        SidecarProcess(
            f"127.0.0.1:{port}",
            shared_outbox_url,
            "--claim-batch-max=5",
            "--pull-in-ids-max=0",
            "--resend-concurrency-max=1",
            "--poll-interval-ms=10",
            # Each sidecar ends its own outage by a probe: soon, so that both join the drain.
            "--probe-interval-max-ms=100",
        )
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
        back = broker
        set_flow_control(broker.endpoint, False)
        endpoint = back.endpoint
        wait_until(
            lambda: all(stored_copies(endpoint, i) for i in ids),
            DELIVERY_DEADLINE_S,
            "both sidecars to drain the shared outbox",
        )
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


def test_a_group_another_sidecar_spooled_is_fenced_here_until_delivered(
    broker: BrokerProcess,
) -> None:
    """The FIFO fence is in memory, but backed by the shared outbox: a group that sidecar A
    spooled is fenced in sidecar B once B's refresh has read the outbox, and lifted once the
    group is delivered; the group's messages are stored in send order across both."""
    prefix = unique_name("rocketbox_test")
    url = f"{redis_url()}?prefix={prefix}"
    # A cannot reach the broker, and its entry is not due for an hour: only B's refresh can
    # learn of it, and B's pool cannot deliver it before the test says so.
    a = SidecarProcess(
        f"127.0.0.1:{free_port()}", url, "--backoff-initial-ms=3600000",
        "--backoff-max-ms=3600000",
    )  # fmt: skip
    b = SidecarProcess(
        broker.endpoint, url, "--fifo-fence-refresh-interval-ms=50", "--metrics-listen=127.0.0.1:0"
    )
    ids: list[str] = []
    try:
        port = metrics_port(b.output(), B_METRICS_LINE)

        def fenced_groups() -> float:
            return sample(scrape(port), "rocketbox_sidecar_fifo_fenced_groups")

        def send_to(sidecar: SidecarProcess) -> api.SendResult:
            with sidecar.client() as stub:
                r = send(stub, message("Fifo", f"step {len(ids)}".encode(), message_group="g"))
            ids.append(r.message_id)
            return r

        assert send_to(a).spooled.cause == api.SPOOL_CAUSE_UNAVAILABLE
        wait_until(lambda: fenced_groups() == 1, DELIVERY_DEADLINE_S, "B fencing A's group")
        assert send_to(b).spooled.cause == api.SPOOL_CAUSE_FIFO_FENCE
        a.stop()  # its pool would claim the entry too, fail, and put it back for an hour
        with open_outbox(url) as outbox:
            assert outbox.retry_now([ids[0]], now_ms()) == 1  # A's entry: due now, for B's pool
        wait_until(lambda: fenced_groups() == 0, DELIVERY_DEADLINE_S, "B lifting the fence")
        assert send_to(b).HasField("stored")
        copies = [stored_copies(broker.endpoint, i) for i in ids]
        assert [len(c) for c in copies] == [1, 1, 1], "each message stored once"
        offsets = [c[0].queue_offset for c in copies]
        assert offsets == sorted(offsets), f"stored out of send order: {offsets}"
    finally:
        a.stop()
        b.stop()
        client = redis.Redis.from_url(redis_url())
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
