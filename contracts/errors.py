"""The error body every rote endpoint answers with, and the stable error codes.

Replies carry ADR-32 headers (`Nats-Service-Error`, numeric `Nats-Service-Error-Code`)
and this JSON body: `{"error": {"code": "...", "message": "...", "field": ...}}`.
"""

from __future__ import annotations

from typing import Any

import msgspec

# Stable string code -> numeric status used in the Nats-Service-Error-Code header.
ERROR_STATUS: dict[str, int] = {
    "malformed": 400,  # body is not valid JSON
    "invalid_request": 400,  # JSON, but a field is missing, unknown or of the wrong type
    "auth": 401,
    "over_budget": 402,
    "tool_not_allowed": 403,
    "path_denied": 403,
    "command_denied": 403,
    "not_found": 404,
    "conflict": 409,
    # An action sent under an idempotency key that an earlier call with that key started
    # and never finished: whether it acted is unknown, so it is not run again.
    "in_doubt": 409,
    "too_large": 413,  # over the NATS max payload
    "rate_limited": 429,
    "internal": 500,
    "upstream": 502,
    "unavailable": 503,
    "timeout": 504,
    "overloaded": 529,
}


class ErrorInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    code: str
    message: str
    field: str | None = None
    details: dict[str, Any] | None = None


class ErrorReply(msgspec.Struct, kw_only=True):
    error: ErrorInfo


def status_for(code: str) -> int:
    return ERROR_STATUS.get(code, 500)
