"""How ``rocketbox send`` shows its answers: one readable line (or JSON object) per answer, and a
load's summary (counts per answer, msgs/s, latency percentiles)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from rocketbox.admin_render import format_time_ms
from rocketbox_client import RejectedError, RocketboxError, SendResult, Spooled, Stored

# A load's answers beyond REJECTED: the deadline passed (may or may not be stored), or a fault.
NO_ANSWER = "NO_ANSWER"


def answer_name(answer: SendResult | RocketboxError) -> str:
    if isinstance(answer, Stored):
        return "STORED"
    if isinstance(answer, Spooled):
        return "SPOOLED"
    if isinstance(answer, RejectedError):
        return "REJECTED"
    return NO_ANSWER


def is_taken(answer: SendResult | RocketboxError) -> bool:
    """STORED or SPOOLED: the message will reach the broker."""
    return isinstance(answer, Stored | Spooled)


def answer_to_dict(answer: SendResult | RocketboxError) -> dict[str, Any]:
    data: dict[str, Any] = {"answer": answer_name(answer), "message_id": answer.message_id}
    if isinstance(answer, Stored):
        data.update(
            broker_name=answer.broker_name,
            queue_id=answer.queue_id,
            queue_offset=answer.queue_offset,
            durable=answer.durable,
            attempts=answer.attempts,
        )
    elif isinstance(answer, Spooled):
        data.update(
            cause=answer.cause,
            detail=answer.detail,
            next_attempt_time=format_time_ms(answer.next_attempt_time_ms),
            maybe_stored=answer.maybe_stored,
        )
    elif isinstance(answer, RejectedError):
        data.update(
            code=answer.code.name,
            field=answer.field,
            reason=answer.reason,
            retriable=answer.retriable,
            retry_after_ms=answer.retry_after_ms,
        )
    else:
        data.update(error=str(answer), retriable=answer.retriable)
    return data


def answer_json(answer: SendResult | RocketboxError) -> str:
    return json.dumps(answer_to_dict(answer), sort_keys=True)


def answer_line(answer: SendResult | RocketboxError) -> str:
    if isinstance(answer, Stored):
        durable = "durable" if answer.durable else "NOT durable yet (stored, flush timed out)"
        # The broker picks the queue and its answer names none (queue_id -1), nor the broker
        # when a proxy in front of several picked it (broker_name empty).
        broker = f" on {answer.broker_name}" if answer.broker_name else ""
        queue = f" queue {answer.queue_id}" if answer.queue_id >= 0 else ""
        return f"STORED {answer.message_id}{broker}{queue} offset {answer.queue_offset}, {durable}"
    if isinstance(answer, Spooled):
        maybe = "; it may already be stored" if answer.maybe_stored else ""
        return (
            f"SPOOLED {answer.message_id}: {answer.cause} ({answer.detail}); in the outbox, next "
            f"attempt at {format_time_ms(answer.next_attempt_time_ms)}{maybe}"
        )
    if isinstance(answer, RejectedError):
        where = f" field {answer.field}:" if answer.field else ""
        after_ms = answer.retry_after_ms
        again = f" (retry after {after_ms} ms)" if after_ms is not None else ""
        return f"REJECTED {answer.code.name}{where} {answer.reason}{again}"
    return f"{NO_ANSWER}: {answer}"


@dataclass
class Load:
    """The answers of a ``--count`` load."""

    counts: dict[str, int] = field(default_factory=dict)
    # SPOOLED answers by cause (THROTTLED, UNAVAILABLE, …): why the broker did not take them.
    spooled_causes: dict[str, int] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    # Ctrl-C stopped the load before --count was sent.
    interrupted: bool = False
    # The first rejection or fault, to show what went wrong.
    first_problem: RocketboxError | None = None

    def add(self, answer: SendResult | RocketboxError, latency_s: float) -> None:
        name = answer_name(answer)
        self.counts[name] = self.counts.get(name, 0) + 1
        if isinstance(answer, Spooled):
            self.spooled_causes[answer.cause] = self.spooled_causes.get(answer.cause, 0) + 1
        self.latencies_s.append(latency_s)
        if isinstance(answer, RocketboxError) and self.first_problem is None:
            self.first_problem = answer

    def all_taken(self) -> bool:
        return set(self.counts) <= {"STORED", "SPOOLED"}

    def total(self) -> int:
        return sum(self.counts.values())

    def percentile_ms(self, fraction: float) -> float:
        """Nearest-rank percentile of the latencies, in milliseconds (0 with none)."""
        if not self.latencies_s:
            return 0.0
        ordered = sorted(self.latencies_s)
        rank = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
        return ordered[rank] * 1000

    def rate_per_s(self) -> float:
        return self.total() / self.elapsed_s if self.elapsed_s > 0 else 0.0


def summary_to_dict(load: Load) -> dict[str, Any]:
    data: dict[str, Any] = {
        "sent": load.total(),
        "answers": dict(sorted(load.counts.items())),
        "spooled_causes": dict(sorted(load.spooled_causes.items())),
        "elapsed_s": round(load.elapsed_s, 3),
        "interrupted": load.interrupted,
        "msgs_per_s": round(load.rate_per_s(), 1),
        "latency_p50_ms": round(load.percentile_ms(0.50), 2),
        "latency_p99_ms": round(load.percentile_ms(0.99), 2),
    }
    if load.first_problem is not None:
        data["first_problem"] = answer_to_dict(load.first_problem)
    return data


def summary_json(load: Load) -> str:
    return json.dumps(summary_to_dict(load), sort_keys=True)


def summary_text(load: Load) -> str:
    causes = ", ".join(f"{cause} {n}" for cause, n in sorted(load.spooled_causes.items()))
    answers = ", ".join(
        f"{name} {n}" + (f" ({causes})" if name == "SPOOLED" and causes else "")
        for name, n in sorted(load.counts.items())
    )
    stopped = " (interrupted)" if load.interrupted else ""
    lines = [
        f"sent {load.total()} in {load.elapsed_s:.2f} s{stopped}: {answers}",
        f"{load.rate_per_s():.1f} msgs/s; latency p50 {load.percentile_ms(0.50):.2f} ms, "
        f"p99 {load.percentile_ms(0.99):.2f} ms",
    ]
    if load.first_problem is not None:
        lines.append(f"first problem: {answer_line(load.first_problem)}")
    return "\n".join(lines)
