"""`rocketbox send`'s parsing of durations and times, and its rendering of answers and of a
load's summary: pure functions, checked on the client library's own result types."""

from __future__ import annotations

import grpc
import pytest

from rocketbox.admin_render import format_time_ms
from rocketbox.consume_cli import body_fields
from rocketbox.send_cli import parse_delay_ms, parse_delivery_time_ms
from rocketbox.send_render import Load, answer_line, summary_text
from rocketbox_client import DeadlineExceededError, InvalidMessageError, Spooled, Stored


@pytest.mark.parametrize(
    ("text", "ms"), [("500ms", 500), ("10s", 10_000), ("5m", 300_000), ("1.5h", 5_400_000)]
)
def test_a_delay_is_a_number_and_a_unit(text: str, ms: int) -> None:
    assert parse_delay_ms(text) == ms


@pytest.mark.parametrize("text", ["10", "ten", "-5s", "5 d", ""])
def test_a_delay_without_a_known_unit_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match="like 500ms, 10s, 5m or 1h"):
        parse_delay_ms(text)


def test_a_delivery_time_needs_its_time_zone() -> None:
    assert parse_delivery_time_ms("1970-01-01T00:00:01Z") == 1000
    assert parse_delivery_time_ms("1970-01-01T01:00:01+01:00") == 1000
    with pytest.raises(ValueError, match="no time zone"):
        parse_delivery_time_ms("2030-01-01T10:00")
    with pytest.raises(ValueError, match="not an ISO-8601 time"):
        parse_delivery_time_ms("tomorrow")


def test_times_are_iso_8601_in_utc() -> None:
    assert format_time_ms(1_764_000_000_123) == "2025-11-24T16:00:00.123Z"


def test_each_answer_is_one_line_saying_what_happened() -> None:
    stored = Stored("ID1", "broker-a", 3, 17, durable=True, attempts=1)
    assert answer_line(stored) == "STORED ID1 on broker-a queue 3 offset 17, durable"
    # What the sidecar answers: the broker picked the queue (and, behind a proxy, the broker).
    unnamed = Stored("ID1", "broker-a", -1, 17, durable=True, attempts=1)
    assert answer_line(unnamed) == "STORED ID1 on broker-a offset 17, durable"
    behind_a_proxy = Stored("ID1", "", -1, 17, durable=True, attempts=1)
    assert answer_line(behind_a_proxy) == "STORED ID1 offset 17, durable"
    spooled = Spooled("ID2", "UNAVAILABLE", "no route", 1_764_000_000_000, maybe_stored=False)
    assert answer_line(spooled) == (
        "SPOOLED ID2: UNAVAILABLE (no route); in the outbox, next attempt at "
        "2025-11-24T16:00:00.000Z"
    )
    rejected = InvalidMessageError(grpc.StatusCode.INVALID_ARGUMENT, "tag", "too long", "ID3")
    assert answer_line(rejected) == "REJECTED INVALID_ARGUMENT field tag: too long"
    assert answer_line(DeadlineExceededError("no answer", "ID4")).startswith("NO_ANSWER: ")


def test_a_load_counts_answers_and_takes_nearest_rank_percentiles() -> None:
    load = Load()
    for i in range(1, 101):
        load.add(Stored(f"ID{i}", "b", 0, i, durable=True, attempts=1), i / 1000)
    assert (load.percentile_ms(0.50), load.percentile_ms(0.99)) == pytest.approx((50.0, 99.0))
    assert load.all_taken()
    load.add(InvalidMessageError(grpc.StatusCode.INVALID_ARGUMENT, "body", "empty"), 0.001)
    assert load.counts == {"STORED": 100, "REJECTED": 1}
    assert not load.all_taken()


def test_a_load_says_why_its_messages_were_spooled() -> None:
    load = Load()
    for i, cause in enumerate(("THROTTLED", "THROTTLED", "UNAVAILABLE")):
        load.add(Spooled(f"ID{i}", cause, "", 1_764_000_000_000, maybe_stored=False), 0.001)
    load.add(Stored("ID9", "b", 0, 9, durable=True, attempts=1), 0.001)
    first = summary_text(load).splitlines()[0]
    assert first.endswith("SPOOLED 3 (THROTTLED 2, UNAVAILABLE 1), STORED 1")


def test_a_body_is_text_when_it_is_utf8_and_base64_otherwise() -> None:
    assert body_fields("héllo".encode()) == {"body": "héllo", "body_encoding": "utf-8"}
    assert body_fields(b"\xff\x00") == {"body": "/wA=", "body_encoding": "base64"}
