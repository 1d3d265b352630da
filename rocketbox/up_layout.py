"""Where ``rocketbox up --data-dir DATA_DIR`` keeps its parts, named once: ``up`` writes there and
``rocketbox reconcile --data-dir`` reads from there.

One broker keeps its store in ``DATA_DIR/broker``; a cluster (``up --broker-groups N --slaves
M``) keeps each broker's in ``DATA_DIR/brokers/<broker-name>-<broker-id>`` (``broker-a-0`` is
group a's master, ``broker-a-1`` its first slave).
"""

from __future__ import annotations

from pathlib import Path

UP_BROKER_DIR_NAME = "broker"
UP_CLUSTER_BROKERS_DIR_NAME = "brokers"
UP_OUTBOX_DIR_NAME = "outbox"
UP_ACK_LEDGER_NAME = "acks.jsonl"


def up_broker_dir(data_dir: Path) -> Path:
    return (data_dir / UP_BROKER_DIR_NAME).resolve()


def up_cluster_broker_dir(data_dir: Path, broker_name: str, broker_id: int) -> Path:
    return (data_dir / UP_CLUSTER_BROKERS_DIR_NAME / f"{broker_name}-{broker_id}").resolve()


def up_broker_stores(data_dir: Path) -> list[Path]:
    """Every broker store ``up`` left in ``data_dir`` (those holding a ``commitlog/``): the single
    broker's, then a cluster's in name order (a group's master before its slaves)."""
    stores = [up_broker_dir(data_dir)]
    cluster = data_dir / UP_CLUSTER_BROKERS_DIR_NAME
    if cluster.is_dir():
        stores += sorted(p.resolve() for p in cluster.iterdir() if p.is_dir())
    return [p for p in stores if (p / "commitlog").is_dir()]


def up_outbox_dir(data_dir: Path) -> Path:
    return (data_dir / UP_OUTBOX_DIR_NAME).resolve()


def up_ack_ledger(data_dir: Path) -> Path:
    return (data_dir / UP_ACK_LEDGER_NAME).resolve()
