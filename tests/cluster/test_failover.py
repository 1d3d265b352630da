"""The sidecar in front of a real cluster: two broker groups, each a SYNC_MASTER with a slave,
registered with a NameServer; the sidecar knows both masters as access points.

Proves, with a master SIGKILLed while four apps send through the sidecar: every message gets an
answer and none is REJECTED; every send that starts after the kill is stored on the other group
(the sidecar's retries and fault avoidance move off the dead one) or spooled and then delivered
there; every message acknowledged durable is consumed through the cluster, the dead group's from
its slave (routed READ-only there once the NameServer dropped the master); and the
reconciliation over all four commitlogs (both groups, master and slave) with the sidecar's ack
ledger and outbox finds nothing lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc
from rocketbox_api.v1 import sidecar_pb2_grpc
from tests.broker.grpc_service.test_consumer import simple_consumer
from tests.cluster.processes import Cluster, running_cluster
from tests.cluster.test_cluster import query_route
from tests.rocketbox_process import REPO_ROOT, wait_until
from tests.sidecar.sidecar_process import SidecarProcess, message, outcome, send

pytestmark = pytest.mark.slow

TOPIC = "Orders"
MESSAGES = 240
SENDERS = 4
KILL_AFTER_ANSWERS = 80
CONSUMER_ARGS = ("--invisible-duration-min-ms=1000", "--long-polling-timeout-ms=2000")
MASTER_ARGS = (
    "--ha-listen=127.0.0.1:0", "--broker-role=SYNC_MASTER", "--sync-flush-timeout-ms=3000",
    f"--topic={TOPIC}:4:NORMAL", *CONSUMER_ARGS,
)  # fmt: skip
DEADLINE_S = 60.0
RECONCILE_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class Answer:
    message_id: str
    outcome: str
    broker_name: str
    durable: bool
    after_kill: bool


def slaves_connected(cluster: Cluster) -> bool:
    for m in cluster.masters:
        with grpc.insecure_channel(m.endpoint) as channel:
            state = broker_admin_pb2_grpc.BrokerAdminStub(channel).GetHAState(
                broker_admin_pb2.GetHAStateRequest(), timeout=5.0
            )
        if not state.slaves:
            return False
    return True


def send_under_a_kill(sidecar: SidecarProcess, cluster: Cluster) -> list[Answer]:
    """SENDERS apps send MESSAGES in all; broker-a's master is SIGKILLed after
    KILL_AFTER_ANSWERS answers."""
    answers: list[Answer] = []
    lock = threading.Lock()
    killed = threading.Event()
    todo = iter(range(MESSAGES))

    def app() -> None:
        with grpc.insecure_channel(sidecar.endpoint) as channel:
            stub = sidecar_pb2_grpc.SidecarServiceStub(channel)
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                after_kill = killed.is_set()
                r = send(stub, message(TOPIC, f"order {i}".encode()))
                kind = outcome(r)
                with lock:
                    answers.append(
                        Answer(
                            r.message_id, kind, r.stored.broker_name, r.stored.durable, after_kill
                        )
                    )
                    if len(answers) == KILL_AFTER_ANSWERS:
                        cluster.broker("broker-a").process.kill()
                        killed.set()

    with ThreadPoolExecutor(SENDERS) as pool:
        for f in [pool.submit(app) for _ in range(SENDERS)]:
            f.result()
    return answers


def routed_at(endpoint: str, broker_name: str, port: int) -> bool:
    """Whether every queue of ``broker_name`` in the route is at ``port``."""
    ports = {
        q.broker.endpoints.addresses[0].port
        for q in query_route(endpoint, TOPIC)
        if q.broker.name == broker_name
    }
    return ports == {port}


def consume_everything(endpoint: str, expected: set[str]) -> set[str]:
    """The ids received through ``endpoint`` until every id in ``expected`` came (or the
    deadline)."""
    got: set[str] = set()
    with simple_consumer(endpoint, "FailoverReaders", TOPIC) as c:
        end = time.monotonic() + DEADLINE_S
        while not expected <= got and time.monotonic() < end:
            for m in c.receive(32, 2):
                got.add(m.message_id)
                c.ack(m)
    return got


def reconcile(cluster: Cluster, ledger: Path, outbox_url: str, out: Path) -> dict[str, object]:
    commitlogs = [
        arg for b in cluster.brokers for arg in ("--commitlog", str(b.data_dir / "commitlog"))
    ]
    done = subprocess.run(
        [sys.executable, "-m", "rocketbox", "reconcile", *commitlogs, "--acks", str(ledger),
         "--outbox", outbox_url, "--out", str(out), "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=RECONCILE_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"reconcile exited {done.returncode}:\n{done.stderr[-3000:]}"
    summary: dict[str, object] = json.loads(done.stdout)
    return summary


def test_a_master_killed_under_load_loses_nothing_and_its_messages_are_read_from_its_slave(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "acks.jsonl"
    outbox_url = f"rocksdb://{tmp_path / 'outbox'}"
    with running_cluster(
        tmp_path, groups=2, slaves=1, master_args=MASTER_ARGS, slave_args=CONSUMER_ARGS
    ) as cluster:
        wait_until(lambda: slaves_connected(cluster), DEADLINE_S, "every master's slave")
        a0, b0 = cluster.broker("broker-a"), cluster.broker("broker-b")
        sidecar = SidecarProcess(
            a0.endpoint, outbox_url, "--broker", b0.endpoint, "--ack-ledger", str(ledger)
        )
        try:
            answers = send_under_a_kill(sidecar, cluster)
            assert len(answers) == MESSAGES
            kinds = {a.outcome for a in answers}
            assert kinds <= {"stored", "spooled"}, kinds
            stored_a = [a for a in answers if a.outcome == "stored" and a.broker_name == "broker-a"]
            assert stored_a, "broker-a stored nothing before its master was killed"
            # After the kill the sidecar sends elsewhere: nothing started later is stored on a.
            assert not [a for a in answers if a.after_kill and a in stored_a]
            assert [a for a in answers if a.after_kill and a.outcome == "stored"]
            acknowledged = {a.message_id for a in answers}
            durable = {a.message_id for a in answers if a.outcome == "spooled" or a.durable}
            # The dead master leaves the routes: broker-a's queues are read at its slave.
            a1 = cluster.broker("broker-a", 1)
            wait_until(
                lambda: routed_at(b0.endpoint, "broker-a", a1.process.port),
                DEADLINE_S,
                "broker-a routed at its slave",
            )
            got = consume_everything(b0.endpoint, durable)
            missing = durable - got
            assert not missing, f"{len(missing)} acknowledged messages never consumed"
            from_a = {a.message_id for a in stored_a} & got
            assert from_a, "nothing of broker-a's was consumed from its slave"
        finally:
            sidecar.stop()
        summary = reconcile(cluster, ledger, outbox_url, tmp_path / "reconciliation")
    totals = summary["totals"]
    assert isinstance(totals, dict)
    assert totals["lost"] == 0, totals
    assert len(acknowledged) == MESSAGES
