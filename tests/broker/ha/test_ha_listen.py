"""A master's HA listener in the broker's start checks.

Proves: ``rocketbox broker --ha-listen`` on a taken port is refused with one line naming
``--ha-listen`` and the address, before anything starts (exit 2); a BrokerController whose HA
port is taken between the check and the bind fails with ListenError naming the HA listener, and
gives its store directory's lock back; port 0 binds a free port, which ``ha_address`` reports.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from broker.broker_controller import BrokerController
from broker.config import BrokerConfig
from rocketbox_api.listen import HA, ListenError
from tests.broker.broker_process import REPO_ROOT, small_store_config

CLI_DEADLINE_S = 60


def config(store_dir: Path, ha_listen_port: int) -> BrokerConfig:
    return BrokerConfig(
        store=small_store_config(store_dir),
        listen_port=0,
        ha_listen_host="127.0.0.1",
        ha_listen_port=ha_listen_port,
    )


def test_a_taken_ha_port_is_one_line_naming_the_option(tmp_path: Path, squatter: int) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rocketbox", "broker", "--data-dir", str(tmp_path),
         "--listen", "127.0.0.1:0", "--ha-listen", f"127.0.0.1:{squatter}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=CLI_DEADLINE_S, check=False,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"--ha-listen 127.0.0.1:{squatter} is in use" in lines[0]


async def start_and_stop(cfg: BrokerConfig) -> str | None:
    controller = BrokerController(cfg)
    await controller.start()
    try:
        return controller.ha_address()
    finally:
        await controller.shutdown()


def test_a_controller_names_its_ha_listener_and_gives_the_lock_back(
    tmp_path: Path, squatter: int
) -> None:
    with pytest.raises(ListenError) as refused:
        asyncio.run(start_and_stop(config(tmp_path, squatter)))
    assert (refused.value.listener, refused.value.address) == (HA, f"127.0.0.1:{squatter}")
    address = asyncio.run(start_and_stop(config(tmp_path, 0)))  # the lock was given back
    assert address is not None
    host, _, port = address.rpartition(":")
    assert host == "127.0.0.1"
    assert int(port) > 0
