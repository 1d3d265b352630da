"""``rocketbox reconcile`` over a cluster's commitlogs: two broker groups and a slave's copy.

The data is planted as ``rocketbox up --broker-groups 2 --slaves 1`` lays it out
(``DATA_DIR/brokers/<broker-name>-<broker-id>``), written with the broker's codec: group a's
master (store host 10.0.0.1:8081), its slave's copy of that log (the directory copied byte for
byte, as HA replication leaves it) and group b's master (10.0.0.2:8081), in small segments so
that every directory has several with the same names (the scan's counts are kept apart by
directory). Planted: ok messages in both groups, a message resent to the other group and stored
by both at phy_offset 0 in the same millisecond (only the store host tells the two records
apart), a message stored twice by group a, and an acknowledged message no group holds.

Proves, for both engines and for an incremental run in chunks: the slave's copy adds no
duplicate and no message (the totals equal those of the masters alone, and of the slave in its
master's place) and is counted as slave copies; the resend across groups and the one within a
group are still duplicates; the loss is still found; the summary names every directory with its
records and store hosts; ``--data-dir`` of the cluster layout finds all three stores (the process
exits 1 and says what it read, report.html too); a directory given twice is refused; IPv4 and
IPv6 store hosts read right.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark.sql import SparkSession

from broker.store.codec.encode import encode_message, finish_record
from broker.store.codec.message import MessageExtBrokerInner
from reconcile.commitlog_sources import read_sources
from reconcile.config import ENGINE_IN_PROCESS, ENGINE_SPARK, JobConfig
from reconcile.errors import InputError
from reconcile.job import run
from reconcile.store_hosts import store_hosts
from rocketbox.up_layout import up_broker_stores, up_cluster_broker_dir
from tests.reconcile.planted import SEGMENT_BYTES, T0, counts
from tests.reconcile.rocketbox_reconcile import reconcile
from tests.reconcile.testdata import CommitLogWriter, ledger_line, write_ledger

pytestmark = pytest.mark.slow

STORE_A = ("10.0.0.1", 8081)
STORE_B = ("10.0.0.2", 8081)
# Enough 150-byte records for several 8 KiB segments per directory.
OK_PER_GROUP = 120
LOST_ID = "LOST-1"
EXIT_LOST = 1


@dataclass
class Cluster:
    data_dir: Path
    acks: Path
    outbox: Path

    def store(self, name: str, broker_id: int) -> Path:
        return up_cluster_broker_dir(self.data_dir, name, broker_id)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    root = tmp_path_factory.mktemp("cluster")
    c = Cluster(root / "data", root / "acks.jsonl", root / "outbox.jsonl")
    a, b = c.store("broker-a", 0), c.store("broker-b", 0)
    with (
        CommitLogWriter(a / "commitlog", SEGMENT_BYTES, STORE_A) as log_a,
        CommitLogWriter(b / "commitlog", SEGMENT_BYTES, STORE_B) as log_b,
    ):
        # Resent to group b after group a stored it: the same id, offset and store time.
        assert log_a.append("Orders", "DUP-ACROSS", T0) == log_b.append("Orders", "DUP-ACROSS", T0)
        for i in range(OK_PER_GROUP):
            log_a.append("Orders", f"A-{i}", T0 + 1 + i, body=b"b" * 40)
            log_b.append("Orders", f"B-{i}", T0 + 1 + i, body=b"b" * 40)
        log_a.append("Orders", "DUP-A", T0 + 500)
        log_a.append("Orders", "DUP-A", T0 + 501)
    # The slave's copy: HA replication leaves its master's log byte for byte.
    shutil.copytree(a, c.store("broker-a", 1))
    ids = ["DUP-ACROSS", "DUP-A", LOST_ID]
    ids += [f"{g}-{i}" for g in "AB" for i in range(OK_PER_GROUP)]
    write_ledger(c.acks, [ledger_line(m, "Orders", "STORED", T0 + 1, queue_id=0) for m in ids])
    c.outbox.write_text("")
    return c


def segment_names(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "commitlog").iterdir())


def expected_totals() -> dict[str, int]:
    totals = dict.fromkeys(counts([]), 0)
    totals.update(messages=2 * OK_PER_GROUP + 3, ok=2 * OK_PER_GROUP + 2, lost=1)
    return totals | {"duplicated": 2, "duplicate_copies": 2}


def test_data_dir_of_a_cluster_reads_every_store(cluster: Cluster, tmp_path: Path) -> None:
    # First in the module: its JVM runs before the module's Spark session starts.
    a0, a1, b0 = (
        cluster.store("broker-a", 0),
        cluster.store("broker-a", 1),
        cluster.store("broker-b", 0),
    )
    assert len(segment_names(a0)) >= 3
    assert segment_names(a0) == segment_names(a1)

    done = reconcile(
        "--data-dir", str(cluster.data_dir), "--outbox", str(cluster.outbox),
        "--acks", str(cluster.acks), "--master", "local[2]", out=tmp_path / "out",
    )  # fmt: skip

    assert done.code == EXIT_LOST, done.stderr[-3000:]
    assert done.summary["inputs"]["commitlogs"] == [str(s / "commitlog") for s in (a0, a1, b0)]
    assert done.summary["totals"] == expected_totals()
    lines = done.stdout.splitlines()
    assert (
        f"commitlog: {a1 / 'commitlog'}: {OK_PER_GROUP + 3} records ({OK_PER_GROUP + 3} kept) "
        "stored by 10.0.0.1:8081" in lines
    )
    assert (
        f"commitlog: {b0 / 'commitlog'}: {OK_PER_GROUP + 1} records ({OK_PER_GROUP + 1} kept) "
        "stored by 10.0.0.2:8081" in lines
    )
    assert (
        f"commitlog: 3 directories read; {OK_PER_GROUP + 3} slave copies of a master's "
        "record counted once" in lines
    )
    report = (done.out / "report.html").read_text()
    assert "<h3>Directories read</h3>" in report
    assert f"{OK_PER_GROUP + 3:,} records were read twice or more" in report
    assert all(str(s / "commitlog") in report for s in (a0, a1, b0))


def reconciled(
    spark: SparkSession, cluster: Cluster, out: Path, *stores: Path, engine: str = ENGINE_SPARK
) -> dict[str, Any]:
    config = JobConfig(
        commitlogs=stores, outbox=cluster.outbox, out_dir=out, ledgers=(cluster.acks,),
        engine=engine,
    )  # fmt: skip
    return run(config, spark)


@pytest.mark.parametrize("engine", [ENGINE_SPARK, ENGINE_IN_PROCESS])
def test_a_slaves_copy_is_no_duplicate(
    spark: SparkSession, cluster: Cluster, tmp_path: Path, engine: str
) -> None:
    a0, a1, b0 = (
        cluster.store("broker-a", 0),
        cluster.store("broker-a", 1),
        cluster.store("broker-b", 0),
    )

    with_slave = reconciled(spark, cluster, tmp_path / "with", a0, a1, b0, engine=engine)
    masters = reconciled(spark, cluster, tmp_path / "masters", a0, b0, engine=engine)
    # After a failover the slave's copy is group a's store: it proves the same.
    slave_for_master = reconciled(spark, cluster, tmp_path / "slave", a1, b0, engine=engine)

    assert with_slave["totals"] == masters["totals"] == expected_totals()
    assert slave_for_master["totals"] == expected_totals()
    assert with_slave["commitlog"]["slave_copies"] == OK_PER_GROUP + 3
    assert masters["commitlog"]["slave_copies"] == 0
    drill = with_slave["drill_down"]
    assert {r["message_id"]: r["copies"] for r in drill["duplicated"]} == {
        "DUP-ACROSS": 2, "DUP-A": 2,
    }  # fmt: skip
    assert [r["message_id"] for r in drill["lost"]] == [LOST_ID]
    assert with_slave["verdict"] == "LOST"
    assert with_slave["engine"] == engine


def test_the_summary_names_each_directory(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    a0, a1, b0 = (
        cluster.store("broker-a", 0),
        cluster.store("broker-a", 1),
        cluster.store("broker-b", 0),
    )

    log = reconciled(spark, cluster, tmp_path / "out", a0, a1, b0)["commitlog"]

    assert [
        (s["directory"], s["segments"], s["records"], s["kept_records"], s["store_hosts"])
        for s in log["sources"]
    ] == [
        (str(a0 / "commitlog"), len(segment_names(a0)), OK_PER_GROUP + 3, OK_PER_GROUP + 3,
         ["10.0.0.1:8081"]),
        (str(a1 / "commitlog"), len(segment_names(a1)), OK_PER_GROUP + 3, OK_PER_GROUP + 3,
         ["10.0.0.1:8081"]),
        (str(b0 / "commitlog"), len(segment_names(b0)), OK_PER_GROUP + 1, OK_PER_GROUP + 1,
         ["10.0.0.2:8081"]),
    ]  # fmt: skip
    # Segments of the same name in three directories: each scanned and counted once.
    assert log["segments"] == log["segments_scanned"] == sum(s["segments"] for s in log["sources"])
    assert log["records"] == 3 * OK_PER_GROUP + 7
    assert log["stops"] == []
    assert log["gaps"] == []


def test_up_layout_discovery_and_a_directory_given_twice(cluster: Cluster) -> None:
    a0, a1, b0 = (
        cluster.store("broker-a", 0),
        cluster.store("broker-a", 1),
        cluster.store("broker-b", 0),
    )
    single = cluster.data_dir / "broker" / "commitlog"
    single.mkdir(parents=True)
    try:
        assert up_broker_stores(cluster.data_dir) == [single.parent.resolve(), a0, a1, b0]
    finally:
        single.rmdir()
    assert up_broker_stores(cluster.data_dir) == [a0, a1, b0]

    with pytest.raises(InputError, match="given twice"):
        read_sources((a0, b0, a0 / "commitlog"))


def test_store_hosts_of_ipv4_and_ipv6_records() -> None:
    hosts = [("10.0.0.1", 8081), ("fd00::7", 10911), ("10.0.0.1", 8082)]
    born = [("127.0.0.1", 1), ("fd00::1", 2), ("fd00::1", 3)]
    buf = b""
    positions = []
    for store_host, born_host in zip(hosts, born, strict=True):
        msg = MessageExtBrokerInner(
            topic="T", body=b"x", queue_id=0, properties={}, born_timestamp_ms=T0,
            born_host=born_host, store_host=store_host,
        )  # fmt: skip
        positions.append(len(buf))
        buf += finish_record(encode_message(msg, 0), 0, len(buf), T0)

    found = store_hosts(buf, np.asarray(positions, np.int64))
    assert found.dictionary.take(found.indices).to_pylist() == [
        "10.0.0.1:8081", "[fd00::7]:10911", "10.0.0.1:8082",
    ]  # fmt: skip


def test_an_incremental_run_over_every_group_finds_the_same(
    cluster: Cluster, tmp_path: Path
) -> None:
    stores = (
        cluster.store("broker-a", 0),
        cluster.store("broker-a", 1),
        cluster.store("broker-b", 0),
    )
    # A few segments a chunk: the groups' segments are read in store-time order, interleaved.
    config = JobConfig(
        commitlogs=stores, outbox=cluster.outbox, out_dir=tmp_path / "out",
        ledgers=(cluster.acks,), checkpoint=tmp_path / "checkpoint", in_process_records_max=100,
        settle_ms=1_000,  # the planted answers are timed up to 121 ms before their records
    )  # fmt: skip

    summary = run(config)

    assert summary["incremental"]["chunks"] >= 3
    assert summary["incremental"]["cumulative"]["totals"] == expected_totals()
    assert summary["totals"] == expected_totals()
    assert summary["commitlog"]["slave_copies"] == OK_PER_GROUP + 3
