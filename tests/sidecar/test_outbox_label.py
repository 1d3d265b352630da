"""The ``outbox`` label of the sidecar's outbox gauges (sidecar/metrics.py ``outbox_label``).

Proves, for each backend's URLs:
- sidecars given one shared outbox's URL compute one label, whatever credentials or driver
  options each URL carries, and no label holds a user, a password or a query option other than
  the one that names the outbox (MySQL's table, Redis's key prefix, each with its default);
- two outboxes on one server are two labels (another table, another prefix, another database);
- an outbox no other sidecar opens (RocksDB, memory) is qualified by the sidecar's id, so that
  the same path in two pods is two outboxes.
"""

from __future__ import annotations

from sidecar.metrics import outbox_label

SECRETS = ("s3cret", "sentinel-pw", "alice", "bob")


def labels(*urls: str, sidecar_id: str = "pod-0:8081") -> set[str]:
    found = {outbox_label(url, sidecar_id) for url in urls}
    for label in found:
        assert not any(secret in label for secret in SECRETS), label
    return found


def test_mysql_names_server_database_and_table() -> None:
    assert labels(
        "mysql+pymysql://alice:s3cret@db:3306/orders?table=outbox",
        "mysql+pymysql://bob@db:3306/orders?table=outbox&charset=utf8mb4&read_timeout=5",
    ) == {"mysql+pymysql://db:3306/orders.outbox"}  # fmt: skip
    assert labels("mysql+pymysql://alice:s3cret@db:3306/orders") == {
        "mysql+pymysql://db:3306/orders.rocketbox_outbox"
    }
    assert len(labels(
        "mysql+pymysql://db:3306/orders?table=a", "mysql+pymysql://db:3306/orders?table=b",
        "mysql+pymysql://db:3306/billing?table=a",
    )) == 3  # fmt: skip


def test_redis_names_hosts_database_and_prefix() -> None:
    assert labels(
        "redis://:s3cret@cache:6379/0?prefix=orders", "redis://cache:6379/0?prefix=orders",
        "redis://alice:s3cret@cache:6379/0?prefix=orders&socket_timeout=3",
    ) == {"redis://cache:6379/0?prefix=orders"}  # fmt: skip
    assert labels("redis://cache:6379/0") == {"redis://cache:6379/0?prefix=rocketbox:outbox"}
    assert len(labels("redis://cache:6379/0?prefix=a", "redis://cache:6379/0?prefix=b")) == 2
    sentinel = (
        "redis+sentinel://:s3cret@s1:26379,s2:26379/mymaster/0"
        "?prefix=orders&sentinel_password=sentinel-pw"
    )
    assert labels(sentinel) == {"redis+sentinel://s1:26379,s2:26379/mymaster/0?prefix=orders"}


def test_an_outbox_of_one_sidecar_is_qualified_by_the_sidecars_id() -> None:
    assert labels("rocksdb:///data/outbox?reserve_bytes=1024") == {
        "rocksdb:///data/outbox on pod-0:8081"
    }
    assert labels("rocksdb:///data/outbox", sidecar_id="pod-1:8081") == {
        "rocksdb:///data/outbox on pod-1:8081"
    }
    assert labels("memory://") == {"memory:// on pod-0:8081"}
