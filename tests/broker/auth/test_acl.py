"""The ACL's decisions (broker/auth/acl.py): the most specific matching rule decides, DENY wins a
tie, no matching rule denies, an admin may do everything; resource patterns and actions that
break the rules are refused naming what is wrong."""

from __future__ import annotations

import pytest

from broker.auth.acl import (
    Acl,
    Action,
    Decision,
    ResourcePattern,
    ResourceType,
    User,
    parse_actions,
    validate_user,
)
from broker.auth.errors import AclInputError

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
PUB, SUB = Action.PUB, Action.SUB
APP = User("app", b"app-secret")


def acl_with(*rules: tuple[str, str, Decision]) -> Acl:
    acl = Acl({"app": APP})
    for resource, actions, decision in rules:
        acl.grant("app", ResourcePattern.parse(resource), parse_actions(actions.split()), decision)
    return acl


def test_no_rule_denies_and_an_exact_rule_allows_only_its_action_and_name() -> None:
    acl = acl_with(("Topic:Orders", "PUB", Decision.ALLOW))
    assert acl.allows(APP, TOPIC, "Orders", PUB)
    assert not acl.allows(APP, TOPIC, "Orders", SUB)
    assert not acl.allows(APP, TOPIC, "Orders2", PUB)
    assert not acl.allows(APP, GROUP, "Orders", PUB)


def test_the_most_specific_rule_decides_whatever_their_order() -> None:
    acl = acl_with(
        ("*", "ALL", Decision.ALLOW),
        ("Topic:Pay*", "PUB", Decision.DENY),
        ("Topic:PayOut", "PUB", Decision.ALLOW),
        ("Topic:PayIn*", "PUB", Decision.ALLOW),
    )
    assert acl.allows(APP, TOPIC, "Orders", PUB)  # only '*' matches
    assert not acl.allows(APP, TOPIC, "Payments", PUB)  # the prefix beats '*'
    assert acl.allows(APP, TOPIC, "PayOut", PUB)  # the exact name beats the prefix
    assert acl.allows(APP, TOPIC, "PayIncoming", PUB)  # the longer prefix beats the shorter
    assert acl.allows(APP, TOPIC, "Payments", SUB)  # the DENY is for PUB alone


def test_deny_wins_a_tie_and_admins_may_do_everything() -> None:
    acl = acl_with(("Group:G", "SUB", Decision.ALLOW), ("Group:G", "SUB", Decision.DENY))
    # The second grant replaced the first's action on the same pattern: one DENY rule left.
    assert [r.decision for r in acl.rules["app"]] == [Decision.DENY]
    acl.rules["app"].append(acl.rules["app"][0].__class__(
        ResourcePattern.parse("Group:G"), frozenset({SUB}), Decision.ALLOW))  # fmt: skip
    assert not acl.allows(APP, GROUP, "G", SUB)
    assert acl.allows(User("root", b"root-secret", admin=True), GROUP, "G", SUB)


def test_a_namespace_is_part_of_the_resource() -> None:
    acl = acl_with(("Topic:shop%*", "ALL", Decision.ALLOW))
    assert acl.allows(APP, TOPIC, "shop%Orders", PUB)
    assert not acl.allows(APP, TOPIC, "bank%Orders", PUB)
    assert not acl.allows(APP, TOPIC, "Orders", PUB)


def test_revoke_removes_only_the_actions_named() -> None:
    acl = acl_with(("Topic:Orders", "ALL", Decision.ALLOW))
    assert acl.revoke("app", ResourcePattern.parse("Topic:Orders"), frozenset({SUB})) == 1
    assert acl.allows(APP, TOPIC, "Orders", PUB)
    assert not acl.allows(APP, TOPIC, "Orders", SUB)
    assert acl.delete_user("app")
    assert "app" not in acl.rules


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Queue:Orders", "Topic:NAME"),
        ("Topic:", "empty"),
        ("Topic:a b", "a-zA-Z0-9_-%"),
        ("Topic:" + "x" * 128, "at most 127"),
    ],
)
def test_a_bad_resource_is_refused_naming_the_form(text: str, why: str) -> None:
    with pytest.raises(AclInputError, match=why):
        ResourcePattern.parse(text)


def test_bad_actions_users_and_secrets_are_refused_without_quoting_the_secret() -> None:
    with pytest.raises(AclInputError, match="PUB, SUB, ALL"):
        parse_actions(["WRITE"])
    with pytest.raises(AclInputError, match="access key"):
        validate_user("bad key", "long-enough")
    with pytest.raises(AclInputError, match=r"8\.\.256 characters \(it has 5\)") as refused:
        validate_user("app", "short")
    assert "short" not in str(refused.value)
    with pytest.raises(AclInputError, match="does not exist"):
        Acl().grant("ghost", ResourcePattern.parse("*"), frozenset({PUB}), Decision.ALLOW)
