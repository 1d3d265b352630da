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

import pytest
from click.testing import CliRunner
from rocketmq import (
    Message,
    TransactionResolution,
)
from rocketmq.grpc_protocol import Code

from rocketbox.cli import main
from tests.broker.auth.auth_broker import Users, acl, auth_broker
from tests.broker.broker_process import BrokerProcess
from tests.broker.grpc_service.test_consumer import receive_all, simple_consumer
from tests.broker.grpc_service.test_producer import DEADLINE_S, Checker, message, producer
from tests.prometheus import sample, scrape

pytestmark = pytest.mark.slow

# user → (secret, [(resource, actions)]) made with `rocketbox acl`.
USERS: Users = {
    "app": ("app-secret-key", [("Topic:Orders", "PUB")]),
    "reader": ("reader-secret-key", [("Topic:Orders", "SUB"), ("Group:readers", "SUB")]),
    "nosub": ("nosub-secret-key", [("Topic:Orders", "SUB")]),
    "shop": ("shop-secret-key", [("Topic:shop%*", "ALL"), ("Group:shop%*", "SUB")]),
    "bank": ("bank-secret-key", [("Topic:bank%*", "ALL"), ("Group:bank%*", "SUB")]),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with auth_broker(
        tmp_path_factory.mktemp("auth-broker"),
        USERS,
        "--invisible-duration-min-ms", "1000",
        "--long-polling-timeout-ms", "2000",
        "--transaction-timeout-ms", "500",
        "--transaction-check-interval-ms", "300",
        "--topic", "Orders:2",
        "--topic", "shop%Orders:2",
        "--topic", "bank%Orders:2",
        metrics=True,
    ) as b:  # fmt: skip
        yield b


def creds(user: str, secret: str | None = None) -> tuple[str, str]:
    return user, secret or USERS[user][0]


def refusal_code(error: BaseException) -> object:
    return getattr(error, "code", None)


def test_allowed_sends_work_refused_ones_store_nothing_and_reads_need_sub(
    broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    with producer(broker.endpoint, ("Orders",), credentials=creds("app")) as p:
        sent = {p.send(message("Orders", f"ok {i}".encode())).message_id for i in range(3)}
    # A wrong secret: its first call, QueryRoute, is refused UNAUTHORIZED. The Python client
    # logs the route's status and raises "failed to fetch topic route".
    with (
        pytest.raises(Exception, match="route"),
        producer(broker.endpoint, (), credentials=creds("app", "not-the-secret")) as p,
    ):
        p.send(message("Orders", b"wrong secret"))
    assert f"{Code.UNAUTHORIZED}, the signature of access key 'app' does not match" in caplog.text
    assert "not-the-secret" not in caplog.text + broker.output()
    # A known user with SUB alone: its route is answered, its send refused FORBIDDEN.
    with (
        producer(broker.endpoint, ("Orders",), credentials=creds("nosub")) as p,
        pytest.raises(Exception) as forbidden,  # noqa: PT011 - the client's own class
    ):
        p.send(message("Orders", b"no pub right"))
    assert refusal_code(forbidden.value) == Code.FORBIDDEN, forbidden.value
    assert "no PUB right on Topic:Orders" in str(forbidden.value)

    with simple_consumer(broker.endpoint, "readers", "Orders", 2, credentials=creds("reader")) as c:
        got = receive_all(c, len(sent))
        assert {m.message_id for m in got} == sent
        assert c.receive(32, 2) == []  # neither refused send was stored
    with (
        pytest.raises(Exception) as no_group,  # noqa: PT011 - the client's own class
        simple_consumer(broker.endpoint, "readers", "Orders", 2, credentials=creds("nosub")) as c,
    ):
        c.receive(32, 2)
    assert refusal_code(no_group.value) == Code.FORBIDDEN, no_group.value


def test_two_namespaces_with_the_same_topic_are_isolated(
    broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    sent: dict[str, set[str]] = {}
    for ns in ("shop", "bank"):
        with producer(broker.endpoint, ("Orders",), namespace=ns, credentials=creds(ns)) as p:
            sent[ns] = {
                p.send(message("Orders", f"{ns} {i}".encode())).message_id
                for i in range(2 + len(ns))
            }
    for ns in ("shop", "bank"):
        with simple_consumer(
            broker.endpoint, "readers", "Orders", 2, namespace=ns, credentials=creds(ns)
        ) as c:
            got: list[Message] = receive_all(c, len(sent[ns]))
            assert {m.message_id for m in got} == sent[ns]
            assert {m.topic for m in got} == {"Orders"}  # the client's name, not the stored one
            assert c.receive(32, 2) == []
    # shop's user in bank's namespace: the namespace is part of the resource, so even the
    # route is refused (the client logs its status and raises "failed to fetch topic route").
    with (
        pytest.raises(Exception, match="route"),
        producer(broker.endpoint, (), namespace="bank", credentials=creds("shop")) as p,
    ):
        p.send(message("Orders", b"trespass"))
    assert (
        f"{Code.FORBIDDEN}, user 'shop' has no PUB or SUB right on Topic:bank%Orders" in caplog.text
    )


def test_a_namespaced_orphan_transaction_is_checked_back_under_its_own_name(
    broker: BrokerProcess,
) -> None:
    checker = Checker(TransactionResolution.COMMIT)
    with producer(
        broker.endpoint, ("Orders",), checker, namespace="shop", credentials=creds("shop")
    ) as p:
        orphan = p.begin_transaction()
        orphan_id = p.send(message("Orders", b"decided later"), orphan).message_id
        # Neither commit nor rollback: the broker asks this producer, over its Telemetry.
        assert checker.asked_event.wait(DEADLINE_S), "the broker never checked back"
    assert checker.asked == [orphan_id]
    with simple_consumer(
        broker.endpoint, "readers", "Orders", 2, namespace="shop", credentials=creds("shop")
    ) as c:
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
    with producer(broker.endpoint, ("Orders",), credentials=creds("app")) as p:
        sent = p.send(message("Orders", b"for the command line")).message_id
    env = {"ROCKETBOX_ACCESS_KEY": "reader", "ROCKETBOX_SECRET_KEY": USERS["reader"][0]}
    args = ["consume", "Orders", "--group", "readers", "--count", "1", "--json"]
    result = CliRunner().invoke(main, [*args, "--broker", broker.endpoint], env=env)
    assert result.exit_code == 0, result.output
    assert "not an admin: the group is not placed" in result.stderr
    assert sent in result.stdout
