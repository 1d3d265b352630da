"""A real ``rocketbox broker`` process for integration tests, with a small store.

A later ``--listen`` in ``args`` overrides the free port: a broker restarted on its old port
is how tests bring "the broker back" to a sidecar that knows only that address. The small store's
geometry is chaos/processes.py's, which the chaos suite's brokers use too.
"""

from __future__ import annotations

from pathlib import Path

from chaos.processes import BROKER_METRICS_LINE, SMALL_STORE_ARGS, small_store_config
from chaos.processes import BROKER_READY_LINE as READY_LINE
from tests.rocketbox_process import REPO_ROOT, RocketboxProcess, wait_until

__all__ = [
    "READY_LINE",
    "REPO_ROOT",
    "SMALL_STORE_ARGS",
    "BrokerProcess",
    "small_store_config",
    "wait_until",
]


class BrokerProcess(RocketboxProcess):
    """``metrics``: serve Prometheus metrics on a free port (``metrics_port``)."""

    def __init__(self, data_dir: Path, *args: str, metrics: bool = False) -> None:
        self.data_dir = data_dir
        self.args = args
        listen = ["--metrics-listen", "127.0.0.1:0"] if metrics else []
        super().__init__(
            "broker",
            READY_LINE,
            ["broker", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", *listen,
             *SMALL_STORE_ARGS, *args],
            BROKER_METRICS_LINE if metrics else None,
        )  # fmt: skip
