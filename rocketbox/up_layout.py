"""Where ``rocketbox up --data-dir DATA_DIR`` keeps its parts, named once: ``up`` writes there and
``rocketbox reconcile --data-dir`` reads from there."""

from __future__ import annotations

from pathlib import Path

UP_BROKER_DIR_NAME = "broker"
UP_CLUSTER_BROKERS_DIR_NAME = "brokers"
UP_OUTBOX_DIR_NAME = "outbox"
UP_ACK_LEDGER_NAME = "acks.jsonl"


def up_broker_dir(data_dir: Path) -> Path:
    return (data_dir / UP_BROKER_DIR_NAME).resolve()


def up_outbox_dir(data_dir: Path) -> Path:
    return (data_dir / UP_OUTBOX_DIR_NAME).resolve()


def up_ack_ledger(data_dir: Path) -> Path:
    return (data_dir / UP_ACK_LEDGER_NAME).resolve()


def up_cluster_broker_dir(data_dir: Path, broker_name: str, broker_id: int) -> Path:
    """A local cluster's broker (``up --broker-groups``): ``brokers/broker-a-0`` is group
    broker-a's master, ``brokers/broker-a-1`` its first slave."""
    return (data_dir / UP_CLUSTER_BROKERS_DIR_NAME / f"{broker_name}-{broker_id}").resolve()
