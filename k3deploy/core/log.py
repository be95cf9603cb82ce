"""structlog set-up: readable console lines by default, JSON lines with --log-json.

Every event passes the redaction processor, so a secret that slips into an event is masked
before it reaches any output.
"""

from __future__ import annotations

import logging
import sys

import structlog
from structlog.typing import EventDict, FilteringBoundLogger, WrappedLogger

from k3deploy.core.redact import redact_obj


def _redact_processor(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    return {key: redact_obj(value) for key, value in event_dict.items()}


def configure(json_lines: bool = False, verbose: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    renderer = (structlog.processors.JSONRenderer() if json_lines
                else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact_processor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Paramiko logs handshake chatter on its own logger; keep it out of the user's terminal.
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)


def get(**bound: str | None) -> FilteringBoundLogger:
    logger: FilteringBoundLogger = structlog.get_logger("k3deploy")  # make_filtering_bound_logger's class
    return logger.bind(**bound)
