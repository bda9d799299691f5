"""Errors a handler raises to answer with a structured error, and errors a caller gets
back from a remote endpoint. Both carry the stable string codes of contracts.errors."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import msgspec

from contracts.errors import ErrorInfo, status_for
from services.kernel.secrets import redact
from services.kernel.text import cut_text

_FIELD_AT = re.compile(r"at `\$\.?(?P<path>[^`]*)`")
_UNKNOWN_FIELD = re.compile(r"unknown field `(?P<name>[^`]+)`")
_MISSING_FIELD = re.compile(r"missing required field `(?P<name>[^`]+)`")

# An error echoes what it was given (an unknown field's name, a bad value, what a tool
# call was given): bounded, so the reply stays small whatever the request held.
MAX_MESSAGE_CHARS = 2000
MAX_FIELD_CHARS = 200


class ServiceError(Exception):
    """Raise inside an endpoint handler to answer with this error."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.details = details

    @property
    def status(self) -> int:
        return status_for(self.code)

    def info(self) -> ErrorInfo:
        return ErrorInfo(
            code=self.code,
            message=cut_text(redact(self.message), MAX_MESSAGE_CHARS),
            # Masked like the message: an unknown field's name is the request's own text
            # (a URL or a key pasted as a JSON key), and the message quotes it masked.
            field=None if self.field is None else cut_text(redact(self.field), MAX_FIELD_CHARS),
            details=self.details,
        )


class RemoteError(Exception):
    """An endpoint we called answered with an error (or did not answer at all)."""

    def __init__(self, subject: str, info: ErrorInfo, status: int | None = None) -> None:
        super().__init__(f"{subject}: {info.code}: {info.message}")
        self.subject = subject
        self.info = info
        self.code = info.code
        self.message = info.message
        self.status = status if status is not None else status_for(info.code)


def validation_error(exc: msgspec.ValidationError | msgspec.DecodeError) -> ServiceError:
    """Turn a msgspec decode failure into an error naming the offending field."""
    text = str(exc)
    if isinstance(exc, msgspec.ValidationError):
        field = None
        at = _FIELD_AT.search(text)
        if at:
            field = at.group("path") or None
        # msgspec's path ends at the object: the unknown or missing field is inside it.
        named = _UNKNOWN_FIELD.search(text) or _MISSING_FIELD.search(text)
        if named:
            field = f"{field}.{named.group('name')}" if field else named.group("name")
        return ServiceError("invalid_request", text, field=field)
    return ServiceError("malformed", f"body is not valid JSON: {text}")


def stopping(exc: BaseException) -> bool:
    """Whether `exc` is this task being cancelled or the process exiting, as opposed to
    a BaseException a handler raised, or a CancelledError passed on from a future that
    was cancelled elsewhere: those are failures of one message, not a reason to stop."""
    if isinstance(exc, KeyboardInterrupt | SystemExit):
        return True
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
