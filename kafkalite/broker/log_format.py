"""How a broker process writes its log lines: Kafka-like text, or one JSON object per line
(``log.format=json``) for log shippers (Loki, Elasticsearch, Cloud Logging ...).

A JSON line has ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``, ``message``,
``broker_id``, and ``exception`` (the formatted traceback) when the record carries one; the
message is formatted with its arguments first, so the object never holds a raw ``%s``.

Concurrency: :class:`logging.Formatter` subclasses are called under the handler's lock, from
whichever thread logs.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys

TEXT_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"
#: What the broker's quieter dependencies log at least (their INFO lines are noise to an operator).
QUIET_LOGGERS = ("kazoo", "aiohttp")


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def __init__(self, broker_id: int | None = None) -> None:
        super().__init__()
        self.broker_id = broker_id

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self.broker_id is not None:
            line["broker_id"] = self.broker_id
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str) -> logging.Handler:
    """Text lines on standard error at ``level``, before the configuration is read; returns the
    handler, whose formatter :func:`use_format` may switch."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return handler


def use_format(handler: logging.Handler, log_format: str, broker_id: int) -> None:
    """Switch ``handler`` to ``log_format`` (``text`` or ``json``, as ``log.format`` says)."""
    if log_format == "json":
        handler.setFormatter(JsonLogFormatter(broker_id))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
