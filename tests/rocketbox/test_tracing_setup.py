"""The servers' OpenTelemetry SDK from the OTEL_* environment (rocketbox/tracing_setup.py).

It proves: without OTEL_TRACES_EXPORTER (or with ``none``, or OTEL_SDK_DISABLED=true) nothing is
installed; an exporter named there is fed by the provider installed, whose service is
``rocketbox-<command>`` unless OTEL_SERVICE_NAME names it; an exporter that is not installed is a
usage error naming those that are.
"""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from rocketbox.tracing_setup import configure_tracing


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[TracerProvider]]:
    """The providers configure_tracing installs, kept from the process's global one."""
    providers: list[TracerProvider] = []
    monkeypatch.setattr(trace, "set_tracer_provider", providers.append)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    yield providers
    for provider in providers:
        provider.shutdown()


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_TRACES_EXPORTER": ""},
        {"OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"},
    ],
)
def test_nothing_is_installed_unless_an_exporter_is_named(
    environ: dict[str, str], installed: list[TracerProvider]
) -> None:
    assert configure_tracing(environ, "sidecar") == []
    assert installed == []


def test_a_named_exporter_is_fed_under_the_commands_service_name(
    installed: list[TracerProvider],
) -> None:
    assert configure_tracing({"OTEL_TRACES_EXPORTER": "console"}, "sidecar") == ["console"]
    [provider] = installed
    assert provider.resource.attributes["service.name"] == "rocketbox-sidecar"


def test_otel_service_name_names_the_service(
    installed: list[TracerProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "orders-sidecar")
    environ = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "orders-sidecar"}
    configure_tracing(environ, "sidecar")
    [provider] = installed
    assert provider.resource.attributes["service.name"] == "orders-sidecar"


def test_an_exporter_not_installed_is_a_usage_error(installed: list[TracerProvider]) -> None:
    with pytest.raises(click.UsageError, match=r"'zipkin' is installed \(installed: .*console"):
        configure_tracing({"OTEL_TRACES_EXPORTER": "console,zipkin"}, "broker")
    assert installed == []
