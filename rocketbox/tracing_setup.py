"""The servers' OpenTelemetry SDK, configured from the standard ``OTEL_*`` environment.

``OTEL_TRACES_EXPORTER`` unset, empty or ``none`` (or ``OTEL_SDK_DISABLED=true``): nothing is
configured, and the spans of rocketbox_api/tracing.py stay the API's no-ops. Otherwise each
exporter it names (``otlp``, ``console``, ...) is found by the name the SDK itself uses (the
``opentelemetry_traces_exporter`` entry points of the installed packages) and fed by a batch
processor; the exporters read their own variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ...) and the
resource ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``, the service's name defaulting to
``rocketbox-<command>``. The CLI calls it as a server starts (run_settings.py's ``run_async``),
so ``--help`` and the client commands never read it. The provider flushes its spans when the
process exits.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib.metadata import entry_points

import click

LOG = logging.getLogger(__name__)
EXPORTERS_GROUP = "opentelemetry_traces_exporter"


def configure_tracing(environ: Mapping[str, str], command: str) -> list[str]:
    """Installs the global TracerProvider when ``OTEL_TRACES_EXPORTER`` asks for one; the names
    of the exporters it feeds (none: nothing was installed). Raises click.UsageError for an
    exporter that is not installed, or an SDK that is not."""
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    names = [n for n in names if n != "none"]
    if not names or environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    try:
        from opentelemetry import trace  # noqa: PLC0415 - optional: the otel extra
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415 - optional, as above
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415 - optional, as above
        from opentelemetry.sdk.trace.export import (  # noqa: PLC0415 - optional, as above
            BatchSpanProcessor,
        )
    except ImportError as e:
        raise click.UsageError(
            "OTEL_TRACES_EXPORTER is set but opentelemetry-sdk is not installed: "
            "pip install 'rocketbox[otel]'"
        ) from e
    # The environment's OTEL_SERVICE_NAME, when set, is the resource's own and wins.
    service = f"rocketbox-{command}" if command else "rocketbox"
    named = {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": service}
    exporters = []
    for name in names:
        found = list(entry_points(group=EXPORTERS_GROUP, name=name))
        if not found:
            known = sorted({e.name for e in entry_points(group=EXPORTERS_GROUP)})
            raise click.UsageError(
                f"OTEL_TRACES_EXPORTER: no span exporter {name!r} is installed "
                f"(installed: {', '.join(known) or 'none'})"
            )
        exporters.append(found[0].load())
    provider = TracerProvider(resource=Resource.create(named))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter()))
    trace.set_tracer_provider(provider)
    LOG.info("OpenTelemetry spans exported to %s", ", ".join(names))
    return names
