"""The Redis outbox's put script (scripts.py PUT): the keys and arguments of a group commit's
batch, and each request's answer read from the script's result."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from outbox.backends.redis.fields import entry_from_hash, group_name, pairs, put_fields
from outbox.backends.redis.keys import entry_key, group_key
from outbox.contract_checks import with_seq
from outbox.entry import OutboxEntry, OutboxLimits
from outbox.group_commit import Result


def put_call(
    base: str | None, limits: OutboxLimits, requests: Sequence[Sequence[OutboxEntry]]
) -> tuple[list[str], list[Any]]:
    """(KEYS, ARGV after the key base) of one PUT call for ``requests``: every entry's key and
    every group's (none when ``base`` is None: a loose call, runner.py). One JSON argument for
    every request's fields, and one per body: redis-py's cost is per argument, and this runs on
    the thread every concurrent put waits for."""
    keys: list[str] = []
    if base is not None:
        for entries in requests:
            for e in entries:
                keys.append(entry_key(base, e.message_id))
                if e.fifo_group is not None:
                    keys.append(group_key(base, group_name(*e.fifo_group)))
    fields = [[put_fields(e) for e in entries] for entries in requests]
    args: list[Any] = [
        limits.outbox_entries_max,
        limits.outbox_bytes_max,
        json.dumps(fields, separators=(",", ":")),
        *(e.message.body for entries in requests for e in entries),
    ]
    return keys, args


def put_results(
    limits: OutboxLimits, requests: Sequence[Sequence[OutboxEntry]], reply: Sequence[Any]
) -> list[Result]:
    """Each request's answer: its stored entries (new ones with their seq, those stored before
    as they are), or OutboxFullError."""
    summary, *stored = reply
    results: list[Result] = []
    for entries, answer in zip(requests, summary.split(b";"), strict=True):
        if answer[:1] == b"F":
            held, held_bytes = answer[1:].decode().split(",")
            results.append(limits.full_error(int(held), int(held_bytes)))
            continue
        assert answer[:1] == b"S", answer
        results.append(
            [
                entry_from_hash(pairs(stored[int(item[1:]) - 1]))
                if item[:1] == b"="
                else with_seq(entry, int(item))
                for entry, item in zip(entries, answer.split(b",")[1:], strict=True)
            ]
        )
    return results
