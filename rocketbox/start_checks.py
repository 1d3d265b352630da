"""What a command checks before it starts anything: its data directories are not held by another
process, and its listen addresses are free. Each refusal is one line naming the option, the
directory or address, and what to do; exit 2, like any other unusable option.

Directories come first: a second ``make run`` on the same data directory is told that the
directory is taken, and by which process, not that a port is. The checks run before anything
starts, so no start-up line comes before the refusal; the broker and the sidecar take the lock
before binding and report a port taken in between (rocketbox_api.listen.ListenError), which
``in_use`` turns into the same line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import click

from outbox.errors import OutboxConfigError
from outbox.holder import rocksdb_dir
from rocketbox_api.listen import GRPC, HA, HEALTH, METRICS, ROCKETMQ, ListenError, address_in_use
from rocketbox_api.lock_holder import lock_holders

# RocksDB's lock file in its directory (RocksDB's own name).
ROCKSDB_LOCK_FILE = "LOCK"
# Listener (ListenError.listener) → the option that sets its address, for one server.
ListenOptions = Mapping[str, str]
BROKER_LISTEN_OPTIONS: ListenOptions = {
    GRPC: "--listen",
    METRICS: "--metrics-listen",
    HA: "--ha-listen",
}
SIDECAR_LISTEN_OPTIONS: ListenOptions = {
    GRPC: "--listen",
    METRICS: "--metrics-listen",
    ROCKETMQ: "--rocketmq-listen",
    HEALTH: "--health-listen",
}
UP_BROKER_LISTEN_OPTIONS: ListenOptions = {
    GRPC: "--broker-listen",
    METRICS: "--metrics-listen",
    HA: "--ha-listen",
}
UP_SIDECAR_LISTEN_OPTIONS: ListenOptions = {
    GRPC: "--sidecar-listen",
    METRICS: "--metrics-listen",
    ROCKETMQ: "--rocketmq-listen",
}


class StartRefused(click.ClickException):
    """A command that cannot start as asked: one line on stderr, exit 2."""

    exit_code = 2


def in_use(option: str, address: str) -> StartRefused:
    return StartRefused(
        f"{option} {address} is in use (another rocketbox?); stop it or choose another port"
    )


def listen_refused(e: ListenError, options: ListenOptions) -> StartRefused:
    """The one line for a listener that could not bind."""
    return in_use(options.get(e.listener, e.listener), e.address)


def directory_in_use(directory: Path, option: str, pids: list[int]) -> StartRefused:
    holder = f"pid {', '.join(str(p) for p in pids)}" if pids else "another process"
    return StartRefused(
        f"{directory} is in use by another process ({holder}, another rocketbox?); stop it "
        f"or choose another {option}"
    )


def refuse_locked(lock_file: Path, option: str) -> None:
    """Refuse when another process holds ``lock_file`` (its directory is named)."""
    pids = lock_holders(lock_file)
    if pids:
        raise directory_in_use(lock_file.parent, option, pids)


def rocksdb_lock_file(outbox_url: str) -> Path | None:
    """The LOCK file of a ``rocksdb://`` outbox; None for another backend, and for a URL that
    names no directory (opening the outbox then says what is wrong with it)."""
    try:
        outbox_dir = rocksdb_dir(outbox_url)
    except OutboxConfigError:
        return None
    return None if outbox_dir is None else outbox_dir / ROCKSDB_LOCK_FILE


def refuse_outbox_locked(outbox_url: str, option: str) -> None:
    lock_file = rocksdb_lock_file(outbox_url)
    if lock_file is not None:
        refuse_locked(lock_file, option)


def refuse_taken(addresses: list[tuple[str, str, int]]) -> None:
    """Refuse the first (option, host, port) another process listens on."""
    for option, host, port in addresses:
        if address_in_use(host, port):
            raise in_use(option, f"{host}:{port}")
