"""`rocketbox outbox` beside a running sidecar that holds its RocksDB outbox, and reads that never
create an outbox.

What it proves:
- retry-now, requeue and stats work while a real sidecar (or `rocketbox up`) holds the outbox
  (broker down or throttling, entries spooled): the CLI finds the sidecar through the holder
  file beside the outbox, or through --sidecar, and answers exactly what changed; the holder
  file goes at the sidecar's clean stop; purge, which it does not serve, names it; its admin
  service refuses a bad selection naming the field and the limit;
- a holder file whose pid is dead, or whose live pid does not answer while the outbox's lock is
  free (the pid reused), is stale: the outbox is opened directly;
- a holder that does not answer is named (pid, admin endpoint), exit 3; a lock held by a process
  that left no holder file says so and how to go on: never "unreachable … LOCK";
- reads never create an outbox: a misspelt MySQL table is "no such outbox table", exit 3, and no
  table appears (information_schema); a RocksDB path that does not exist likewise; a Redis prefix
  with no keys is an empty outbox (Redis outboxes have no schema to be missing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa

from outbox import open_outbox
from outbox.holder import Holder, holder_path, read_holder, write_holder
from rocketbox_api.v1 import outbox_admin_pb2 as pb
from rocketbox_api.v1 import outbox_admin_pb2_grpc, sidecar_pb2_grpc
from sidecar.clock import now_ms
from tests.rocketbox.outbox_cli_support import CLI_DEADLINE_S, HOUR_MS, run
from tests.rocketbox.test_up import Up
from tests.rocketbox_process import REPO_ROOT, wait_until
from tests.services import free_port, mysql_url, redis_url, unique_name
from tests.sidecar.sidecar_process import (
    SidecarProcess,
    message,
    outcome,
    send,
    set_flow_control,
)

pytestmark = pytest.mark.slow

# Spooled entries wait an hour: only retry-now makes them due. The broker being down, the pool
# probes one due entry at a time, at least every 100 ms.
HOUR_BACKOFF_ARGS = (
    f"--backoff-initial-ms={HOUR_MS}",
    f"--backoff-max-ms={HOUR_MS}",
    "--retry-times-when-send-failed=0",
    "--probe-interval-max-ms=100",
)
SPOOLED = 3
# Each spooled message's own delivery budget: a resend that fails past it buries the entry. Long
# enough that the requeued entry, with a fresh one, is seen resent and PENDING before it ends.
BUDGET_MS = 10_000


def run_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@contextmanager
def spooling_sidecar(tmp_path: Path) -> Iterator[tuple[SidecarProcess, str]]:
    """A sidecar whose broker is down, holding a RocksDB outbox with SPOOLED entries."""
    url = f"rocksdb://{tmp_path / 'outbox'}"
    sidecar = SidecarProcess(f"127.0.0.1:{free_port()}", url, *HOUR_BACKOFF_ARGS)
    try:
        with sidecar.client() as stub:
            results = []
            for i in range(SPOOLED):
                m = message("Orders", f"b{i}".encode())
                m.delivery_timeout.FromMilliseconds(BUDGET_MS)
                results.append(send(stub, m))
        assert {outcome(r) for r in results} == {"spooled"}
        yield sidecar, url
    finally:
        if sidecar.running():
            sidecar.stop()


def test_retry_now_requeue_and_stats_go_through_the_running_sidecar(tmp_path: Path) -> None:
    with spooling_sidecar(tmp_path) as (sidecar, url):
        holder = read_holder(tmp_path / "outbox")
        assert holder is not None
        assert (holder.pid, holder.admin_endpoint) == (sidecar.proc.pid, sidecar.endpoint)
        # stats: read-only beside the sidecar, or asked of it; both see the spooled entries.
        assert run_json("stats", "--outbox", url)["totals"]["pending"] == SPOOLED
        asked = run_json("stats", "--outbox", url, "--sidecar", sidecar.endpoint)
        assert asked["totals"]["pending"] == SPOOLED
        assert asked["depth"][0]["cause"] == "UNAVAILABLE"

        # retry-now: made due through the holder, sent (the broker is down); past their budget,
        # each failed resend buries its entry: DEAD.
        def past_budget() -> bool:
            entries = run_json("ls", "--outbox", url)["entries"]
            return all(now_ms() - e["state_changed_ms"] > BUDGET_MS for e in entries)

        wait_until(past_budget, CLI_DEADLINE_S, "the entries to pass their budget")
        made_due = run_json("retry-now", "--all", "--outbox", url)
        assert made_due == {"made_due": SPOOLED, "asked": None}
        wait_until(
            lambda: run_json("stats", "--outbox", url)["totals"]["dead"] == SPOOLED,
            CLI_DEADLINE_S,
            "the entries to be buried",
        )
        # requeue: named ids (one not in the outbox) and --all; each answer is exact.
        ids = [e["message_id"] for e in run_json("ls", "--outbox", url)["entries"]]
        named = run_json("requeue", ids[0], "no-such-id", "--outbox", url)
        assert named == {"requeued": 1, "asked": 2}

        # Its attempts reset and its budget starts again: it is sent at once (the broker's
        # probe), fails, and is PENDING, while the two others stay DEAD.
        def resent_pending() -> bool:
            states = {e["message_id"]: e for e in run_json("ls", "--outbox", url)["entries"]}
            again = states[ids[0]]
            if again["state"] != "PENDING" or again["attempts"] < 1:
                return False
            assert [states[i]["state"] for i in ids[1:]] == ["DEAD"] * (SPOOLED - 1)
            return True

        wait_until(resent_pending, CLI_DEADLINE_S, "the requeued entry to be resent")
        every = run_json("requeue", "--all", "--outbox", url, "--sidecar", sidecar.endpoint)
        assert every == {"requeued": SPOOLED - 1, "asked": None}
        # purge is not served by the sidecar: it needs the outbox to itself, and says whose it is.
        purge = run("purge", "--state", "dead", "--older-than", "0s", "--yes", "--outbox", url)
        assert purge.returncode == 3, purge.stderr
        assert f"held by rocketbox sidecar pid {sidecar.proc.pid}" in purge.stderr
        assert "stop that sidecar first" in purge.stderr
        sidecar.stop()
    assert not holder_path(tmp_path / "outbox").exists(), "the clean stop left its holder file"


def test_a_stale_holder_file_is_ignored(tmp_path: Path) -> None:
    url = f"rocksdb://{tmp_path / 'outbox'}"
    with spooling_sidecar(tmp_path) as (sidecar, _):
        sidecar.kill()  # SIGKILL: its holder file stays, naming a dead pid
    stale = read_holder(tmp_path / "outbox")
    assert stale is not None
    assert not stale.alive()
    assert run_json("retry-now", "--all", "--outbox", url)["made_due"] == SPOOLED
    # A dead holder's pid taken by another process looks alive: its silence, and the lock
    # free, show the file stale all the same.
    nobody = f"127.0.0.1:{free_port()}"
    write_holder(tmp_path / "outbox", Holder(os.getpid(), nobody, "rocketbox sidecar", 0))
    assert run_json("requeue", "--all", "--outbox", url) == {"requeued": 0, "asked": None}


@contextmanager
def lock_holder(outbox_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the RocksDB outbox's lock, answering nothing."""
    code = (
        "import sys; from outbox import open_outbox; "
        f"o = open_outbox('rocksdb://{outbox_dir}'); print('HELD', flush=True); sys.stdin.read()"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO_ROOT, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "HELD\n"
            yield proc
        finally:
            proc.kill()


def test_a_holder_not_answering_is_named_and_a_lock_without_one_is_explained(
    tmp_path: Path,
) -> None:
    outbox_dir = tmp_path / "outbox"
    url = f"rocksdb://{outbox_dir}"
    open_outbox(url).close()
    with lock_holder(outbox_dir) as proc:
        nobody = f"127.0.0.1:{free_port()}"
        write_holder(outbox_dir, Holder(proc.pid, nobody, "rocketbox sidecar", 0))
        for args in (("retry-now", "--all"), ("requeue", "--all")):
            result = run(*args, "--outbox", url)
            assert result.returncode == 3, result.stderr
            assert f"held by rocketbox sidecar pid {proc.pid}, admin at {nobody}" in result.stderr
            assert "not answering" in result.stderr
        holder_path(outbox_dir).unlink()
        result = run("retry-now", "--all", "--outbox", url)
        assert result.returncode == 3, result.stderr
        assert "held by another process" in result.stderr
        assert "--sidecar HOST:PORT" in result.stderr
        for wrong in ("unreachable", "LOCK"):
            assert wrong not in result.stderr


def _tables_like(prefix: str) -> list[str]:
    engine = sa.create_engine(mysql_url())
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = 'test' AND table_name LIKE :p"
                ),
                {"p": f"{prefix}%"},
            )
            return [str(r[0]) for r in rows]
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "args", [("stats",), ("ls",), ("show", "x"), ("requeue", "--all"), ("retry-now", "--all")]
)
def test_a_misspelt_mysql_table_is_not_found_and_never_created(args: tuple[str, ...]) -> None:
    table = unique_name("rocketbox_outbx")
    result = run(*args, "--outbox", f"{mysql_url()}?table={table}")
    assert result.returncode == 3, result.stderr
    assert f"no such outbox table {table!r}" in result.stderr
    assert _tables_like(table) == []


