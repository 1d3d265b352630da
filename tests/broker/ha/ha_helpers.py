"""Masters and slaves as real ``rocketbox broker`` processes, port 0 everywhere, and what the tests
read from them: the master's HA address from its output, each broker's HA state from its
metrics, and commitlog bytes from its segment files."""

from __future__ import annotations

import re
import time
from pathlib import Path

from rocketmq import SimpleConsumer

from tests.broker.broker_process import BrokerProcess, wait_until
from tests.prometheus import sample, scrape

HA_LINE = re.compile(r"broker HA listening on (\S+)")
DEADLINE_S = 30.0
# Short intervals: a slave reports, and an idle master sends, every 200 ms.
FAST_HA_ARGS = (
    "--ha-send-heartbeat-interval-ms=200",
    "--ha-housekeeping-interval-ms=3000",
    "--slave-sync-interval-ms=200",
    "--invisible-duration-min-ms=1000",
    "--long-polling-timeout-ms=2000",
)


def master(data_dir: Path, *args: str, role: str = "ASYNC_MASTER") -> BrokerProcess:
    return BrokerProcess(
        data_dir, "--broker-name=broker-a", f"--broker-role={role}",
        "--ha-listen=127.0.0.1:0", *FAST_HA_ARGS, *args, metrics=True,
    )  # fmt: skip


def slave(data_dir: Path, master_ha: str, *args: str) -> BrokerProcess:
    return BrokerProcess(
        data_dir, "--broker-name=broker-a", "--broker-role=SLAVE", "--broker-id=1",
        f"--ha-master-address={master_ha}", *FAST_HA_ARGS, *args, metrics=True,
    )  # fmt: skip


def ha_address(broker: BrokerProcess) -> str:
    found = HA_LINE.findall(broker.output())
    assert found, f"no HA line in:\n{broker.output()}"
    return str(found[-1])


def max_phy_offset(broker: BrokerProcess) -> int:
    return int(sample(scrape(broker.metrics_port), "rocketbox_broker_commitlog_max_phy_offset"))


def slave_acks(master_broker: BrokerProcess) -> list[int]:
    """The phy_offsets the master's slaves last acknowledged."""
    return [
        int(value)
        for (name, _), value in scrape(master_broker.metrics_port).items()
        if name == "rocketbox_broker_ha_slave_ack_offset"
    ]


def wait_caught_up(master_broker: BrokerProcess, slave_broker: BrokerProcess) -> int:
    """Wait until the slave holds the master's whole log and the master heard so; its end."""
    end = max_phy_offset(master_broker)

    def caught_up() -> bool:
        return max_phy_offset(slave_broker) == end and end in slave_acks(master_broker)

    wait_until(caught_up, DEADLINE_S, f"the slave holding the master's {end} bytes")
    return end


def commitlog_bytes(data_dir: Path, end: int) -> bytes:
    """The commitlog's first ``end`` bytes, read from its segment files."""
    segments = sorted((data_dir / "commitlog").iterdir())
    data = b"".join(p.read_bytes() for p in segments if p.name.isdigit())
    assert len(data) >= end, f"{data_dir}: {len(data)} bytes of segments, {end} expected"
    return data[:end]


def receive_bodies(c: SimpleConsumer, want: set[bytes]) -> set[bytes]:
    """Receive (and ack) until every body of ``want`` came, within the deadline; all bodies seen."""
    seen: set[bytes] = set()
    end = time.monotonic() + DEADLINE_S
    while not want <= seen and time.monotonic() < end:
        for m in c.receive(32, 2):
            seen.add(m.body)
            c.ack(m)
    assert want <= seen, f"received {seen}, {want} expected"
    return seen
