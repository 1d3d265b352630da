"""Where ``rocketbox up --data-dir DATA_DIR`` keeps its parts, named once: ``up`` writes there and
``rocketbox reconcile --data-dir`` reads from there."""

from __future__ import annotations

from pathlib import Path

UP_BROKER_DIR_NAME = "broker"
UP_OUTBOX_DIR_NAME = "outbox"
UP_ACK_LEDGER_NAME = "acks.jsonl"


def up_broker_dir(data_dir: Path) -> Path:
    return (data_dir / UP_BROKER_DIR_NAME).resolve()


def up_outbox_dir(data_dir: Path) -> Path:
    return (data_dir / UP_OUTBOX_DIR_NAME).resolve()


def up_ack_ledger(data_dir: Path) -> Path:
    return (data_dir / UP_ACK_LEDGER_NAME).resolve()