def test_a_missing_rocksdb_path_is_not_found_and_never_created(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "outbox"
    for args in (("stats",), ("export", "--out", str(tmp_path / "x.jsonl")), ("requeue", "--all")):
        result = run(*args, "--outbox", f"rocksdb://{missing}")
        assert result.returncode == 3, result.stderr
        assert f"no such outbox: no RocksDB database at {missing}" in result.stderr
    assert not (tmp_path / "no").exists()


def test_a_redis_prefix_without_keys_is_an_empty_outbox() -> None:
    result = run_json("stats", "--outbox", f"{redis_url()}?prefix={unique_name('nokeys')}")
    assert result["totals"]["pending"] == 0


def test_the_sidecar_option_reads_the_environment(tmp_path: Path) -> None:
    with spooling_sidecar(tmp_path) as (sidecar, url):
        result = subprocess.run(
            [sys.executable, "-m", "rocketbox", "outbox", "stats", "--json", "--outbox", url],
            cwd=REPO_ROOT,
            env={**os.environ, "ROCKETBOX_SIDECAR": sidecar.endpoint},
            capture_output=True,
            text=True,
            timeout=CLI_DEADLINE_S,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["totals"]["pending"] == SPOOLED


def test_rocketbox_up_is_found_and_asked_while_it_holds_its_outbox(tmp_path: Path) -> None:
    up = Up(tmp_path)
    try:
        url = f"rocksdb://{tmp_path / 'outbox'}"
        holder = read_holder(tmp_path / "outbox")
        assert holder is not None
        assert holder.admin_endpoint == up.endpoint
        set_flow_control(up.broker_endpoint, on=True)  # "system busy": sends spool, THROTTLED
        with grpc.insecure_channel(up.endpoint) as channel:
            stub = sidecar_pb2_grpc.SidecarServiceStub(channel)
            results = [send(stub, message("Orders", f"b{i}".encode())) for i in range(SPOOLED)]
        assert {outcome(r) for r in results} == {"spooled"}
        # While throttled, resends reschedule; what retry-now made due is at most what waits.
        made_due = run_json("retry-now", "--all", "--outbox", url)["made_due"]
        assert 0 <= made_due <= SPOOLED
        assert run_json("requeue", "--all", "--outbox", url)["requeued"] == 0  # none dead
        set_flow_control(up.broker_endpoint, on=False)
        run_json("retry-now", "--all", "--outbox", url)  # no waiting out the back-off
        wait_until(
            lambda: (
                run_json("stats", "--outbox", url, "--sidecar", up.endpoint)["totals"]["delivered"]
                == SPOOLED
            ),
            CLI_DEADLINE_S,
            "the spooled entries to be delivered",
        )
        assert up.interrupt() == 0, up.output()
        assert not holder_path(tmp_path / "outbox").exists()
    finally:
        up.kill()


def test_the_admin_service_refuses_a_bad_selection_naming_the_field_and_the_limit(
    tmp_path: Path,
) -> None:
    with (
        spooling_sidecar(tmp_path) as (sidecar, _),
        grpc.insecure_channel(sidecar.endpoint) as channel,
    ):
        stub = outbox_admin_pb2_grpc.OutboxAdminServiceStub(channel)
        too_many = pb.EntrySelection(message_ids=[f"id{i}" for i in range(1_001)])
        neither = pb.EntrySelection()
        both = pb.EntrySelection(message_ids=["a"], all=True)
        for selection, says in (
            (too_many, "selection.message_ids: has 1001 ids; the limit is 1000"),
            (neither, "selection: name entries in message_ids, or set all"),
            (both, "selection: name entries in message_ids, or set all"),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                stub.Requeue(pb.RequeueRequest(selection=selection), timeout=CLI_DEADLINE_S)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert says in str(refused.value.details())
        # Paged: --all reads at most a page; a short page says it reached the end.
        answer = stub.RetryNow(
            pb.RetryNowRequest(selection=pb.EntrySelection(all=True)), timeout=CLI_DEADLINE_S
        )
        assert (answer.change.changed, answer.change.selected) == (SPOOLED, SPOOLED)
        assert not answer.change.HasField("next_after_seq")
