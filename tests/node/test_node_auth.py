"""Authentication, the ACL and namespaces through the unmodified official Node client (its
upper-case hex signatures, and a namespace sent in the metadata alone), against a real
``rocketbox broker --auth`` whose users are made with ``rocketbox acl``.

Proves: allowed sends and receives work; a wrong secret is refused UNAUTHORIZED and a user
without PUB on the topic FORBIDDEN, and nothing of either is stored; two namespaces' ``Orders``
are isolated, each consumer seeing its own messages under the name it used.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from rocketmq.grpc_protocol import Code

from tests.broker.auth.auth_broker import Users, auth_broker
from tests.broker.broker_process import BrokerProcess
from tests.node.node_script import run_node_script
from tests.node.test_node_client import node_executable

pytestmark = pytest.mark.slow

SCRIPT_DEADLINE_S = 90.0
USERS: Users = {
    "app": ("app-secret-key", [("Topic:Orders", "PUB")]),
    "reader": ("reader-secret-key", [("Topic:Orders", "SUB"), ("Group:readers", "SUB")]),
    "nosub": ("nosub-secret-key", [("Topic:Orders", "SUB")]),
    "tenant": (
        "tenant-secret-key",
        [("Topic:shop%*", "ALL"), ("Topic:bank%*", "ALL"), ("Group:*", "SUB")],
    ),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with auth_broker(
        tmp_path_factory.mktemp("node-auth-broker"),
        USERS,
        "--invisible-duration-min-ms", "1000",
        "--topic", "Orders:2",
        "--topic", "shop%Orders:2",
        "--topic", "bank%Orders:2",
    ) as b:  # fmt: skip
        yield b


def node(
    broker: BrokerProcess, mode: str, count: int, user: str, *, secret: str | None = None,
    namespace: str = "", group: str = "readers",
) -> list[dict[str, Any]]:  # fmt: skip
    """auth_client.mjs's JSON lines."""
    command = [
        node_executable(), "auth_client.mjs", broker.endpoint, mode, "Orders", str(count),
        f"--ak={user}", f"--sk={secret or USERS[user][0]}", f"--namespace={namespace}",
        f"--group={group}",
    ]  # fmt: skip
    stdout, _ = run_node_script(command, SCRIPT_DEADLINE_S)
    return [json.loads(line) for line in stdout.splitlines()]


def test_allowed_calls_work_and_refused_sends_store_nothing(broker: BrokerProcess) -> None:
    sent = {line["messageId"] for line in node(broker, "send", 3, "app")}
    assert len(sent) == 3
    [unauthorized] = node(broker, "send", 1, "app", secret="not-the-secret")
    assert unauthorized["error"]["code"] == Code.UNAUTHORIZED, unauthorized
    assert "not-the-secret" not in json.dumps(unauthorized)
    [forbidden] = node(broker, "send", 1, "nosub")
    assert forbidden["error"]["code"] == Code.FORBIDDEN, forbidden
    assert "no PUB right on Topic:Orders" in forbidden["error"]["message"]
    *got, extra = node(broker, "receive", 3, "reader")
    assert {line["messageId"] for line in got} == sent
    assert extra == {"extra": 0}  # neither refused send was stored


def test_two_namespaces_with_the_same_topic_are_isolated(broker: BrokerProcess) -> None:
    sent = {ns: {line["messageId"] for line in node(broker, "send", n, "tenant", namespace=ns)}
            for ns, n in (("shop", 2), ("bank", 3))}  # fmt: skip
    for ns in ("shop", "bank"):
        *got, extra = node(broker, "receive", len(sent[ns]), "tenant", namespace=ns)
        assert {line["messageId"] for line in got} == sent[ns]
        assert {line["topic"] for line in got} == {"Orders"}
        assert extra == {"extra": 0}
