"""The Redis outbox's URLs (outbox/backends/redis/urls.py), read without a server:

- ``redis://`` keeps its prefix as it is (an outbox written before Sentinel and Cluster support
  is read as it was) and leaves redis-py's options to redis-py;
- ``redis+cluster://`` hash-tags the prefix so that every key of the outbox is in one slot, and
  keeps a prefix that has a tag of its own; a prefix that cannot be tagged is refused;
- ``redis+sentinel://`` names its Sentinels, the service and the database;
- bad input is refused with the field and the limit named, and no password is shown.
"""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from outbox import OutboxConfigError
from outbox.backends.redis.keys import entry_key, fixed_keys, group_key
from outbox.backends.redis.urls import (
    SEED_HOSTS_MAX,
    WAIT_REPLICAS_MAX,
    WAIT_TIMEOUT_MS_DEFAULT,
    WAIT_TIMEOUT_MS_MAX,
    Topology,
    hash_tag,
    key_base,
    parse_url,
)


def test_one_server_keeps_its_prefix_and_passes_the_rest_to_redis_py() -> None:
    url = parse_url("redis://:pw@127.0.0.1:6379/2?prefix=app:outbox&socket_timeout=3")
    assert url.topology is Topology.STANDALONE
    assert url.key_base == url.prefix == "app:outbox"
    assert url.standalone_url == "redis://:pw@127.0.0.1:6379/2?socket_timeout=3"
    assert (url.wait_replicas, url.wait_timeout_ms) == (0, WAIT_TIMEOUT_MS_DEFAULT)
    assert "pw" not in url.where


@pytest.mark.parametrize(
    ("prefix", "base"),
    [
        ("rocketbox:outbox", "{rocketbox:outbox}"),
        ("{orders}:outbox", "{orders}:outbox"),
        ("a{b", "{a{b}"),
        ("a}b", "{a}b}"),
        ("{}x", "{{}x}"),
    ],
)
def test_a_cluster_outbox_has_every_key_in_one_slot(prefix: str, base: str) -> None:
    assert key_base(prefix, Topology.CLUSTER) == base
    keys = [*fixed_keys(base), entry_key(base, "7F0000010000"), group_key(base, "5:Topic:g}{")]
    assert len({key_slot(k.encode()) for k in keys}) == 1
    assert key_base(prefix, Topology.STANDALONE) == key_base(prefix, Topology.SENTINEL) == prefix


def test_hash_tag_follows_redis_cluster() -> None:
    assert hash_tag("{a}:e:1") == "a"
    assert hash_tag("x{}{a}") is None  # an empty first tag: the whole key is hashed
    assert hash_tag("x{a") is None


def test_a_prefix_that_cannot_be_tagged_is_refused() -> None:
    with pytest.raises(OutboxConfigError, match="cannot be hash-tagged"):
        parse_url("redis+cluster://127.0.0.1:7000/?prefix=}x")


def test_a_cluster_url_lists_its_seeds() -> None:
    url = parse_url(
        "redis+cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002/"
        "?prefix=orders&wait_replicas=1&wait_timeout_ms=250&socket_timeout=4"
    )
    assert url.topology is Topology.CLUSTER
    assert url.hosts == (("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002))
    assert (url.username, url.password) == ("u", "p@ss")
    assert (url.wait_replicas, url.wait_timeout_ms, url.socket_timeout_s) == (1, 250, 4.0)
    assert url.key_base == "{orders}"
    assert "p%40ss" not in url.where


def test_a_sentinel_url_names_its_sentinels_service_and_database() -> None:
    url = parse_url(
        "redis+sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/mymaster/3"
        "?prefix=orders&sentinel_password=spw"
    )
    assert url.topology is Topology.SENTINEL
    assert url.hosts == (("127.0.0.1", 26379), ("127.0.0.1", 26380))
    assert (url.service_name, url.db, url.password, url.sentinel_password) == (
        "mymaster", 3, "pw", "spw",
    )  # fmt: skip
    assert url.key_base == "orders"


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("redis://h:1/0?wait_replicas=-1",
         f"wait_replicas must be a whole number from 0 to {WAIT_REPLICAS_MAX}"),
        (f"redis://h:1/0?wait_replicas={WAIT_REPLICAS_MAX + 1}", "wait_replicas"),
        ("redis://h:1/0?wait_replicas=1&wait_timeout_ms=0",
         "wait_timeout_ms must be a whole number from 1"),
        (f"redis://h:1/0?wait_timeout_ms={WAIT_TIMEOUT_MS_MAX + 1}", f"to {WAIT_TIMEOUT_MS_MAX}"),
        ("redis://h:1/0?wait_replicas=1&wait_timeout_ms=900&socket_timeout=0.5",
         "below socket_timeout"),
        ("redis+sentinel://h:1/", "the path is /SERVICE"),
        ("redis+sentinel://h:1/s/0/x", "the path is /SERVICE"),
        ("redis+sentinel://h:1/s/zero", "database 'zero' is not a number"),
        ("redis+cluster://h:1/1", "database 0 only"),
        ("redis+cluster://h:1,h/", "host 'h' is not host:port"),
        ("redis+cluster://h:70000/", "port 1-65535"),
        ("redis+cluster://h:1/?retry=3", "unknown option 'retry' for cluster"),
        ("redis+cluster://h:1/?sentinel_password=x", "unknown option 'sentinel_password'"),
        ("redis+cluster://h:1/?socket_timeout=soon", "socket_timeout must be seconds"),
        ("redis+cluster://" + ",".join(["h:1"] * (SEED_HOSTS_MAX + 1)) + "/", "SEED_HOSTS_MAX"),
        ("redis+cluster://h:1/?prefix=", "prefix must not be empty"),
    ],
)  # fmt: skip
def test_bad_urls_are_refused_naming_the_field(url: str, names: str) -> None:
    with pytest.raises(OutboxConfigError, match=r"^outbox URL") as refused:
        parse_url(url)
    assert names in str(refused.value)
    assert not refused.value.retriable


def test_a_refusal_hides_the_password() -> None:
    with pytest.raises(OutboxConfigError) as refused:
        parse_url("redis+sentinel://:s3cret@h:1/?prefix=x")
    assert "s3cret" not in str(refused.value)
