"""Authentication, the ACL and namespaces through the unmodified official Python client, against
a real ``rocketbox broker --auth`` whose users are made with ``rocketbox acl``.

Proves: a user's allowed sends and receives work; a wrong secret is refused UNAUTHORIZED and a
user without PUB on the topic FORBIDDEN, and nothing of either is stored; a consumer without SUB
on its group is refused FORBIDDEN; two namespaces' ``Orders`` are two topics (sends and
consumption isolated), and a namespace is part of the ACL's resource; the acl commands are for
admins alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from click.testing import CliRunner, Result
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import Code

from rocketbox.cli import main
from tests.broker.broker_process import BrokerProcess
from tests.broker.grpc_service.test_consumer import receive_all
from tests.broker.grpc_service.test_producer import DEADLINE_S, Checker, message
from tests.prometheus import sample, scrape

ADMIN = ("root", "root-secret-key")
# user → (secret, [(resource, actions)]) made with `rocketbox acl`.
USERS = {
    "app": ("app-secret-key", [("Topic:Orders", "PUB")]),
    "reader": ("reader-secret-key", [("Topic:Orders", "SUB"), ("Group:readers", "SUB")]),
    "nosub": ("nosub-secret-key", [("Topic:Orders", "SUB")]),
    "shop": ("shop-secret-key", [("Topic:shop%*", "ALL"), ("Group:shop%*", "SUB")]),
    "bank": ("bank-secret-key", [("Topic:bank%*", "ALL"), ("Group:bank%*", "SUB")]),
}


def acl(*args: str, admin: tuple[str, str] = ADMIN, stdin: str | None = None) -> Result:
    env = {"ROCKETBOX_ACCESS_KEY": admin[0], "ROCKETBOX_SECRET_KEY": admin[1]}
    return CliRunner().invoke(main, ["acl", *args], env=env, input=stdin)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("auth-broker")
    admin_file = data_dir.parent / f"{data_dir.name}-admin.credentials"
    admin_file.write_text(f"access_key={ADMIN[0]}\nsecret_key={ADMIN[1]}\n")
    b = BrokerProcess(
        data_dir,
        "--auth",
        "--auth-admin-file", str(admin_file),
        "--invisible-duration-min-ms", "1000",
        "--long-polling-timeout-ms", "2000",
        "--transaction-timeout-ms", "500",
        "--transaction-check-interval-ms", "300",
        "--topic", "Orders:2",
        "--topic", "shop%Orders:2",
        "--topic", "bank%Orders:2",
        metrics=True,
    )  # fmt: skip
    try:
        for user, (secret, rules) in USERS.items():
            made = acl("user", "create", user, "--secret-file", "-", "--broker", b.endpoint,
                       stdin=secret)  # fmt: skip
            assert made.exit_code == 0, made.output
            for resource, actions in rules:
                granted = acl("grant", user, resource, "--action", actions, "--broker", b.endpoint)
                assert granted.exit_code == 0, granted.output
        yield b
    finally:
        b.stop()


def config(endpoint: str, user: str, secret: str | None = None, namespace: str = "") -> Any:
    return ClientConfiguration(endpoint, Credentials(user, secret or USERS[user][0]), namespace)


@contextmanager
def producer_as(
    cfg: ClientConfiguration,
    topics: tuple[str, ...] = (),
    checker: TransactionChecker | None = None,
) -> Iterator[Producer]:
    p = Producer(cfg, topics, checker)
    p.startup()
    try:
        yield p
    finally:
        p.shutdown()


@contextmanager
def consumer_as(cfg: ClientConfiguration, group: str, topic: str) -> Iterator[SimpleConsumer]:
    c = SimpleConsumer(cfg, group, {topic: FilterExpression("*")}, await_duration=2)
    c.startup()
    try:
        yield c
    finally:
        c.shutdown()


def refusal_code(error: BaseException) -> object:
    return getattr(error, "code", None)


def test_allowed_sends_work_refused_ones_store_nothing_and_reads_need_sub(
    broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    with producer_as(config(broker.endpoint, "app"), ("Orders",)) as p:
        sent = {p.send(message("Orders", f"ok {i}".encode())).message_id for i in range(3)}
    # A wrong secret: its first call, QueryRoute, is refused UNAUTHORIZED. The Python client
    # logs the route's status and raises "failed to fetch topic route".
    with (
        pytest.raises(Exception, match="route"),
        producer_as(config(broker.endpoint, "app", "not-the-secret")) as p,
    ):
        p.send(message("Orders", b"wrong secret"))
    assert f"{Code.UNAUTHORIZED}, the signature of access key 'app' does not match" in caplog.text
    assert "not-the-secret" not in caplog.text + broker.output()
    # A known user with SUB alone: its route is answered, its send refused FORBIDDEN.
    with (
        producer_as(config(broker.endpoint, "nosub"), ("Orders",)) as p,
        pytest.raises(Exception) as forbidden,  # noqa: PT011 - the client's own class
    ):
        p.send(message("Orders", b"no pub right"))
    assert refusal_code(forbidden.value) == Code.FORBIDDEN, forbidden.value
    assert "no PUB right on Topic:Orders" in str(forbidden.value)

    with consumer_as(config(broker.endpoint, "reader"), "readers", "Orders") as c:
        got = receive_all(c, len(sent))
        assert {m.message_id for m in got} == sent
        assert c.receive(32, 2) == []  # neither refused send was stored
    with (
        pytest.raises(Exception) as no_group,  # noqa: PT011 - the client's own class
        consumer_as(config(broker.endpoint, "nosub"), "readers", "Orders") as c,
    ):
        c.receive(32, 2)
    assert refusal_code(no_group.value) == Code.FORBIDDEN, no_group.value


def test_two_namespaces_with_the_same_topic_are_isolated(
    broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    sent: dict[str, set[str]] = {}
    for ns in ("shop", "bank"):
        with producer_as(config(broker.endpoint, ns, namespace=ns), ("Orders",)) as p:
            sent[ns] = {
                p.send(message("Orders", f"{ns} {i}".encode())).message_id
                for i in range(2 + len(ns))
            }
    for ns in ("shop", "bank"):
        with consumer_as(config(broker.endpoint, ns, namespace=ns), "readers", "Orders") as c:
            got: list[Message] = receive_all(c, len(sent[ns]))
            assert {m.message_id for m in got} == sent[ns]
            assert {m.topic for m in got} == {"Orders"}  # the client's name, not the stored one
            assert c.receive(32, 2) == []
    # shop's user in bank's namespace: the namespace is part of the resource, so even the
    # route is refused (the client logs its status and raises "failed to fetch topic route").
    with (
        pytest.raises(Exception, match="route"),
        producer_as(config(broker.endpoint, "shop", namespace="bank")) as p,
    ):
        p.send(message("Orders", b"trespass"))
    assert (
        f"{Code.FORBIDDEN}, user 'shop' has no PUB or SUB right on Topic:bank%Orders" in caplog.text
    )


def test_a_namespaced_orphan_transaction_is_checked_back_under_its_own_name(
    broker: BrokerProcess,
) -> None:
    checker = Checker(TransactionResolution.COMMIT)
    shop = config(broker.endpoint, "shop", namespace="shop")
    with producer_as(shop, ("Orders",), checker) as p:
        orphan = p.begin_transaction()
        orphan_id = p.send(message("Orders", b"decided later"), orphan).message_id
        # Neither commit nor rollback: the broker asks this producer, over its Telemetry.
        assert checker.asked_event.wait(DEADLINE_S), "the broker never checked back"
    assert checker.asked == [orphan_id]
    with consumer_as(shop, "readers", "Orders") as c:
        [got] = receive_all(c, 1)
        assert (got.message_id, got.topic, got.body) == (orphan_id, "Orders", b"decided later")


def test_the_acl_commands_are_for_admins_and_never_show_a_secret(broker: BrokerProcess) -> None:
    users = acl("user", "list", "--broker", broker.endpoint)
    assert users.exit_code == 0, users.output
    assert "root  (admin)" in users.output
    assert "reader  2 rules" in users.output
    assert not any(secret in users.output for secret, _ in USERS.values())
    rules = acl("list", "reader", "--broker", broker.endpoint, "--json")
    assert rules.exit_code == 0, rules.output
    assert '"Group:readers"' in rules.output
    refused = acl("user", "list", "--broker", broker.endpoint, admin=("app", USERS["app"][0]))
    assert refused.exit_code != 0
    assert "PERMISSION_DENIED" in refused.output
    assert "not an admin" in refused.output
    nobody = acl("user", "list", "--broker", broker.endpoint, admin=("app", "wrong-secret"))
    assert "UNAUTHENTICATED" in nobody.output
    assert "wrong-secret" not in nobody.output
    samples = scrape(broker.metrics_port)
    refusals = "rocketbox_broker_access_refusals_total"
    assert sample(samples, refusals, method="ListUsers", code="PERMISSION_DENIED") >= 1
    assert sample(samples, refusals, method="ListUsers", code="UNAUTHENTICATED") >= 1


def test_rocketbox_consume_signs_as_its_user(broker: BrokerProcess) -> None:
    with producer_as(config(broker.endpoint, "app"), ("Orders",)) as p:
        sent = p.send(message("Orders", b"for the command line")).message_id
    env = {"ROCKETBOX_ACCESS_KEY": "reader", "ROCKETBOX_SECRET_KEY": USERS["reader"][0]}
    args = ["consume", "Orders", "--group", "readers", "--count", "1", "--json"]
    result = CliRunner().invoke(main, [*args, "--broker", broker.endpoint], env=env)
    assert result.exit_code == 0, result.output
    assert "not an admin: the group is not placed" in result.stderr
    assert sent in result.stdout
