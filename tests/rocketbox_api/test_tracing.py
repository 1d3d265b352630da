"""W3C trace context as rocketbox reads it (rocketbox_api/tracing.py).

It proves:
- traceparent: version 00 exactly as W3C defines it, a later version read as far as 00 goes;
  uppercase hex, all-zero ids, version ff, a short or padded one are invalid;
- tracestate: at most 512 characters and 32 members, each ``key=value``;
- from a call's metadata: a valid traceparent (and its tracestate) become the properties to add;
  an invalid or repeated traceparent is ignored with its tracestate (not a rejection); an
  invalid tracestate beside a valid parent is left out; several tracestate fields are one list;
- added to a message's properties only when it has no traceparent of its own.
"""

from __future__ import annotations

import pytest

from rocketbox_api.tracing import (
    TRACESTATE_CHARS_MAX,
    TRACESTATE_MEMBERS_MAX,
    trace_properties,
    valid_traceparent,
    valid_tracestate,
    with_trace,
)
from tests.otel_spans import TRACEPARENT, TRACESTATE

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    "value",
    [
        TRACEPARENT,
        f"00-{TRACE_ID}-{SPAN_ID}-00",  # not sampled: still a context to carry
        f"01-{TRACE_ID}-{SPAN_ID}-01-what-comes-later",  # a later version, read as 00
        f"cc-{TRACE_ID}-{SPAN_ID}-01",
    ],
)
def test_valid_traceparents(value: str) -> None:
    assert valid_traceparent(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        f"00-{TRACE_ID.upper()}-{SPAN_ID}-01",
        f"00-{'0' * 32}-{SPAN_ID}-01",
        f"00-{TRACE_ID}-{'0' * 16}-01",
        f"ff-{TRACE_ID}-{SPAN_ID}-01",
        f"00-{TRACE_ID}-{SPAN_ID}-01-more",  # version 00 has nothing after its flags
        f"00-{TRACE_ID}-{SPAN_ID}-1",
        f"00-{TRACE_ID[:-1]}-{SPAN_ID}-01",
        f" 00-{TRACE_ID}-{SPAN_ID}-01",
        f"00_{TRACE_ID}_{SPAN_ID}_01",
    ],
)
def test_invalid_traceparents(value: str) -> None:
    assert not valid_traceparent(value)


def test_tracestate_limits() -> None:
    assert valid_tracestate(TRACESTATE)
    assert valid_tracestate("vendor@tenant=x, ,other=y")  # an empty member is allowed
    members = ",".join(f"k{n}=v" for n in range(TRACESTATE_MEMBERS_MAX))
    assert valid_tracestate(members)
    assert not valid_tracestate(members + ",one=more")
    assert not valid_tracestate("k=" + "v" * (TRACESTATE_CHARS_MAX - 1))
    assert not valid_tracestate("no-equals-sign")
    assert not valid_tracestate("UPPER=case")
    assert not valid_tracestate("k=a=b")


def test_a_valid_traceparent_and_tracestate_become_properties() -> None:
    metadata = [("user-agent", "grpc-python"), ("traceparent", TRACEPARENT),
                ("tracestate", TRACESTATE)]  # fmt: skip
    assert trace_properties(metadata) == {"traceparent": TRACEPARENT, "tracestate": TRACESTATE}
    assert trace_properties([("traceparent", TRACEPARENT)]) == {"traceparent": TRACEPARENT}


def test_no_or_an_invalid_traceparent_is_ignored_with_its_tracestate() -> None:
    assert trace_properties(None) is None
    assert trace_properties([]) is None
    assert trace_properties([("tracestate", TRACESTATE)]) is None
    assert trace_properties([("traceparent", "00-nonsense"), ("tracestate", TRACESTATE)]) is None
    twice = [("traceparent", TRACEPARENT), ("traceparent", TRACEPARENT)]
    assert trace_properties(twice) is None
    assert trace_properties([("traceparent-bin", b"\x00")]) is None


def test_an_invalid_tracestate_is_left_out_and_several_are_one_list() -> None:
    bad = [("traceparent", TRACEPARENT), ("tracestate", "k=" + "v" * TRACESTATE_CHARS_MAX)]
    assert trace_properties(bad) == {"traceparent": TRACEPARENT}
    split = [("traceparent", TRACEPARENT), ("tracestate", "a=1"), ("tracestate", "b=2")]
    assert trace_properties(split) == {"traceparent": TRACEPARENT, "tracestate": "a=1,b=2"}


def test_a_message_keeps_its_own_trace_context() -> None:
    call = {"traceparent": TRACEPARENT, "tracestate": TRACESTATE}
    plain = {"region": "eu"}
    with_trace(plain, call)
    assert plain == {"region": "eu", **call}
    own = {"traceparent": "whatever the app sent"}
    with_trace(own, call)
    assert own == {"traceparent": "whatever the app sent"}
    state_only = {"tracestate": "mine=1"}
    with_trace(state_only, call)
    assert state_only == {"tracestate": "mine=1", "traceparent": TRACEPARENT}
