"""chaos/services.py, the outbox services of the chaos suite's own, killed and restarted:

- a private redis-server (AOF, fsync always) keeps an outbox entry across SIGKILL and comes back
  on its port;
- a private MariaDB (its own data directory, made by mariadb-install-db, its own port and
  socket) keeps a committed outbox entry across SIGKILL and comes back on its port;
- each stops with SIGTERM, and leaving the ``with`` block stops what it started.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from chaos.services import PrivateMariaDB, PrivateRedis
from outbox import open_outbox
from tests.outbox.entries import entry, message_id

pytestmark = pytest.mark.slow


def test_a_private_redis_keeps_an_acknowledged_entry_across_sigkill(tmp_path: Path) -> None:
    with PrivateRedis(tmp_path / "redis") as server:
        url = server.url("chaos")
        with open_outbox(url) as outbox:
            outbox.put([entry(1)])
        port = server.port
        assert server.kill() == -signal.SIGKILL
        assert not server.running()
        server.start()
        assert server.port == port
        with open_outbox(url) as outbox:
            kept = outbox.get(message_id(1))
        assert kept is not None
        assert kept.message.body == entry(1).message.body
    assert not server.running()
    # SIGTERM: redis-server saved and exited cleanly.
    assert server.stop() == 0


def test_a_private_mariadb_keeps_a_committed_entry_across_sigkill(tmp_path: Path) -> None:
    with PrivateMariaDB(tmp_path / "mariadb") as server:
        url = server.url("chaos_outbox")
        assert url == f"mysql+pymysql://root@127.0.0.1:{server.port}/test?table=chaos_outbox"
        with open_outbox(url) as outbox:
            outbox.put([entry(2)])
        port = server.port
        assert server.kill() == -signal.SIGKILL
        server.start()
        assert server.port == port
        with open_outbox(url) as outbox:
            kept = outbox.get(message_id(2))
        assert kept is not None
        assert kept.message.body == entry(2).message.body
    assert not server.running()
    assert (tmp_path / "mariadb" / "data" / "mysql").is_dir()
