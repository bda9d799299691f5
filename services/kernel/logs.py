"""structlog, configured once: JSON lines in production, a readable console on a TTY.

Bind run and task ids for a block of work with `structlog.contextvars.bound_contextvars
(run_id=..., task_id=...)`; every line logged inside carries them.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog
from structlog.tracebacks import ExceptionDictTransformer

from services.kernel.secrets import redact, redact_value

_configured = False


def _redact(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    return redact_value(event_dict)


class _Masked:
    """The renderer, with the line it writes masked once more: a value that was no
    string before rendering (an object's repr, a Settings holding a URL) is text only
    now. One processor, so the renderer stays the last one."""

    def __init__(self, renderer: Any) -> None:
        self.renderer = renderer

    def __call__(self, logger: Any, name: str, event_dict: dict[str, Any]) -> str:
        return redact(self.renderer(logger, name, event_dict))


def configure_logging(fmt: str = "auto", level: str = "info", stream: TextIO | None = None) -> None:
    """Idempotent: the first call wins, later calls (tests, nested CLIs) are no-ops."""
    global _configured
    if _configured:
        return
    stream = stream or sys.stderr
    use_console = fmt == "console" or (fmt == "auto" and stream.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=stream.isatty())
        if use_console
        else structlog.processors.JSONRenderer()
    )
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    # Tracebacks become plain data before redaction, so a secret inside an exception
    # message is masked like any other value. No local variables: their reprs are cut to
    # 80 characters, and a secret cut in two is no longer the registered value.
    processors.append(
        structlog.processors.format_exc_info
        if use_console
        else structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False))
    )
    processors += [_redact, _Masked(renderer)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )
    _configured = True


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
