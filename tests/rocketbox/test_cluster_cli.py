"""``rocketbox cluster list``'s rows from a NameServer's answer (rocketbox/cluster_cli.py).

Proves: a slave's replication lag is its master's max offset minus its own (never negative: the
two registrations come at different moments), none for a master or for a slave whose master is
gone; the age is the NameServer's clock minus the last registration; one table row a broker.
"""

from __future__ import annotations

from rocketbox.cluster_cli import broker_rows, format_rows
from rocketbox_api.namesrv.v1 import namesrv_pb2 as npb


def info(name: str, broker_id: int, offset: int, updated_ms: int) -> npb.BrokerInfo:
    return npb.BrokerInfo(
        cluster_name="C",
        broker_name=name,
        broker_id=broker_id,
        broker_addr=f"127.0.0.1:{100 + broker_id}",
        role=npb.BROKER_ROLE_SLAVE if broker_id else npb.BROKER_ROLE_SYNC_MASTER,
        max_phy_offset=offset,
        last_update_timestamp_ms=updated_ms,
    )


ANSWER = npb.GetBrokerClusterInfoResponse(
    brokers=[
        info("a", 0, 5000, 9_000),
        info("a", 1, 4200, 8_500),
        info("a", 2, 5100, 9_900),  # registered after a later master offset than a's last
        info("b", 1, 300, 10_000),  # b's master is gone
    ],
    now_ms=10_000,
)


def test_a_slaves_lag_is_its_masters_max_offset_minus_its_own() -> None:
    rows = {(r.group, r.broker_id): r for r in broker_rows(ANSWER)}
    assert rows["a", 0].replication_lag_bytes is None
    assert rows["a", 1].replication_lag_bytes == 800
    assert rows["a", 2].replication_lag_bytes == 0
    assert rows["b", 1].replication_lag_bytes is None
    assert rows["a", 1].last_registration_age_ms == 1_500
    assert rows["a", 0].role == "SYNC_MASTER"


def test_the_table_has_a_row_per_broker() -> None:
    lines = format_rows(broker_rows(ANSWER)).splitlines()
    assert lines[0].split() == [
        "CLUSTER", "GROUP", "ID", "ROLE", "ADDRESS", "MAX", "OFFSET", "LAG", "BYTES", "AGE",
    ]  # fmt: skip
    assert lines[2].split() == ["C", "a", "1", "SLAVE", "127.0.0.1:101", "4200", "800", "1.5s"]
    assert len(lines) == 5
    assert format_rows([]) == "no brokers"
