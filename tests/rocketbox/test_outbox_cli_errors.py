"""`rocketbox outbox`'s failures as exit codes, run as ``python -m rocketbox outbox …``.

What it proves: a bad URL exits 2 naming the URL option and the accepted schemes; an
unreachable backend, or a change to a RocksDB outbox held by another process, exits 3
(test_outbox_cli_live.py: a missing outbox, and a holder that is a running sidecar) (reads
open it read-only beside its holder); a missing entry 4; and no message shows a password.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from outbox import open_outbox
from tests.outbox.conftest import backend_url
from tests.rocketbox.outbox_cli_support import CLI_DEADLINE_S, E1, E2, HOUR_MS, SECRET, run
from tests.rocketbox_process import REPO_ROOT
from tests.services import free_port

pytestmark = pytest.mark.slow

# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outbox_url", "says"),
    [
        (f"mysq://root:{SECRET}@127.0.0.1:3306/test", "unknown scheme 'mysq'"),
        (f"redis://:{SECRET}@127.0.0.1:notaport/0", "Port could not be cast"),
        (f"mysql+pymysql://root:{SECRET}@127.0.0.1:xx/test", "invalid literal"),
        (f"rocksdb://root:{SECRET}@somehost/outbox", "want rocksdb:///absolute/path"),
    ],
)
def test_a_bad_url_exits_2_naming_the_option_and_the_schemes(outbox_url: str, says: str) -> None:
    result = run("stats", "--outbox", outbox_url)
    assert result.returncode == 2, result.stderr
    assert "Invalid value for '--outbox' / ROCKETBOX_OUTBOX" in result.stderr
    assert says in result.stderr
    for scheme in ("rocksdb:///", "redis://", "mysql+pymysql://"):
        assert scheme in result.stderr
    assert SECRET not in result.stderr + result.stdout
    assert not Path("/nonexistent").exists()  # an admin command never creates an outbox


def test_the_outbox_url_is_required_and_read_from_the_environment(tmp_path: Path) -> None:
    missing = run("stats")
    assert missing.returncode == 2
    assert "Missing option '--outbox'" in missing.stderr
    with backend_url("rocksdb", tmp_path) as outbox_url:
        open_outbox(outbox_url).close()
        from_env = subprocess.run(
            [sys.executable, "-m", "rocketbox", "outbox", "stats", "--json"],
            cwd=REPO_ROOT,
            env={**os.environ, "ROCKETBOX_OUTBOX": outbox_url},
            capture_output=True,
            text=True,
            timeout=CLI_DEADLINE_S,
            check=False,
        )
    assert from_env.returncode == 0, from_env.stderr
    assert json.loads(from_env.stdout)["totals"]["pending"] == 0


@pytest.mark.parametrize(
    "template",
    [
        f"redis://:{SECRET}@127.0.0.1:{{port}}/0?prefix=rocketbox_test",
        f"mysql+pymysql://root:{SECRET}@127.0.0.1:{{port}}/test",
    ],
    ids=["redis", "mysql"],
)
def test_an_unreachable_backend_exits_3(template: str) -> None:
    url = template.format(port=free_port())  # a port nothing listens on
    for args in (("stats",), ("requeue", "--all")):
        result = run(*args, "--json", "--outbox", url)
        assert result.returncode == 3, (args, result.stderr)
        assert result.stdout == ""
        assert "the outbox is unreachable" in result.stderr
        assert "Connection refused" in result.stderr or "Can't connect" in result.stderr
        assert SECRET not in result.stderr


def test_a_held_rocksdb_outbox_is_read_beside_its_holder_and_changed_only_when_free(
    tmp_path: Path,
) -> None:
    with backend_url("rocksdb", tmp_path) as outbox_url:
        due_later = replace(E1, next_send_time_ms=int(time.time() * 1000) + 10 * HOUR_MS)
        with open_outbox(outbox_url) as holder:  # as a running sidecar holds it
            holder.put([due_later])
            # Reads open it read-only, beside the holder, and see what it wrote (the WAL).
            stats = run("stats", "--json", "--outbox", outbox_url)
            assert stats.returncode == 0, stats.stderr
            assert json.loads(stats.stdout)["totals"]["pending"] == 1
            shown = run("show", E1.message_id, "--json", "--outbox", outbox_url)
            assert shown.returncode == 0, shown.stderr
            # Changes need the lock: refused with exit 3, nothing changed.
            held = run("retry-now", "--all", "--outbox", outbox_url)
            assert held.returncode == 3, held.stderr
            assert "held by another process" in held.stderr
            # watch reopens its read-only view at every sample: it sees the holder's later puts.
            with subprocess.Popen(
                [sys.executable, "-m", "rocketbox", "outbox", "watch", "--json",
                 "--interval-s", "0.2", "--outbox", outbox_url],
                cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ) as watch:  # fmt: skip
                try:
                    assert watch.stdout is not None
                    assert json.loads(watch.stdout.readline())["pending"] == 1
                    holder.put([E2])
                    deadline = time.monotonic() + CLI_DEADLINE_S
                    pending = 1
                    while pending != 2 and time.monotonic() < deadline:
                        line = watch.stdout.readline()
                        assert line, "watch ended"
                        pending = json.loads(line)["pending"]
                finally:
                    watch.kill()  # it runs until killed, also when an assertion failed
                assert pending == 2, "watch never saw the second entry"
            got = holder.get(E1.message_id)
            assert got is not None
            assert got.next_send_time_ms == due_later.next_send_time_ms, "retry-now changed it"
        free = run("retry-now", "--all", "--json", "--outbox", outbox_url)
        assert free.returncode == 0, free.stderr
        with open_outbox(outbox_url) as outbox:
            got = outbox.get(E1.message_id)
            assert got is not None
            assert got.next_send_time_ms <= int(time.time() * 1000), "made due once free"
