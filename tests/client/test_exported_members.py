"""rocketbox_client's public names are exactly ``__all__``, each importable from the package and
documented; nothing private leaks into it."""

from __future__ import annotations

import rocketbox_client

EXPECTED = {
    "AsyncBatchingSender", "AsyncClient", "BatchingSender", "Client", "DeadlineExceededError",
    "InvalidMessageError", "Message", "RejectedError", "RequestTooLargeError",
    "ResourceExhaustedError", "RocketboxError",
    "SendResult", "SenderStats", "Spooled", "Stored", "TlsConfig", "TopicNotFoundError",
    "UnauthenticatedError", "UnavailableError",
}  # fmt: skip


def test_all_is_the_public_api() -> None:
    assert set(rocketbox_client.__all__) == EXPECTED
    assert sorted(rocketbox_client.__all__) == rocketbox_client.__all__
    public = {n for n in vars(rocketbox_client) if not n.startswith("_")}
    modules = {"async_client", "async_sender", "batching", "client", "converter", "errors",
               "message", "message_id", "security", "sender", "annotations"}  # fmt: skip
    assert public - modules == EXPECTED


def test_every_exported_class_is_documented() -> None:
    for name in EXPECTED - {"SendResult"}:
        assert getattr(rocketbox_client, name).__doc__, name
