"""structlog set-up: console lines on a TTY, JSON lines otherwise.

Standard-library loggers (uvicorn's among them) are routed through the same
processor chain with :class:`structlog.stdlib.ProcessorFormatter`, so a log file
holds one format. Event names are dotted verbs: ``backend.started``,
``request.finished``.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

__all__ = ["configure_logging", "get_logger"]


def configure_logging(
    fmt: Literal["auto", "json", "console"] = "auto",
    level: str = "info",
) -> None:
    """Configure structlog and the standard library's root logger (to stderr).

    Args:
        fmt: ``json``, ``console``, or ``auto`` (console when stderr is a TTY).
        level: minimum level name (``debug``, ``info``, ``warning``, ``error``).
    """
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            # Below the level, an event is dropped before the others run: the canonical
            # line (request.finished) otherwise cost every request its time stamp and
            # dict work under ``log_level = "warning"`` (docs/overhead.md).
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uv = logging.getLogger(name)
        uv.handlers[:] = []
        uv.propagate = True
    # httpx logs every request at INFO; that is our own traffic to the backends.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """Return a structlog logger bound to ``name`` (use the module's ``__name__``)."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
