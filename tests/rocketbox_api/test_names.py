"""The one topic and group name rule (rocketbox_api/names.py), which the sidecar, the broker's
edges and its store share.

Proves: a name is 1..127 (topic) or 1..120 (group) characters of %a-zA-Z0-9_-; a trailing newline
is not hidden by the check (a regex anchored with '$' let "Orders\\n" through); '|' is refused to
clients but the store's pattern accepts it (RocketMQ's TopicValidator charset), and nothing else
differs between the two.
"""

from __future__ import annotations

import pytest

from rocketbox_api.names import (
    GROUP_LENGTH_MAX,
    NAME_PATTERN,
    STORED_TOPIC_PATTERN,
    TOPIC_LENGTH_MAX,
    is_group_name,
    is_topic_name,
)


@pytest.mark.parametrize("name", ["Orders", "%RETRY%group_1", "A-b_9", "x", "t" * TOPIC_LENGTH_MAX])
def test_a_topic_name_of_the_charset_within_the_limit_is_one(name: str) -> None:
    assert is_topic_name(name)


@pytest.mark.parametrize(
    "name", ["", "t" * (TOPIC_LENGTH_MAX + 1), "bad name", "a.b", "ns|Topic", "Orders\n", "é"]
)
def test_anything_else_is_not_a_topic_name(name: str) -> None:
    assert not is_topic_name(name)


def test_a_group_name_has_the_same_charset_and_its_own_limit() -> None:
    assert is_group_name("g" * GROUP_LENGTH_MAX)
    assert not is_group_name("g" * (GROUP_LENGTH_MAX + 1))
    assert not is_group_name("")
    assert not is_group_name("a|b")
    assert not is_group_name("group\n")


def test_the_store_accepts_a_bar_and_nothing_else_beyond_the_clients_rule() -> None:
    assert STORED_TOPIC_PATTERN.fullmatch("ns|Topic")
    for c in map(chr, range(0x250)):
        if c != "|":
            assert bool(STORED_TOPIC_PATTERN.fullmatch(c)) == bool(NAME_PATTERN.fullmatch(c)), c
