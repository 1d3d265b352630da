"""Who may look messages up in a real ``rocketbox broker --auth`` (the admin service's
QueryMessage and GetMessage, broker/grpc_service/access.py), through ``rocketbox message``.

Proves: QueryMessage (by key) is answered for a user with SUB on the topic, by an exact rule or a
namespace's prefix, as RocketMQ 5 asks SUB (or GET) on the topic for QUERY_MESSAGE; a user with
PUB alone, or rights on another topic only, is refused PERMISSION_DENIED naming the user, the
topic and the action it needs (not "for admins"), and the refusal is counted; an admin may query
any topic. GetMessage (by id, which the sidecar asks before a resend) gives the copies of topics
the user may PUB or SUB, and NOT_FOUND to a user with no right on the message's topic.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from rocketbox.cli import main
from tests.broker.auth.auth_broker import ADMIN, Users, auth_broker
from tests.broker.broker_process import BrokerProcess, wait_until
from tests.broker.grpc_service.test_producer import DEADLINE_S, message, producer
from tests.prometheus import sample, scrape

pytestmark = pytest.mark.slow

USERS: Users = {
    "app": ("app-secret-key", [("Topic:Orders", "PUB"), ("Topic:shop%Orders", "PUB")]),
    "reader": ("reader-secret-key", [("Topic:Orders", "SUB")]),
    "shop-reader": ("shop-reader-secret", [("Topic:shop%*", "SUB")]),
    "other": ("other-secret-key", [("Topic:Other", "ALL")]),
}
KEY = "order-1"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with auth_broker(
        tmp_path_factory.mktemp("query-rights"),
        USERS,
        "--topic", "Orders:2",
        "--topic", "shop%Orders:2",
        "--topic", "Other:2",
        metrics=True,
    ) as b:  # fmt: skip
        yield b


@pytest.fixture(scope="module")
def sent(broker: BrokerProcess) -> dict[str, str]:
    """The id of one message with KEY in Orders and one in shop%Orders, once both are indexed."""
    ids = {}
    for topic in ("Orders", "shop%Orders"):
        with producer(broker.endpoint, (topic,), credentials=as_user("app")) as p:
            ids[topic] = p.send(message(topic, b"looked up", key=KEY)).message_id
    for topic, message_id in ids.items():

        def indexed(topic: str = topic, message_id: str = message_id) -> bool:
            return message_id in query(broker, ADMIN, topic).output

        wait_until(indexed, DEADLINE_S, f"{message_id} in {topic}'s key index")
    return ids


def as_user(name: str) -> tuple[str, str]:
    return name, USERS[name][0]


def query(broker: BrokerProcess, user: tuple[str, str], topic: str) -> Result:
    return rocketbox(broker, user, "message", "query", "--topic", topic, "--key", KEY)


def get(broker: BrokerProcess, user: tuple[str, str], message_id: str) -> Result:
    return rocketbox(broker, user, "message", "get", message_id)


def rocketbox(broker: BrokerProcess, user: tuple[str, str], *args: str) -> Result:
    env = {"ROCKETBOX_ACCESS_KEY": user[0], "ROCKETBOX_SECRET_KEY": user[1]}
    return CliRunner().invoke(main, [*args, "--broker", broker.endpoint], env=env)


@pytest.mark.parametrize(
    ("user", "topic"),
    [("reader", "Orders"), ("shop-reader", "shop%Orders")],
    ids=["exact-rule", "namespace-prefix"],
)
def test_a_user_with_sub_on_the_topic_may_query_it(
    broker: BrokerProcess, sent: dict[str, str], user: str, topic: str
) -> None:
    found = query(broker, as_user(user), topic)
    assert found.exit_code == 0, found.output
    assert sent[topic] in found.output


@pytest.mark.parametrize(
    ("user", "topic"),
    [("app", "Orders"), ("other", "Orders"), ("reader", "shop%Orders")],
    ids=["pub-only", "another-topic-only", "another-namespace"],
)
def test_a_user_without_sub_on_the_topic_is_refused_naming_topic_and_action(
    broker: BrokerProcess, sent: dict[str, str], user: str, topic: str
) -> None:
    refusals = "rocketbox_broker_access_refusals_total"
    counted = sample(scrape(broker.metrics_port), refusals, method="QueryMessage",
                     code="PERMISSION_DENIED")  # fmt: skip
    refused = query(broker, as_user(user), topic)
    assert refused.exit_code != 0, refused.output
    assert (
        f"PERMISSION_DENIED: user {user!r} has no SUB right on Topic:{topic}: QueryMessage"
        in refused.output
    ), refused.output
    assert "for admins" not in refused.output
    assert sent[topic] not in refused.output
    after = sample(scrape(broker.metrics_port), refusals, method="QueryMessage",
                   code="PERMISSION_DENIED")  # fmt: skip
    assert after == counted + 1


def test_an_admin_may_query_any_topic(broker: BrokerProcess, sent: dict[str, str]) -> None:
    for topic, message_id in sent.items():
        found = query(broker, ADMIN, topic)
        assert found.exit_code == 0, found.output
        assert message_id in found.output


@pytest.mark.parametrize(
    ("user", "visible"),
    [("app", True), ("reader", True), ("other", False)],
    ids=["pub", "sub", "no-right"],
)
def test_a_lookup_by_id_shows_copies_of_topics_the_user_may_pub_or_sub(
    broker: BrokerProcess, sent: dict[str, str], user: str, visible: bool
) -> None:
    looked_up = get(broker, as_user(user), sent["Orders"])
    if visible:
        assert looked_up.exit_code == 0, looked_up.output
        assert sent["Orders"] in looked_up.output
    else:
        assert looked_up.exit_code != 0, looked_up.output
        assert "NOT_FOUND" in looked_up.output, looked_up.output
