"""Process-wide logging, set up once by the command line.

``text`` is for people at a terminal. ``json`` writes one object per line for log pipelines
(Loki, Elasticsearch, Cloud Logging): time, level, logger, thread and message, plus every
``extra`` field a line carries. Lines about one message carry ``message_id`` and ``topic`` as
such fields (``extra={"message_id": ..., "topic": ...}``), so a pipeline can follow one message
through the sidecar and the broker.
"""

from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter

LOG_FORMATS = ("text", "json")
# `rocketbox --log-level`: logging's own names, quietest last.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s"
JSON_FIELDS = "%(levelname)s %(name)s %(threadName)s %(message)s"
JSON_RENAMES = {"levelname": "level", "name": "logger", "threadName": "thread"}


def configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(
            JsonFormatter(
                # "time": ISO 8601 in UTC with milliseconds, what log pipelines parse.
                JSON_FIELDS,
                rename_fields=JSON_RENAMES,
                timestamp="time",
            )
        )
    elif log_format == "text":
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    else:
        raise ValueError(f"log_format must be one of {LOG_FORMATS}, got {log_format!r}")
    logging.basicConfig(level=level, handlers=[handler], force=True)
